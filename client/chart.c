/* chart.c: line charts and heatmaps as SVG (see chart.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "png.h"

/* A line chart's frame: its size, and the margins around the plot. */
struct geom {
	int w, h, ml, mr, mt, mb;
};

#define X_DIGIT 7.2	/* px: the width of a digit of an 11 px label */
#define END_CHAR 6.6	/* px: a character of an end label, on average */
#define END_MAX 22	/* bytes of a run's name at a line's end */

void xml_text(FILE *f, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(*s, f);
		}
}

/* 1, 2 or 5 times a power of ten, near span / 5. */
static double nice_step(double span)
{
	double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
	return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* A value the axis can place: beyond 1e300 (a damaged row), the axis's
 * span and margins would overflow to Inf and every point to NaN. */
static int usable(double y, int log_y)
{
	return fabs(y) <= 1e300 && (!log_y || (y > 0 && y >= 1e-300));
}

struct axis {
	double lo, hi;
	int log;
	double px0, px1;	/* pixel positions of lo and hi */
};

static double place(const struct axis *a, double v)
{
	double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
			  : (v - a->lo) / (a->hi - a->lo);
	return a->px0 + t * (a->px1 - a->px0);
}

/*
 * Ticks at whole multiples of a nice step, counted by index: adding the
 * step to a running value stops moving at large magnitudes (steps near
 * 2^62, a nanosecond clock), and the loop with it. The x axis is steps:
 * whole numbers, never a tick between two.
 */
static void ticks_linear(FILE *f, const struct geom *g, const struct axis *a, int vertical)
{
	double st = nice_step(a->hi - a->lo);
	if (!vertical && st < 1)
		st = 1;
	if (!(st > 0) || !isfinite(st))
		return;
	/* long double: a step near 2^62 and its neighbour 500 away are apart
	 * in its 64-bit mantissa, not in a double's 53 bits */
	long double first = ceill((long double)a->lo / st), last = floorl((long double)a->hi / st + 1e-9L);
	if (!(last - first >= 0 && last - first <= 50))
		return;
	/* step labels may be 19 digits wide: every k-th, so that none overlap */
	char lab[64];
	int every = 1, len = snprintf(lab, sizeof(lab), "%.0Lf", fmaxl(fabsl(first * st), fabsl(last * st))) + 1;
	double gap = fabs(a->px1 - a->px0) * st / (a->hi - a->lo);	/* px from tick to tick */
	if (!vertical && gap > 0)
		every = (int)ceil((len * X_DIGIT + 12) / gap);
	for (int k = 0; k <= (int)(last - first); k++) {
		long double i = first + k, v = fabsl(i) < 0.5L ? 0 : i * st;
		double p = place(a, (double)v);
		if (vertical) {
			fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
				   "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%.4g</text>\n",
				g->ml, g->w - g->mr, p, p, g->ml - 6, p + 4, (double)v);
			continue;
		}
		if (k % every)
			continue;
		/* centred on its tick, but inside the chart */
		double half = snprintf(lab, sizeof(lab), "%.0Lf", v) * X_DIGIT / 2;
		double tx = fmax(half + 2, fmin(p, g->w - 2 - half));
		fprintf(f, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
			   "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%s</text>\n",
			p, p, g->h - g->mb, g->h - g->mb + 4, tx, g->h - g->mb + 17, lab);
	}
}

/*
 * 1, 2 and 5 of each decade when the axis spans less than two, every
 * digit when it spans less than one (so a narrow range still has three
 * labels), and every k-th decade when it spans many (labels 11 px tall).
 */
static void ticks_log(FILE *f, const struct geom *g, const struct axis *a)
{
	static const double mult[] = { 1, 2, 5, 3, 4, 6, 7, 8, 9 };
	double lo = floor(log10(a->lo)), hi = ceil(log10(a->hi)), decades = log10(a->hi) - log10(a->lo);
	int n_mult = decades < 1 ? 9 : decades < 2 ? 3 : 1;
	/* a short panel has room for fewer labels */
	double every = decades > (g->h - g->mt - g->mb) / 30.0 ? ceil(decades * 30 / (g->h - g->mt - g->mb)) : 1;

	if (!isfinite(lo) || !isfinite(hi) || hi - lo > 700)
		return;
	for (double e = lo; e <= hi; e++)
		for (int m = 0; m < n_mult; m++) {
			double v = mult[m] * pow(10, e);
			if (v < a->lo * (1 - 1e-9) || v > a->hi * (1 + 1e-9) || fmod(e - lo, every) != 0)
				continue;
			double p = place(a, v);
			fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
				   "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%.3g</text>\n",
				g->ml, g->w - g->mr, p, p, g->ml - 6, p + 4, v);
		}
}

int chart_y_range(const struct line_chart *c, double *lo, double *hi)
{
	*lo = INFINITY;
	*hi = -INFINITY;
	for (size_t s = 0; s < c->n_series; s++)
		for (size_t i = 0; i < c->series[s].n; i++)
			if (usable(c->series[s].y[i], c->log_y)) {
				*lo = fmin(*lo, c->series[s].y[i]);
				*hi = fmax(*hi, c->series[s].y[i]);
			}
	if (!(*lo <= *hi))
		return -1;
	for (size_t k = 0; k < c->n_hlines; k++)
		if (usable(c->hlines[k].y, c->log_y)) {
			*lo = fmin(*lo, c->hlines[k].y);
			*hi = fmax(*hi, c->hlines[k].y);
		}
	return 0;
}

/* A run's name at a line's end: its first END_MAX bytes, not cut inside a UTF-8 character. */
static int end_text(char *b, size_t n, const char *name)
{
	size_t len = strlen(name);
	if (len <= END_MAX)
		return snprintf(b, n, "%s", name);
	size_t cut = END_MAX - 1;
	while (cut > 0 && ((unsigned char)name[cut] & 0xc0) == 0x80)
		cut--;
	return snprintf(b, n, "%.*s…", (int)cut, name);
}

struct end_label {
	double y, want;	/* the text's baseline: where it goes, where the line ends */
	size_t s;
};

static int by_y(const void *a, const void *b)
{
	double x = ((const struct end_label *)a)->y, y = ((const struct end_label *)b)->y;
	return (x > y) - (x < y);
}

/*
 * Each series' run named just right of its last point, in its colour, so
 * that twelve lines are told apart without the legend; labels that would
 * touch are pushed apart (12 px), within the plot's height.
 */
static void end_labels(FILE *f, const struct geom *g, const struct line_chart *c, const struct axis *x,
		       const struct axis *y)
{
	struct end_label *e = malloc((c->n_series + 1) * sizeof(*e));
	size_t n = 0;
	double lx = -INFINITY;

	if (!e)
		return;	/* the legend still names them */
	for (size_t s = 0; s < c->n_series; s++) {
		const struct chart_series *se = &c->series[s];
		for (size_t i = se->n; se->run && i-- > 0;)
			if (usable(se->y[i], c->log_y)) {
				e[n].y = e[n].want = place(y, se->y[i]) + 4;
				e[n++].s = s;
				lx = fmax(lx, place(x, se->x[i]));
				break;
			}
	}
	qsort(e, n, sizeof(*e), by_y);
	for (size_t i = 1; i < n; i++)
		e[i].y = fmax(e[i].y, e[i - 1].y + 12);
	for (size_t i = n; i-- > 0;)	/* back inside the plot, from the bottom */
		e[i].y = fmin(e[i].y, i + 1 < n ? e[i + 1].y - 12 : g->h - g->mb);
	for (size_t i = 0; i < n; i++) {
		const struct chart_series *se = &c->series[e[i].s];
		char b[3 * END_MAX + 8];
		end_text(b, sizeof(b), se->run);
		/* a leader from the line's end when the name had to move */
		if (fabs(e[i].y - e[i].want) > 3)
			fprintf(f, "<line class=\"lead\" style=\"stroke:%s\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
				   "y2=\"%.1f\"/>", se->color, lx + 2, e[i].want - 4, lx + 7, e[i].y - 4);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"el\" style=\"fill:%s\" data-run=\"", lx + 9, e[i].y,
			se->color);
		xml_text(f, se->run);
		fputs("\">", f);
		xml_text(f, b);
		fputs("</text>\n", f);
	}
	free(e);
}

static void legend(FILE *f, const struct line_chart *c)
{
	fputs("<div class=\"legend\">", f);
	for (size_t s = 0; s < c->n_series; s++) {
		fputs("<span", f);
		if (c->series[s].run) {
			fputs(" data-run=\"", f);
			xml_text(f, c->series[s].run);
			fputs("\"", f);
		}
		fprintf(f, "><i style=\"border-top: 3px %s %s\"></i>", c->series[s].dashed ? "dashed" : "solid",
			c->series[s].color);
		xml_text(f, c->series[s].label);
		fputs("</span>", f);
	}
	fputs("</div>\n", f);
}

/*
 * The reference and threshold lines (labels 0), drawn before the data so
 * that the data stays on top; then (labels 1) their labels, drawn last,
 * over the data, each on a white halo (the stroke painted under the
 * fill), so that a line passing through a label leaves it readable.
 * Threshold labels that would touch (two rules at one value, an ops
 * trial's overlapped) are pushed 12 px apart, as the end labels are.
 */
static void hlines(FILE *f, const struct geom *g, const struct line_chart *c, const struct axis *y, int labels)
{
	struct end_label *at = labels ? malloc((c->n_hlines + 1) * sizeof(*at)) : NULL;
	size_t n = 0;

	for (size_t k = 0; at && k < c->n_hlines; k++)
		if (!c->hlines[k].ref && usable(c->hlines[k].y, c->log_y)) {
			at[n].y = at[n].want = place(y, c->hlines[k].y) - 4;
			at[n++].s = k;
		}
	if (n) {
		qsort(at, n, sizeof(*at), by_y);
		for (size_t i = 1; i < n; i++)
			at[i].y = fmax(at[i].y, at[i - 1].y + 12);
		for (size_t i = n; i-- > 0;)	/* back inside the plot, from the bottom; never above its top */
			at[i].y = fmax(fmin(at[i].y, i + 1 < n ? at[i + 1].y - 12 : g->h - g->mb - 2), g->mt + 10);
	}
	for (size_t k = 0; k < c->n_hlines; k++) {
		const struct chart_hline *h = &c->hlines[k];
		if (!usable(h->y, c->log_y))
			continue;
		double p = place(y, h->y), ty = p - 4;
		for (size_t i = 0; i < n; i++)
			if (at[i].s == k)
				ty = at[i].y;
		if (!labels)
			fprintf(f, "<line class=\"%s\" stroke=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\">"
				   "<title>", h->ref ? "ref" : "thr", h->color, g->ml, g->w - g->mr, p, p);
		else	/* the reference's label at the left, the thresholds' at the right: apart when they meet */
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"%s\" style=\"fill:%s\" stroke=\"#ffffff\" "
				   "stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\">",
				h->ref ? g->ml + 4 : g->w - g->mr - 4, ty, h->ref ? "refl" : "thrl", h->color);
		xml_text(f, h->label);
		fputs(labels ? "</text>\n" : "</title></line>\n", f);
	}
	free(at);
}

static void series(FILE *f, const struct line_chart *c, const struct axis *x, const struct axis *y)
{
	for (size_t s = 0; s < c->n_series; s++) {
		const struct chart_series *se = &c->series[s];
		fprintf(f, "<g class=\"series\" stroke=\"%s\" fill=\"%s\"", se->color, se->color);
		if (se->run) {
			fputs(" data-run=\"", f);
			xml_text(f, se->run);
			fputs("\"", f);
		}
		fputs("><title>", f);
		xml_text(f, se->label);
		fputs("</title>\n", f);
		int open = 0;
		for (size_t i = 0; i < se->n; i++) {	/* a gap where there is no value */
			if (!usable(se->y[i], c->log_y)) {
				if (open)
					fputs("\"/>\n", f);
				open = 0;
				continue;
			}
			if (!open)
				fprintf(f, "<polyline class=\"line%s\" points=\"", se->dashed ? " dash" : "");
			fprintf(f, "%.1f,%.1f ", place(x, se->x[i]), place(y, se->y[i]));
			open = 1;
		}
		if (open)
			fputs("\"/>\n", f);
		if (se->n <= 60)	/* few snapshots: mark each */
			for (size_t i = 0; i < se->n; i++)
				if (usable(se->y[i], c->log_y))
					fprintf(f, "<circle r=\"2.5\" cx=\"%.1f\" cy=\"%.1f\"/>",
						place(x, se->x[i]), place(y, se->y[i]));
		fputs("</g>\n", f);
	}
}

void chart_line(FILE *f, const struct line_chart *c)
{
	struct geom g = { c->width ? c->width : 900, c->height ? c->height : 300, 72, 40, 12, 42 };

	if (c->end_labels) {	/* room for the longest name at the lines' end */
		size_t longest = 0;
		for (size_t s = 0; s < c->n_series; s++)
			if (c->series[s].run) {
				char b[3 * END_MAX + 8];
				end_text(b, sizeof(b), c->series[s].run);
				longest = strlen(b) > longest ? strlen(b) : longest;
			}
		g.mr = (int)fmax(g.mr, 17 + END_CHAR * (double)longest);
	}
	struct axis x = { INFINITY, -INFINITY, 0, g.ml, g.w - g.mr }, y = { 0, 0, c->log_y, g.h - g.mb, g.mt };
	for (size_t s = 0; s < c->n_series; s++)
		for (size_t i = 0; i < c->series[s].n; i++)
			if (usable(c->series[s].y[i], c->log_y)) {
				x.lo = fmin(x.lo, c->series[s].x[i]);
				x.hi = fmax(x.hi, c->series[s].x[i]);
			}
	fprintf(f, "<svg class=\"chart\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
		   "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">\n", g.w, g.h, g.w, g.h);
	if (!(x.lo <= x.hi) || chart_y_range(c, &y.lo, &y.hi) < 0) {
		fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"empty\">no values yet</text></svg>\n", g.w / 2, g.h / 2);
		return;
	}
	if (c->x_lo < c->x_hi) {
		x.lo = c->x_lo;
		x.hi = c->x_hi;
	}
	if (c->y_lo < c->y_hi && usable(c->y_lo, c->log_y) && usable(c->y_hi, c->log_y)) {
		y.lo = c->y_lo;
		y.hi = c->y_hi;
	}
	if (!c->log_y && y.lo > 0)
		y.lo = 0;	/* drift starts from nothing: show the zero */
	if (c->log_y) {
		y.lo /= 1.15;
		y.hi *= 1.15;
	} else if (y.hi - y.lo < 1e-300) {
		y.hi = y.lo + (y.lo ? fabs(y.lo) : 1);
	} else {
		y.hi += (y.hi - y.lo) * 0.05;
	}
	if (!(x.hi > x.lo)) {	/* one step: in the middle, with a step either side */
		double d = fmax(1, fabs(x.lo) * 1e-12);
		x.lo -= d;
		x.hi += d;
	}
	if (c->log_y)
		ticks_log(f, &g, &y);
	else
		ticks_linear(f, &g, &y, 1);
	ticks_linear(f, &g, &x, 0);
	fprintf(f, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
		   "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>\n",
		g.ml, g.w - g.mr, g.h - g.mb, g.h - g.mb, g.ml, g.ml, g.mt, g.h - g.mb);
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">", (g.ml + g.w - g.mr) / 2, g.h - 6);
	xml_text(f, c->xlabel);
	fprintf(f, "</text><text transform=\"translate(14 %d) rotate(-90)\" class=\"xl\">", (g.mt + g.h - g.mb) / 2);
	xml_text(f, c->ylabel);
	fputs("</text>\n", f);
	hlines(f, &g, c, &y, 0);
	series(f, c, &x, &y);
	hlines(f, &g, c, &y, 1);
	if (c->end_labels)
		end_labels(f, &g, c, &x, &y);
	fputs("</svg>\n", f);
	if (!c->no_legend)
		legend(f, c);
}

/*
 * Diverging, on a log scale: blue below 1, white at 1, red above, the full
 * colour at 1/cap_lo and cap_hi; beyond them (and for a ratio of 0, a
 * tensor identical to the baseline) darker ends of the same hues, so that
 * a value off the scale is marked, not clipped to look like one on it.
 * NaN grey.
 */
static const uint8_t beyond_lo[3] = { 0x05, 0x30, 0x61 }, beyond_hi[3] = { 0x67, 0x00, 0x1f };

static void colour(double v, const struct heatmap *h, uint8_t *p)
{
	if (isnan(v)) {
		p[0] = p[1] = p[2] = 0xdd;
		return;
	}
	double t = v <= 0 ? -INFINITY : v < 1 ? log2(v) / log2(h->cap_lo) : log2(v) / log2(h->cap_hi);
	if (t < -1 || t > 1) {
		memcpy(p, t < 0 ? beyond_lo : beyond_hi, 3);
		return;
	}
	static const double blue[3] = { 0x21, 0x66, 0xac }, red[3] = { 0xb2, 0x18, 0x2b };
	const double *end = t < 0 ? blue : red;
	double a = fabs(t);
	for (int k = 0; k < 3; k++)
		p[k] = (uint8_t)lround(255 * (1 - a) + end[k] * a);
}

void chart_cap_text(char *b, size_t n, double cap, int inverse)
{
	if (cap < 1000)
		snprintf(b, n, "%s%g", inverse ? "1/" : "", cap);
	else
		snprintf(b, n, "1e%s%.0f", inverse ? "-" : "", log10(cap));
}

#define HM_LABEL 300	/* heatmap: label column, plot width */
#define HM_W 600
#define HM_RIGHT 40	/* half the last column's step label hangs past the map */
#define HM_TOP 8	/* above the first row: its label is taller than a 3 px row */

int chart_heatmap(FILE *f, const struct heatmap *h)
{
	size_t rows = h->rows, cols = h->cols;
	if (!rows || !cols) {
		fputs("<p class=\"empty\">no per-tensor values yet</p>\n", f);
		return 0;
	}
	uint8_t *rgb = malloc(rows * cols * 3 + 1);
	unsigned char *png = NULL;
	size_t png_n = 0;
	if (!rgb)
		return -1;
	for (size_t i = 0; i < rows * cols; i++)
		colour(h->v[i], h, rgb + 3 * i);
	int rc = png_encode_rgb(rgb, (uint32_t)cols, (uint32_t)rows, &png, &png_n);
	free(rgb);
	char *b64 = rc ? NULL : base64_encode(png, png_n);
	free(png);
	if (!b64)
		return -1;

	/* rows readable when few, the whole map on a screen or two when many */
	double rh = rows <= 40 ? 14 : rows <= 120 ? 6 : fmax(2, 900.0 / (double)rows);
	double plot_h = rh * (double)rows;
	int every = rh >= 11 ? 1 : (int)ceil(11 / rh), height = HM_TOP + (int)ceil(plot_h) + 70;
	fprintf(f, "<svg class=\"heat\" viewBox=\"0 0 %d %d\" data-cap=\"%g\" data-cap-lo=\"%g\" width=\"%d\" "
		   "height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><g transform=\"translate(0 %d)\">\n",
		HM_LABEL + HM_W + HM_RIGHT, height, h->cap_hi, h->cap_lo, HM_LABEL + HM_W + HM_RIGHT, height, HM_TOP);
	fprintf(f, "<image x=\"%d\" y=\"0\" width=\"%d\" height=\"%.1f\" preserveAspectRatio=\"none\" "
		   "style=\"image-rendering: pixelated\" href=\"data:image/png;base64,%s\"/>\n",
		HM_LABEL, HM_W, plot_h, b64);
	free(b64);
	for (size_t r = 0; r < rows; r++) {
		const char *name = h->row_labels[r];
		size_t len = strlen(name);
		if (r % (size_t)every == 0) {	/* long names keep their end: the layer's kind */
			const char *tail = len > 46 ? name + len - 45 : name;
			while ((*tail & 0xc0) == 0x80)	/* not inside a UTF-8 character */
				tail++;
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"rl\">%s", HM_LABEL - 6,
				rh * (double)r + rh / 2 + 4, tail != name ? "…" : "");
			xml_text(f, tail);
			fputs("</text>\n", f);
		}
		fprintf(f, "<rect class=\"hover\" x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%.1f\"><title>",
			rh * (double)r, HM_LABEL + HM_W, rh);
		xml_text(f, name);
		fputs("</title></rect>\n", f);
	}
	/* at most 8 step labels; one that would touch the last, or stick out,
	 * is left out (steps near 2^62 have 19 digits) */
	size_t nt = cols < 8 ? cols : 8;
	double right = -1e9;
	for (size_t k = 0; k < nt; k++) {	/* columns are snapshots, in step order */
		size_t c = nt == 1 ? 0 : k * (cols - 1) / (nt - 1);
		double x = HM_LABEL + ((double)c + 0.5) * HM_W / (double)cols;
		char lab[32];
		double half = snprintf(lab, sizeof(lab), "%lld", (long long)h->col_steps[c]) * X_DIGIT / 2;
		if (x - half < right + 8 || x + half > HM_LABEL + HM_W + HM_RIGHT)
			continue;
		right = x + half;
		fprintf(f, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
			   "<text x=\"%.1f\" y=\"%.1f\" class=\"xt\">%s</text>\n",
			x, x, plot_h, plot_h + 4, x, plot_h + 17, lab);
	}
	fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"xl\">step</text>\n", HM_LABEL + HM_W / 2, plot_h + 34);
	/* the key: off the scale below, 1/cap .. 1 .. cap, off the scale above */
	double ky = plot_h + 44, k0 = HM_LABEL + 58;
	char cap[32], inv[32];
	chart_cap_text(cap, sizeof(cap), h->cap_hi, 0);
	chart_cap_text(inv, sizeof(inv), h->cap_lo, 1);
	fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yt\">ratio</text>"
		   "<rect x=\"%d\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"#%02x%02x%02x\"/>",
		HM_LABEL + 36, ky + 9, HM_LABEL + 40, ky, beyond_lo[0], beyond_lo[1], beyond_lo[2]);
	for (int i = 0; i < 60; i++) {	/* the left half 1/cap_lo .. 1, the right 1 .. cap_hi */
		uint8_t p[3];
		colour(i < 30 ? pow(h->cap_lo, (i - 29.5) / 29.5) : pow(h->cap_hi, (i - 29.5) / 29.5), h, p);
		fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"4\" height=\"10\" fill=\"#%02x%02x%02x\"/>",
			k0 + 4 * i, ky, p[0], p[1], p[2]);
	}
	fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"#%02x%02x%02x\"/>\n"
		   "<text x=\"%.0f\" y=\"%.1f\" class=\"xt\">%s</text><text x=\"%.0f\" y=\"%.1f\" class=\"xt\">1"
		   "</text><text x=\"%.0f\" y=\"%.1f\" class=\"xt\">%s</text>\n"
		   "<text x=\"%.0f\" y=\"%.1f\" class=\"kl\">darker: beyond %s or %s (or 0) · grey: undefined"
		   "</text>\n", k0 + 244, ky, beyond_hi[0], beyond_hi[1], beyond_hi[2], k0, ky + 22, inv, k0 + 120,
		ky + 22, k0 + 240, ky + 22, cap, k0 + 264, ky + 9, inv, cap);
	fputs("</g></svg>\n", f);
	return 0;
}

/* chart.c: line charts and heatmaps as SVG (see chart.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "png.h"

#define W 900		/* line chart: whole width, height, margins */
#define H 300
#define ML 72
#define MR 40	/* room for the last step's label, centred on its tick */
#define MT 12
#define MB 42
#define X_DIGIT 7.2	/* px: the width of a digit of an 11 px label */

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
static void ticks_linear(FILE *f, const struct axis *a, int vertical)
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
				ML, W - MR, p, p, ML - 6, p + 4, (double)v);
			continue;
		}
		if (k % every)
			continue;
		/* centred on its tick, but inside the chart */
		double half = snprintf(lab, sizeof(lab), "%.0Lf", v) * X_DIGIT / 2;
		double tx = fmax(half + 2, fmin(p, W - 2 - half));
		fprintf(f, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
			   "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%s</text>\n",
			p, p, H - MB, H - MB + 4, tx, H - MB + 17, lab);
	}
}

/*
 * 1, 2 and 5 of each decade when the axis spans less than two, every
 * digit when it spans less than one (so a narrow range still has three
 * labels), and every k-th decade when it spans many (labels 11 px tall).
 */
static void ticks_log(FILE *f, const struct axis *a)
{
	static const double mult[] = { 1, 2, 5, 3, 4, 6, 7, 8, 9 };
	double lo = floor(log10(a->lo)), hi = ceil(log10(a->hi)), decades = log10(a->hi) - log10(a->lo);
	int n_mult = decades < 1 ? 9 : decades < 2 ? 3 : 1;
	double every = decades > 8 ? ceil(decades / 8) : 1;

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
				ML, W - MR, p, p, ML - 6, p + 4, v);
		}
}

void chart_line(FILE *f, const struct line_chart *c)
{
	struct axis x = { INFINITY, -INFINITY, 0, ML, W - MR }, y = { INFINITY, -INFINITY, c->log_y, H - MB, MT };

	for (size_t s = 0; s < c->n_series; s++)
		for (size_t i = 0; i < c->series[s].n; i++)
			if (usable(c->series[s].y[i], c->log_y)) {
				x.lo = fmin(x.lo, c->series[s].x[i]);
				x.hi = fmax(x.hi, c->series[s].x[i]);
				y.lo = fmin(y.lo, c->series[s].y[i]);
				y.hi = fmax(y.hi, c->series[s].y[i]);
			}
	fprintf(f, "<svg class=\"chart\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
		   "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">\n", W, H, W, H);
	if (!(x.lo <= x.hi)) {
		fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"empty\">no values yet</text></svg>\n", W / 2, H / 2);
		return;
	}
	for (size_t k = 0; k < c->n_hlines; k++)
		if (usable(c->hlines[k].y, c->log_y)) {
			y.lo = fmin(y.lo, c->hlines[k].y);
			y.hi = fmax(y.hi, c->hlines[k].y);
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
		ticks_log(f, &y);
	else
		ticks_linear(f, &y, 1);
	ticks_linear(f, &x, 0);
	fprintf(f, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
		   "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>\n",
		ML, W - MR, H - MB, H - MB, ML, ML, MT, H - MB);
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xl\">", (ML + W - MR) / 2, H - 6);
	xml_text(f, c->xlabel);
	fprintf(f, "</text><text transform=\"translate(14 %d) rotate(-90)\" class=\"xl\">", (MT + H - MB) / 2);
	xml_text(f, c->ylabel);
	fputs("</text>\n", f);
	for (size_t k = 0; k < c->n_hlines; k++) {
		if (!usable(c->hlines[k].y, c->log_y))
			continue;
		double p = place(&y, c->hlines[k].y);
		fprintf(f, "<line class=\"thr\" stroke=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\">"
			   "<title>", c->hlines[k].color, ML, W - MR, p, p);
		xml_text(f, c->hlines[k].label);
		fprintf(f, "</title></line><text x=\"%d\" y=\"%.1f\" class=\"thrl\" fill=\"%s\">",
			W - MR - 4, p - 4, c->hlines[k].color);
		xml_text(f, c->hlines[k].label);
		fputs("</text>\n", f);
	}
	for (size_t s = 0; s < c->n_series; s++) {
		const struct chart_series *se = &c->series[s];
		fprintf(f, "<g stroke=\"%s\" fill=\"%s\"><title>", se->color, se->color);
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
			fprintf(f, "%.1f,%.1f ", place(&x, se->x[i]), place(&y, se->y[i]));
			open = 1;
		}
		if (open)
			fputs("\"/>\n", f);
		if (se->n <= 60)	/* few snapshots: mark each */
			for (size_t i = 0; i < se->n; i++)
				if (usable(se->y[i], c->log_y))
					fprintf(f, "<circle r=\"2.5\" cx=\"%.1f\" cy=\"%.1f\"/>",
						place(&x, se->x[i]), place(&y, se->y[i]));
		fputs("</g>\n", f);
	}
	fputs("</svg>\n<div class=\"legend\">", f);
	for (size_t s = 0; s < c->n_series; s++) {
		fprintf(f, "<span><i style=\"border-top: 3px %s %s\"></i>",
			c->series[s].dashed ? "dashed" : "solid", c->series[s].color);
		xml_text(f, c->series[s].label);
		fputs("</span>", f);
	}
	fputs("</div>\n", f);
}

/* Diverging: blue below 1, white at 1, red above; NaN grey. */
static void colour(double v, double span, uint8_t *p)
{
	if (isnan(v)) {
		p[0] = p[1] = p[2] = 0xdd;
		return;
	}
	double t = v <= 0 ? -1 : log2(v) / span;
	t = t < -1 ? -1 : t > 1 ? 1 : t;
	static const double blue[3] = { 0x21, 0x66, 0xac }, red[3] = { 0xb2, 0x18, 0x2b };
	const double *end = t < 0 ? blue : red;
	double a = fabs(t);
	for (int k = 0; k < 3; k++)
		p[k] = (uint8_t)lround(255 * (1 - a) + end[k] * a);
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
		colour(h->v[i], h->log2_span, rgb + 3 * i);
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
	fprintf(f, "<svg class=\"heat\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
		   "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><g transform=\"translate(0 %d)\">\n",
		HM_LABEL + HM_W + HM_RIGHT, height, HM_LABEL + HM_W + HM_RIGHT, height, HM_TOP);
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
	/* the key: 2^-span .. 1 .. 2^span */
	double ky = plot_h + 44;
	for (int i = 0; i < 60; i++) {
		uint8_t p[3];
		colour(pow(2, h->log2_span * (i - 29.5) / 29.5), h->log2_span, p);
		fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"4\" height=\"10\" fill=\"#%02x%02x%02x\"/>",
			HM_LABEL + 40 + 4 * i, ky, p[0], p[1], p[2]);
	}
	fprintf(f, "\n<text x=\"%d\" y=\"%.1f\" class=\"yt\">≤ 1/%.0f</text>"
		   "<text x=\"%d\" y=\"%.1f\" class=\"xt\">1</text>"
		   "<text x=\"%d\" y=\"%.1f\" class=\"kl\">≥ %.0f  (grey: undefined)</text>\n",
		HM_LABEL + 36, ky + 9, pow(2, h->log2_span), HM_LABEL + 40 + 120, ky + 22,
		HM_LABEL + 40 + 244, ky + 9, pow(2, h->log2_span));
	fputs("</g></svg>\n", f);
	return 0;
}

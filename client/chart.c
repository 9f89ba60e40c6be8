/* chart.c: line charts and heatmaps as SVG (see chart.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "png.h"

#define W 900		/* line chart: whole width, height, margins */
#define H 300
#define ML 72
#define MR 16
#define MT 12
#define MB 42

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

static int usable(double y, int log_y)
{
	return isfinite(y) && (!log_y || y > 0);
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

static void ticks_linear(FILE *f, const struct axis *a, int vertical)
{
	double st = nice_step(a->hi - a->lo);
	for (double v = ceil(a->lo / st) * st; v <= a->hi + st * 1e-9; v += st) {
		double p = place(a, fabs(v) < st * 1e-9 ? 0 : v);
		if (vertical)
			fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
				   "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%.4g</text>\n",
				ML, W - MR, p, p, ML - 6, p + 4, fabs(v) < st * 1e-9 ? 0 : v);
		else
			fprintf(f, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
				   "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%.10g</text>\n",
				p, p, H - MB, H - MB + 4, p, H - MB + 17, v);
	}
}

static void ticks_log(FILE *f, const struct axis *a)
{
	double decades = log10(a->hi) - log10(a->lo);
	static const double mult[] = { 1, 2, 5 };
	for (double e = floor(log10(a->lo)); e <= ceil(log10(a->hi)); e++)
		for (int m = 0; m < (decades < 2 ? 3 : 1); m++) {
			double v = mult[m] * pow(10, e);
			if (v < a->lo * (1 - 1e-9) || v > a->hi * (1 + 1e-9))
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
	if (x.hi == x.lo)
		x.hi = x.lo + 1;
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
	int every = rh >= 11 ? 1 : (int)ceil(11 / rh), height = (int)ceil(plot_h) + 70;
	fprintf(f, "<svg class=\"heat\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
		   "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">\n",
		HM_LABEL + HM_W + 20, height, HM_LABEL + HM_W + 20, height);
	fprintf(f, "<image x=\"%d\" y=\"0\" width=\"%d\" height=\"%.1f\" preserveAspectRatio=\"none\" "
		   "style=\"image-rendering: pixelated\" href=\"data:image/png;base64,%s\"/>\n",
		HM_LABEL, HM_W, plot_h, b64);
	free(b64);
	for (size_t r = 0; r < rows; r++) {
		const char *name = h->row_labels[r];
		size_t len = strlen(name);
		if (r % (size_t)every == 0) {	/* long names keep their end: the layer's kind */
			fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"rl\">%s", HM_LABEL - 6,
				rh * (double)r + rh / 2 + 4, len > 46 ? "…" : "");
			xml_text(f, len > 46 ? name + len - 45 : name);
			fputs("</text>\n", f);
		}
		fprintf(f, "<rect class=\"hover\" x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%.1f\"><title>",
			rh * (double)r, HM_LABEL + HM_W, rh);
		xml_text(f, name);
		fputs("</title></rect>\n", f);
	}
	size_t nt = cols < 8 ? cols : 8;
	for (size_t k = 0; k < nt; k++) {	/* columns are snapshots, in step order */
		size_t c = nt == 1 ? 0 : k * (cols - 1) / (nt - 1);
		double x = HM_LABEL + ((double)c + 0.5) * HM_W / (double)cols;
		fprintf(f, "<line class=\"tick\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
			   "<text x=\"%.1f\" y=\"%.1f\" class=\"xt\">%lld</text>\n",
			x, x, plot_h, plot_h + 4, x, plot_h + 17, (long long)h->col_steps[c]);
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
	fprintf(f, "\n<text x=\"%d\" y=\"%.1f\" class=\"yt\">≤ 1/%g</text>"
		   "<text x=\"%d\" y=\"%.1f\" class=\"xt\">1</text>"
		   "<text x=\"%d\" y=\"%.1f\" class=\"kl\">≥ %g  (grey: undefined)</text>\n",
		HM_LABEL + 36, ky + 9, pow(2, h->log2_span), HM_LABEL + 40 + 120, ky + 22,
		HM_LABEL + 40 + 244, ky + 9, pow(2, h->log2_span));
	fputs("</svg>\n", f);
	return 0;
}

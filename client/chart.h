/*
 * chart.h: the report's charts as inline SVG, for a page that must open
 * with no network and no script: line charts (W1 and ratio against step)
 * and heatmaps (tensor x step), the latter as one PNG inside the SVG so
 * that 300 tensors x 1000 steps stays one element, not 300,000.
 */
#ifndef WD_CHART_H
#define WD_CHART_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct chart_series {
	const char *label;	/* legend and hover title */
	const char *color;	/* CSS colour */
	int dashed;
	size_t n;
	const double *x, *y;	/* NaN in y: a gap */
	/* the run drawn: its data-run attribute (so that a reader, and the
	 * test, can tell a run's colour in every chart), and with end_labels
	 * its name at the line's end; NULL: none */
	const char *run;
};

struct chart_hline {
	const char *label;
	double y;
	const char *color;
	int ref;		/* a reference (ratio = 1): solid, labelled at the left */
};

struct line_chart {
	const char *xlabel, *ylabel;
	int log_y;		/* log scale; values <= 0 are left out */
	size_t n_series, n_hlines;
	const struct chart_series *series;
	const struct chart_hline *hlines;
	int width, height;	/* px; 0: 900 x 300 */
	int end_labels;		/* each series' run named at its last point, clear of the others */
	int no_legend;
	/* fixed axes, so that small multiples compare: when lo < hi, the
	 * range (before the log axis's margin); else from the data */
	double x_lo, x_hi, y_lo, y_hi;
};

/* Writes <svg> and, unless no_legend, its legend (HTML) to f. */
void chart_line(FILE *f, const struct line_chart *c);

/*
 * The range chart_line would give y from the data and lines of c, before
 * its margins: how small multiples agree on one. 0, or -1 when nothing
 * can be placed.
 */
int chart_y_range(const struct line_chart *c, double *lo, double *hi);

struct heatmap {
	size_t rows, cols;
	const double *v;		/* rows * cols, row-major; NaN: no value */
	const char *const *row_labels;	/* rows */
	const int64_t *col_steps;	/* cols: the step of each column */
	/* the colour scale's caps (each >= 2): white at ratio 1, full red at
	 * cap_hi, full blue at 1/cap_lo, darker beyond (and for a ratio of
	 * 0); one pair of caps for every map of a page, so that they compare.
	 * Each side has its own, so that ratios far below 1 do not stretch
	 * the red side until a ratio of 1.6 looks white (docs/report.md). */
	double cap_hi, cap_lo;
};

/* Writes <svg> with the map as a PNG, hover titles per row, and a colour key. -1: no memory. */
int chart_heatmap(FILE *f, const struct heatmap *h);

/* The cap as the key writes it: "10", "100", "1e4"; inverse: "1/10", "1/100", "1e-4". */
void chart_cap_text(char *b, size_t n, double cap, int inverse);

/* Text for HTML and SVG: & < > " ' escaped. */
void xml_text(FILE *f, const char *s);

#endif

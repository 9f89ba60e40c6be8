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
	const char *label;
	const char *color;	/* CSS colour */
	int dashed;
	size_t n;
	const double *x, *y;	/* NaN in y: a gap */
};

struct chart_hline {		/* a threshold */
	const char *label;
	double y;
	const char *color;
};

struct line_chart {
	const char *xlabel, *ylabel;
	int log_y;		/* log scale; values <= 0 are left out */
	size_t n_series, n_hlines;
	const struct chart_series *series;
	const struct chart_hline *hlines;
};

/* Writes <svg> and its legend (HTML) to f. */
void chart_line(FILE *f, const struct line_chart *c);

struct heatmap {
	size_t rows, cols;
	const double *v;		/* rows * cols, row-major; NaN: no value */
	const char *const *row_labels;	/* rows */
	const int64_t *col_steps;	/* cols: the step of each column */
	double log2_span;		/* colours saturate at 2^-span and 2^span */
};

/* Writes <svg> with the map as a PNG, hover titles per row, and a colour key. -1: no memory. */
int chart_heatmap(FILE *f, const struct heatmap *h);

/* Text for HTML and SVG: & < > " ' escaped. */
void xml_text(FILE *f, const char *s);

#endif

/* table.c: aligned text tables for the CLI (see table.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

void table_init(struct table *t, size_t rows, size_t cols)
{
	t->rows = rows;
	t->cols = cols;
	t->cell = calloc(rows * cols, sizeof(*t->cell));
	t->width = calloc(cols, sizeof(*t->width));
}

void table_set(struct table *t, size_t row, size_t col, const char *s)
{
	char **c = &t->cell[row * t->cols + col];
	free(*c);
	*c = strdup(s);
	int len = *c ? (int)strlen(*c) : 0;
	if (len > t->width[col])
		t->width[col] = len;
}

void table_print(const struct table *t, size_t rows, size_t first_left)
{
	for (size_t r = 0; r < rows; r++) {
		/* no trailing blanks: the row ends at its last cell, unpadded when left-aligned */
		size_t end = t->cols;
		while (end > 1 && !(t->cell[r * t->cols + end - 1] && t->cell[r * t->cols + end - 1][0]))
			end--;
		for (size_t c = 0; c < end; c++) {
			const char *s = t->cell[r * t->cols + c];
			printf(c ? "  " : "");
			printf(c < first_left ? "%-*s" : "%*s", c + 1 == end && c < first_left ? 0 : t->width[c],
			       s ? s : "");
		}
		putchar('\n');
	}
}

void table_release(struct table *t)
{
	for (size_t i = 0; i < t->rows * t->cols; i++)
		free(t->cell[i]);
	free(t->cell);
	free(t->width);
}

void table_set_row(struct table *t, size_t row, const char *const *cells, size_t n)
{
	for (size_t c = 0; c < n; c++)
		table_set(t, row, c, cells[c]);
}

void table_show(struct table *t, size_t rows, size_t first_left, const char *if_empty)
{
	table_print(t, rows, first_left);
	if (rows <= 1)
		printf("%s\n", if_empty);
	table_release(t);
}

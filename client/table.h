/*
 * table.h: aligned text tables for people: a grid of owned strings, each
 * column as wide as its widest cell; the first columns left-aligned (names),
 * the rest right-aligned (numbers). Shared by the CLI's subcommands.
 */
#ifndef WD_TABLE_H
#define WD_TABLE_H

#include <stddef.h>

struct table {
	size_t rows, cols;
	char **cell;	/* rows * cols; NULL prints empty */
	int *width;
};

void table_init(struct table *t, size_t rows, size_t cols);
/* Copies s into the cell; grows the column's width. */
void table_set(struct table *t, size_t row, size_t col, const char *s);
/* Prints the first rows rows; columns before first_left... are left-aligned. */
void table_print(const struct table *t, size_t rows, size_t first_left);
void table_release(struct table *t);

#endif

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

/* Sets the first n cells of row: the header row, most often. */
void table_set_row(struct table *t, size_t row, const char *const *cells, size_t n);
/*
 * A subcommand's last step: prints the first rows rows as table_print
 * does; when that was the header alone, if_empty on a line of its own
 * ("(no study configured)"); then releases t.
 */
void table_show(struct table *t, size_t rows, size_t first_left, const char *if_empty);

#endif

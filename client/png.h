/*
 * png.h: an RGB image to a PNG file in memory (zlib, no filters): how the
 * report's heatmaps travel inside the page, as a data: URI, whatever their
 * size (300 tensors x 1000 steps is 300,000 cells: too many SVG elements).
 */
#ifndef WD_PNG_H
#define WD_PNG_H

#include <stddef.h>
#include <stdint.h>

/* rgb is h rows of w pixels, 3 bytes each. Returns 0, or -1 (out of memory). */
int png_encode_rgb(const uint8_t *rgb, uint32_t w, uint32_t h, unsigned char **out, size_t *len);

/* Standard base64 of n bytes, NUL-terminated, malloc'd; NULL when out of memory. */
char *base64_encode(const unsigned char *p, size_t n);

#endif

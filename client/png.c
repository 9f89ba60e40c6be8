/* png.c: PNG encoding and base64 (see png.h). */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "png.h"

static unsigned char *put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

/* A chunk: length, type, data, CRC-32 of type and data. */
static unsigned char *chunk(unsigned char *p, const char *type, const unsigned char *data, uint32_t n)
{
	p = put32(p, n);
	memcpy(p, type, 4);
	if (n)
		memcpy(p + 4, data, n);
	uLong crc = crc32(crc32(0L, Z_NULL, 0), p, n + 4);
	return put32(p + 4 + n, (uint32_t)crc);
}

int png_encode_rgb(const uint8_t *rgb, uint32_t w, uint32_t h, unsigned char **out, size_t *len)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	size_t stride = (size_t)w * 3, raw_n = (stride + 1) * h;
	unsigned char *raw = malloc(raw_n + 1), ihdr[13];
	uLongf z_n = compressBound((uLong)raw_n);
	unsigned char *z = malloc(z_n), *png = NULL;

	*out = NULL;
	*len = 0;
	if (!raw || !z)
		goto out;
	for (uint32_t y = 0; y < h; y++) {	/* each scanline: filter type 0, then the pixels */
		raw[y * (stride + 1)] = 0;
		memcpy(raw + y * (stride + 1) + 1, rgb + y * stride, stride);
	}
	if (compress2(z, &z_n, raw, (uLong)raw_n, 6) != Z_OK)
		goto out;
	put32(ihdr, w);
	put32(ihdr + 4, h);
	ihdr[8] = 8;	/* bits per channel */
	ihdr[9] = 2;	/* truecolour */
	ihdr[10] = ihdr[11] = ihdr[12] = 0;	/* deflate, adaptive filters, no interlace */
	png = malloc(8 + 25 + 12 + z_n + 12);
	if (!png)
		goto out;
	memcpy(png, sig, 8);
	unsigned char *p = chunk(png + 8, "IHDR", ihdr, 13);
	p = chunk(p, "IDAT", z, (uint32_t)z_n);
	p = chunk(p, "IEND", NULL, 0);
	*out = png;
	*len = (size_t)(p - png);
out:
	free(raw);
	free(z);
	return *out ? 0 : -1;
}

char *base64_encode(const unsigned char *p, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc((n + 2) / 3 * 4 + 1), *q = s;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		*q++ = tab[v >> 18 & 63];
		*q++ = tab[v >> 12 & 63];
		*q++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
		*q++ = i + 2 < n ? tab[v & 63] : '=';
	}
	*q = 0;
	return s;
}

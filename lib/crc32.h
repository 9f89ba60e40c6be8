/*
 * crc32.h: CRC-32 (zlib's, the gzip polynomial) of the wire's payloads and
 * the WAL's records, at memory speed where the CPU has PCLMULQDQ: zlib's
 * table code ran at 1.5-2.1 GB/s on `c`, which bounded `wdrift send`, the
 * daemon's main loop (it checks every payload) and a publisher's thread.
 * The same value as zlib's crc32() for every input. Internal; libc, zlib.
 */
#ifndef WD_CRC32_H
#define WD_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* crc updated with n bytes at data, as zlib's crc32(crc, data, n), any n. */
uint32_t wd_crc32(uint32_t crc, const void *data, size_t n);

/* The CRC-32 of A then B, from theirs and B's length in bytes (zlib's crc32_combine). */
uint32_t wd_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/*
 * The code wd_crc32 uses: 1 the carry-less multiply (folding), 0 zlib's.
 * wd_crc32_use(0) makes it zlib's from then on, for tests and the
 * benchmark's peer; wd_crc32_use(1) goes back to the best the CPU has.
 */
int wd_crc32_folds(void);
void wd_crc32_use(int fold);

#endif

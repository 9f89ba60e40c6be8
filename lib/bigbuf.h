/*
 * bigbuf.h: allocation of large, streamed buffers (sort keys, scratch).
 * Buffers of 4 MiB and more are 2 MiB aligned and advised to use
 * transparent huge pages: a radix scatter writes to thousands of places at
 * once, and with 4 KiB pages each is a TLB miss and each new page a fault.
 * Freed with free(). Internal; libc and Linux only.
 */
#ifndef WD_BIGBUF_H
#define WD_BIGBUF_H

#include <stdlib.h>
#include <sys/mman.h>

#define BIGBUF_HUGE (2u << 20)

static inline void *bigbuf_alloc(size_t size)
{
	void *p;

	if (size < 2 * BIGBUF_HUGE)
		return malloc(size ? size : 1);
	if (posix_memalign(&p, BIGBUF_HUGE, size))
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, size & ~((size_t)BIGBUF_HUGE - 1), MADV_HUGEPAGE);
#endif
	return p;
}

#endif

/*
 * spares.h: freed buffers kept for reuse, so that the next tensor's
 * buffer is memory already faulted in. Internal to libwdrift: the CPU
 * side's sort keys and 16-bit counts (prepare_cpu.c) each have a list.
 *
 * Why: given back to glibc, a freed buffer's memory went back to the
 * kernel (an arena trimmed, a chunk unmapped) and the next tensor faulted
 * it in again. On 2 threads each unmap's TLB shootdown stalls the other
 * thread too, and a snapshot of small tensors ran slower on 2 threads than
 * on 1 (docs/performance.md).
 *
 * What is kept: returned buffers of min usable bytes or more, at most
 * SPARES_CAP of them, `base` bytes at any time and as much again as the
 * most bytes of such buffers handed out at once since the last trim exceed
 * those handed out now. Those of max bytes or more (a large tensor's
 * keys, a 64 MiB one faulted in again cost a 2^24 fp32 prepare 5-13%)
 * are kept only until the next trim, which frees every one of them: the
 * base is for small buffers, and a caller that trims after each large
 * tensor (the daemon) holds none of them between tensors. So a caller
 * that frees a batch of tensors and prepares the next (wd_prepare_many
 * over snapshots) gets its memory back, and a list
 * never holds more than `base` beyond the peak its callers already had in
 * use. A get takes the smallest kept buffer that holds size and is at most
 * a quarter larger (and a large one 2 MiB more: bigbuf's alignment tail,
 * never touched; the budget counts what was asked), or the first found
 * within a page of size. Under
 * AddressSanitizer nothing is kept: a kept buffer would hide a read of a
 * freed tensor's values, which ASan watches for in freed memory.
 */
#ifndef WD_SPARES_H
#define WD_SPARES_H

#include <pthread.h>
#include <stddef.h>

#define SPARES_CAP 4096

struct spares {
	pthread_mutex_t lock;
	size_t min, max, base;	/* sizes kept: min and up, past a trim below max; bytes always allowed */
	void *buf[SPARES_CAP];
	size_t size[SPARES_CAP];	/* malloc_usable_size of each */
	int n;
	size_t bytes;		/* kept */
	/*
	 * Usable bytes handed out in buffers of the sizes kept and not
	 * returned, and their peak since the last trim: a bound only. A buffer that did not come from the list
	 * may be returned to it (a sort's scratch handed out as keys), so a
	 * return is taken off without going below 0.
	 */
	size_t out, peak;
};

#define SPARES_INIT(min_, max_, base_) \
	{ .lock = PTHREAD_MUTEX_INITIALIZER, .min = (min_), .max = (max_), .base = (base_) }

/*
 * A buffer of at least size bytes: a kept one (zeroed when zero is set),
 * or a new one (bigbuf_alloc, or calloc when zero is set); NULL when out
 * of memory.
 */
void *spares_get(struct spares *s, size_t size, int zero);
/* Returns a buffer from malloc (or NULL): kept, or freed. */
void spares_put(struct spares *s, void *p);
/*
 * Frees every kept buffer of max bytes or more, and what else is kept
 * beyond base, and starts the peak again from what is out now.
 */
void spares_trim(struct spares *s);
/* The bytes kept now. */
size_t spares_kept(struct spares *s);

#endif

/*
 * prepare_cuda.cu: preparing a tensor on the device (backend_cuda.h:
 * cuda_prepare, cuda_settle, cuda_prepared_release, cuda_copy_to_host):
 * where a view's data lives, the upload through pinned staging, the
 * 16-bit count and the upcast check, the CUB sort and its finite range,
 * and the counts that reach the host after wd_prepare returns. The kernels
 * it launches (kernels.cuh) are launched from here only.
 *
 * A device view on the engine's device is copied on the device (or, kept
 * with WD_PREP_KEEP_RAW, read in place; a bf16/fp16 one is counted in
 * place, and wd_prepare waits for the count); one on another device, or
 * misaligned, comes through the host.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_cuda.cuh"
#include "kernels.cuh"

/* --- upload --- */

/*
 * Where a view's data lives. MEM_DEVICE is device memory the kernels may
 * read in place: on the engine's device and aligned to its element size.
 * MEM_OTHER is device memory they must not read: on another device (a
 * kernel here would fault on it, without peer access), or at an offset
 * that is not a multiple of the element size (a misaligned load faults).
 * Either fault is sticky and would ruin the context, which is the device's
 * primary one and so the caller's (PyTorch's) too. MEM_OTHER is copied to
 * the host first.
 */
enum mem_kind { MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE, MEM_OTHER };

static enum mem_kind mem_kind_of(const struct cuda_engine *c, const void *p, size_t esize,
				 int *owner)
{
	cudaPointerAttributes attr;
	enum mem_kind k = MEM_PAGEABLE;

	*owner = -1;
	/*
	 * Under UVA this answers for a pointer of any device without making
	 * that device current, and pageable memory is cudaMemoryTypeUnregistered
	 * (CUDA 11 and later), not an error.
	 */
	if (cudaPointerGetAttributes(&attr, p) == cudaSuccess) {
		if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
			*owner = attr.device;
			k = attr.device == c->device && (uintptr_t)p % esize == 0 ? MEM_DEVICE
										   : MEM_OTHER;
		} else if (attr.type == cudaMemoryTypeHost) {
			k = MEM_PINNED;
		}
	}
	cudaGetLastError();	/* pageable memory may report an error: not one */
	return k;
}

/*
 * Copies bytes of device memory at src, of any device, to the host at dst
 * with a synchronous cudaMemcpy on the owner's legacy default stream. That
 * stream waits for work the caller queued on the owner's blocking streams
 * (the per-thread default stream included), the same promise as a view
 * read in place (after_caller). Returns 0, -EFAULT when src could not be
 * read but the engine's device is fine (a bad pointer: an invalid-value
 * error, which is not sticky), or -EIO when the engine's device is broken.
 * The owner's own context may be left with a sticky error by a copy that
 * faults: that is the caller's memory and context, unchanged by us.
 * Unverified: the owner switch and the health probe have not run on a
 * machine with two GPUs.
 */
static int read_device(struct cuda_engine *c, void *dst, const void *src, size_t bytes,
		       int owner)
{
	cudaError_t err = cudaSuccess;

	if (owner >= 0 && owner != c->device)
		err = cudaSetDevice(owner);
	if (err == cudaSuccess)
		err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
	if (owner >= 0 && owner != c->device && cudaSetDevice(c->device) != cudaSuccess)
		return cuda_fail(cudaGetLastError(), "cudaSetDevice (back)", __FILE__, __LINE__);
	if (err == cudaSuccess)
		return 0;
	cuda_fail(err, "copy of a device view to the host", __FILE__, __LINE__);
	cudaGetLastError();
	/* our context reports a sticky error to any call: probe it cheaply */
	cudaError_t health = cudaStreamQuery(c->compute);
	if (health == cudaSuccess || health == cudaErrorNotReady) {
		cudaGetLastError();
		return -EFAULT;
	}
	return cuda_fail(health, "engine device after a failed copy", __FILE__, __LINE__);
}

/*
 * Orders stream s after the work the caller queued on its default stream,
 * legacy or per-thread, before this call: it may still be writing the device
 * or pinned memory that s is about to read, and our streams are
 * non-blocking, so nothing else orders them.
 */
static int after_caller(struct cuda_engine *c, cudaStream_t s)
{
	CU(cudaEventRecord(c->caller, cudaStreamLegacy));
	CU(cudaStreamWaitEvent(s, c->caller, 0));
	CU(cudaEventRecord(c->caller, cudaStreamPerThread));
	CU(cudaStreamWaitEvent(s, c->caller, 0));
	return 0;
}

/*
 * Copies bytes from host memory to dst, which was allocated on the copy
 * stream. Pinned memory goes straight over; pageable memory through two
 * pinned staging buffers, so that the CPU fills one while the DMA engine
 * drains the other. Returns when src may be reused; the compute stream is
 * ordered after the copy.
 */
static int upload(struct cuda_engine *c, void *dst, const void *src, size_t bytes, int pinned)
{
	if (pinned) {
		CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy));
	} else {
		for (size_t off = 0, k = 0; off < bytes; off += STAGE_BYTES, k ^= 1) {
			size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
			/* its last copy is done (an event never recorded is complete) */
			CU(cudaEventSynchronize(c->staged[k]));
			memcpy(c->stage[k], (const char *)src + off, len);
			CU(cudaMemcpyAsync((char *)dst + off, c->stage[k], len,
					   cudaMemcpyHostToDevice, c->copy));
			CU(cudaEventRecord(c->staged[k], c->copy));
		}
	}
	CU(cudaEventRecord(c->uploaded, c->copy));
	CU(cudaStreamWaitEvent(c->compute, c->uploaded, 0));
	if (pinned)	/* the caller may reuse src on return */
		CU(cudaEventSynchronize(c->uploaded));
	return 0;
}


/* --- counts that reach the host later --- */

/*
 * A tensor's non-finite counts, and a sorted one's finite range, are known
 * only once its kernels have run. They go to a pinned slot (a sort's
 * nonfinite_ends_kernel writes it directly: with UVA a cudaMallocHost
 * pointer is a device pointer too; a count's counters are copied there
 * from d_slots) and an event marks them written, so that prepare returns
 * without a sync, and the next tensor's upload overlaps this one's work.
 * The first host use settles them (cuda_settle).
 */
static int slot_take(struct cuda_engine *c)
{
	return c->n_free_slots ? c->free_slots[--c->n_free_slots] : -1;
}

static void slot_give(struct cuda_engine *c, int s)
{
	if (s >= 0 && s < SLOTS)
		c->free_slots[c->n_free_slots++] = s;
}

/* Copies p's counts from its slot, written (its event is done), and frees the slot. */
static void settle_read(struct cuda_engine *c, struct wd_prepared *p)
{
	const unsigned long long *s = c->h_slots + (size_t)p->dev_slot * SLOT_WORDS;
	p->nonfinite.nan = s[2];
	p->nonfinite.posinf = s[3];
	p->nonfinite.neginf = s[4];
	if (p->method == WD_METHOD_HIST16) {
		p->n_finite = p->numel - s[2] - s[3] - s[4];
	} else {
		p->dev_first = s[0];
		p->n_finite = s[1];
	}
	slot_give(c, p->dev_slot);
}

int settle(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return 0;
	CU(cudaEventSynchronize((cudaEvent_t)p->dev_ready));
	settle_read(c, p);
	cudaEventDestroy((cudaEvent_t)p->dev_ready);
	p->dev_ready = NULL;
	p->dev_slot = -1;
	p->counts_pending = 0;
	return 0;
}

/*
 * Settles a tensor that is being released (freed, or its device given
 * up): its counts are kept when they were written, since a stale tensor
 * keeps what it knew on the host; else the slot is lost with the device.
 */
static void settle_drop(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return;
	if (cudaEventSynchronize((cudaEvent_t)p->dev_ready) == cudaSuccess)
		settle_read(c, p);
	cudaEventDestroy((cudaEvent_t)p->dev_ready);
	cudaGetLastError();
	p->dev_ready = NULL;
	p->dev_slot = -1;
	p->counts_pending = 0;
}

/*
 * The work that writes p's counts into h_slots[slot] (or the spare slot,
 * when slot < 0: every slot in use) is queued on the compute stream: marks
 * them pending, to be settled on first use, or, in the spare, waits for
 * them and reads them now.
 */
static int counts_queued(struct cuda_engine *c, struct wd_prepared *p, int slot)
{
	cudaEvent_t ready = NULL;
	cudaError_t err;

	if (slot < 0) {
		CU(cudaStreamSynchronize(c->compute));
		p->dev_slot = SPARE_SLOT;
		settle_read(c, p);	/* gives nothing back: the spare is never handed out */
		p->dev_slot = -1;
		return 0;
	}
	if ((err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming)) != cudaSuccess ||
	    (err = cudaEventRecord(ready, c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		if (ready)
			cudaEventDestroy(ready);
		return cuda_fail(err, "counts to the host", __FILE__, __LINE__);
	}
	p->dev_slot = slot;
	p->dev_ready = ready;
	p->counts_pending = 1;
	return 0;
}


/* --- prepare --- */

/*
 * Counts raw's 16-bit codes (uint16, or the upper halves of fp32 words)
 * into p->dev_hist, and their NaN and Inf into the slot's counters, which
 * reach the host later (settle), so that a snapshot's many small tensors
 * (norms, biases) cost launches, not a sync each. The counts themselves
 * stay on the device; the host gets a copy only if it needs one
 * (cuda_to_host: W1 against a tensor on the host, a summary).
 */
template <class F>
static int count16(struct cuda_engine *c, const void *raw, int upper, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long), n = p->numel;
	unsigned blocks = (unsigned)(2 * ((n + HIST_CHUNK - 1) / HIST_CHUNK));
	unsigned long long *hist = (unsigned long long *)p->dev_hist;
	int slot = slot_take(c);
	unsigned long long *cnt = c->d_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS + 2;
	cudaError_t err;

	if ((err = cudaMemsetAsync(hist, 0, bytes, c->compute)) != cudaSuccess ||
	    (err = cudaMemsetAsync(cnt, 0, 3 * sizeof(*cnt), c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "cudaMemsetAsync", __FILE__, __LINE__);
	}
	if (upper && aligned16(raw))
		hist16_kernel<F, uint32_t, 4><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint32_t *)raw, n, hist, cnt);
	else if (upper)
		hist16_kernel<F, uint32_t, 1><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint32_t *)raw, n, hist, cnt);
	else if (aligned16(raw))
		hist16_kernel<F, uint16_t, 8><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint16_t *)raw, n, hist, cnt);
	else
		hist16_kernel<F, uint16_t, 1><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint16_t *)raw, n, hist, cnt);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "hist16_kernel", __FILE__, __LINE__);
	}
	p->method = WD_METHOD_HIST16;	/* settle reads the counters as a count's */
	unsigned long long *h = c->h_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS + 2;
	if ((err = cudaMemcpyAsync(h, cnt, 3 * sizeof(*cnt), cudaMemcpyDeviceToHost,
				   c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "count to the host", __FILE__, __LINE__);
	}
	return counts_queued(c, p, slot);
}

/* Counts 16-bit codes of raw, of format fmt (uint16, or upper halves of uint32). */
static int prepare_hist(struct cuda_engine *c, const void *raw, int upper,
			enum wd_dtype fmt, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long);
	int r = dev_alloc(c, &p->dev_hist, bytes);
	if (r)
		return r;
	p->dev_bytes += bytes;
	p->store = fmt;
	return fmt == WD_BF16 ? count16<fmt_bf16>(c, raw, upper, p) : count16<fmt_f16>(c, raw, upper, p);
}

/*
 * Whether the first (up to) 64 fp32 words of a view have zero low halves:
 * real fp32 data fails here, as on the CPU engine. Read on the host when
 * the view is there; else the 256 bytes come over on the copy stream (or
 * through the host from another device), which does not wait for our
 * sorts on the compute stream.
 */
static int prefix_upcast(struct cuda_engine *c, const void *data, enum mem_kind kind, int owner,
			 size_t n, int *yes)
{
	size_t head = n < 64 ? n : 64;
	const uint32_t *w = (const uint32_t *)data;
	int r;

	*yes = 0;
	if (kind == MEM_DEVICE) {
		if ((r = after_caller(c, c->copy)))
			return r;
		CU(cudaMemcpyAsync(c->h_hist, data, head * 4, cudaMemcpyDeviceToHost, c->copy));
		CU(cudaStreamSynchronize(c->copy));
		w = (const uint32_t *)c->h_hist;
	} else if (kind == MEM_OTHER) {
		if ((r = read_device(c, c->h_hist, data, head * 4, owner)))
			return r;
		w = (const uint32_t *)c->h_hist;
	}
	for (size_t i = 0; i < head; i++)
		if (w[i] & 0xffffu)
			return 0;
	*yes = 1;
	return 0;
}

/* The rest of the upcast check, on the device: every low half is zero. */
static int low_halves_zero(struct cuda_engine *c, const void *raw, size_t n, int *yes)
{
	*yes = 1;
	if (n <= 64)
		return 0;
	CU(cudaMemsetAsync(c->d_counts, 0, sizeof(unsigned long long), c->compute));
	low_halves_kernel<<<grid_for(c, n, 256), 256, 0, c->compute>>>((const uint32_t *)raw, n,
								       c->d_counts);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_counts, c->d_counts, sizeof(unsigned long long),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	*yes = c->h_counts[0] == 0;
	return 0;
}

/*
 * Copies a device view on the engine's device into raw (allocated on the
 * copy stream), after the caller's default-stream work, and returns once
 * the copy is done: the caller may then reuse or free its memory, as
 * wd_prepare promises, while the sort of our copy runs on.
 */
static int copy_view(struct cuda_engine *c, void *raw, const void *src, size_t bytes)
{
	int r = after_caller(c, c->copy);
	if (r)
		return r;
	CU(cudaMemcpyAsync(raw, src, bytes, cudaMemcpyDeviceToDevice, c->copy));
	CU(cudaEventRecord(c->uploaded, c->copy));
	CU(cudaStreamWaitEvent(c->compute, c->uploaded, 0));
	CU(cudaEventSynchronize(c->uploaded));
	return 0;
}

/*
 * Sorts n values of T at src with CUB's radix sort, whose key map is the
 * CPU engine's, into p->dev_keys; then queues the search for the finite
 * range (settle). When p owns src (own), src is one of the sort's two
 * buffers and is freed or kept as the result; else (the caller's memory,
 * or raw kept for pair statistics) src is only read. On failure every
 * buffer allocated here, and src when owned, is freed.
 */
template <typename T>
static int sort_values(struct cuda_engine *c, T *src, int own, size_t n, struct wd_prepared *p)
{
	void *alt = NULL, *tmp = NULL, *mine = own ? src : NULL;
	size_t bytes = n * sizeof(T), tmp_bytes = 0;
	cudaError_t err;
	unsigned long long *s;
	int slot, r;

	if ((r = dev_alloc(c, &alt, bytes)))
		goto fail;
	if (own) {
		cub::DoubleBuffer<T> db(src, (T *)alt);
		err = cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, db, (int64_t)n, 0,
						     (int)(8 * sizeof(T)), c->compute);
		if (err == cudaSuccess && !(r = dev_alloc(c, &tmp, tmp_bytes)))
			err = cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, db, (int64_t)n, 0,
							     (int)(8 * sizeof(T)), c->compute);
		if (r)
			goto fail;
		p->dev_keys = db.Current();
	} else {
		err = cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, (const T *)src, (T *)alt,
						     (int64_t)n, 0, (int)(8 * sizeof(T)), c->compute);
		if (err == cudaSuccess && !(r = dev_alloc(c, &tmp, tmp_bytes)))
			err = cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, (const T *)src, (T *)alt,
							     (int64_t)n, 0, (int)(8 * sizeof(T)),
							     c->compute);
		if (r)
			goto fail;
		p->dev_keys = alt;
	}
	if (err != cudaSuccess) {
		r = cuda_fail(err, "DeviceRadixSort::SortKeys", __FILE__, __LINE__);
		p->dev_keys = NULL;
		goto fail;
	}
	p->dev_bytes += bytes;
	dev_free(c, &tmp, tmp_bytes);	/* in stream order: after the sort */
	if (own) {
		if (p->dev_keys == mine)
			dev_free(c, &alt, bytes);
		else
			dev_free(c, &mine, bytes);
	}
	/* the finite range and the counts, to a pinned slot; settled later */
	slot = slot_take(c);
	s = c->h_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS;
	nonfinite_ends_kernel<T><<<1, 1, 0, c->compute>>>((const T *)p->dev_keys, n, s, s + 2);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "nonfinite_ends_kernel", __FILE__, __LINE__);
	}
	return counts_queued(c, p, slot);
fail:
	dev_free(c, &tmp, tmp_bytes);
	dev_free(c, &alt, bytes);
	if (own)
		dev_free(c, &mine, bytes);
	return r;
}

/* Lets go of p's raw values: frees our copy, or forgets the caller's. */
static void drop_raw(struct cuda_engine *c, struct wd_prepared *p, size_t bytes)
{
	if (p->dev_raw_borrowed) {
		p->dev_raw = NULL;
		p->dev_raw_borrowed = 0;
	} else if (p->dev_raw) {
		dev_free(c, &p->dev_raw, bytes);
		p->dev_bytes -= bytes;
	}
}

/*
 * Puts a device view that kernels here must not read (MEM_OTHER) into raw,
 * through a host copy that is then uploaded as pageable memory. raw was
 * allocated first, so that a tensor over the budget costs no host copy.
 */
static int upload_other(struct cuda_engine *c, void *raw, const void *src, size_t bytes,
			int owner)
{
	void *h = malloc(bytes);
	int r;

	if (!h)
		return -ENOMEM;
	r = read_device(c, h, src, bytes, owner);
	if (!r)
		r = upload(c, raw, h, bytes, 0);	/* returns when h may be freed */
	free(h);
	return r;
}

/* 16-bit codes sorted as floats (WD_PREP_FORCE_SORT). */
static int prepare_sorted16(struct cuda_engine *c, const void *raw, enum wd_dtype t, size_t n,
			    int keep_raw, struct wd_prepared *p)
{
	void *wide = NULL;
	int r;

	if ((r = dev_alloc(c, &wide, n * 4)))
		return r;
	if (t == WD_BF16)
		widen16_kernel<fmt_bf16><<<grid_for(c, n, 256), 256, 0, c->compute>>>(
			(const uint16_t *)raw, n, (float *)wide);
	else
		widen16_kernel<fmt_f16><<<grid_for(c, n, 256), 256, 0, c->compute>>>(
			(const uint16_t *)raw, n, (float *)wide);
	cudaError_t err = cudaGetLastError();
	if (err != cudaSuccess) {
		dev_free(c, &wide, n * 4);
		return cuda_fail(err, "widen16_kernel", __FILE__, __LINE__);
	}
	if (!keep_raw)	/* read by the widening only: give it back before the sort */
		drop_raw(c, p, n * 2);
	p->store = WD_F32;
	return sort_values<float>(c, (float *)wide, 1, n, p);	/* owns wide */
}

static int prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		   struct wd_prepared *p)
{
	size_t esize = wd_dtype_size(v->dtype), n = v->numel, bytes = n * esize;
	int is16 = v->dtype == WD_BF16 || v->dtype == WD_F16;
	int keep_raw = flags & WD_PREP_KEEP_RAW, force_sort = flags & WD_PREP_FORCE_SORT;
	int upcast = 0, owner, r;
	void *raw = NULL;

	p->dev_slot = -1;
	if (n == 0)
		return -ENOMEM;	/* nothing to gain: the CPU path handles empty tensors */
	enum mem_kind kind = mem_kind_of(c, v->data, esize, &owner);
	p->view_on_device = kind == MEM_DEVICE || kind == MEM_OTHER;
	if (v->dtype == WD_F32 && !force_sort &&
	    (r = prefix_upcast(c, v->data, kind, owner, n, &upcast)))
		return r;
	/*
	 * A 16-bit device view that is only counted is counted in place, and
	 * wd_prepare returns once the count is done (below): that costs less
	 * than the copy it replaces, which it would wait for too.
	 */
	int count_in_place = kind == MEM_DEVICE && is16 && !force_sort && !keep_raw;
	if ((kind == MEM_DEVICE && keep_raw) || count_in_place) {
		/* kept by reference (WD_PREP_KEEP_RAW), or counted: read in place */
		raw = (void *)v->data;
		p->dev_raw = raw;
		p->dev_raw_borrowed = 1;
		if ((r = after_caller(c, c->compute)))
			return r;
	} else {
		/* on the copy stream, which writes it first */
		if ((r = dev_alloc_on(c, &raw, bytes, c->copy)))
			return r;
		if (kind == MEM_DEVICE)
			r = copy_view(c, raw, v->data, bytes);
		else if (kind == MEM_OTHER)
			r = upload_other(c, raw, v->data, bytes, owner);
		else if (kind == MEM_PINNED && !(r = after_caller(c, c->copy)))
			r = upload(c, raw, v->data, bytes, 1);
		else if (kind == MEM_PAGEABLE)
			r = upload(c, raw, v->data, bytes, 0);
		if (r) {
			/*
			 * The compute stream may not be ordered after the copy
			 * stream yet: free it where it was allocated.
			 */
			cudaFreeAsync(raw, c->copy);
			c->used -= bytes < c->used ? bytes : c->used;
			return r;
		}
		p->dev_raw = raw;	/* owned by p from here, so release() frees it */
		p->dev_bytes = bytes;
	}
	if (upcast && (r = low_halves_zero(c, raw, n, &upcast)))
		return r;
	if (is16 && !force_sort) {
		r = prepare_hist(c, raw, 0, v->dtype, p);
	} else if (is16) {
		r = prepare_sorted16(c, raw, v->dtype, n, keep_raw, p);
	} else if (upcast) {
		r = prepare_hist(c, raw, 1, WD_BF16, p);
	} else {
		/*
		 * Our own copy of raw is sorted in place (it is one of the
		 * sort's two buffers) unless it is kept for pair statistics;
		 * then, or when it is the caller's memory, it is only read.
		 */
		int own = !p->dev_raw_borrowed && !keep_raw;
		if (own) {
			p->dev_raw = NULL;	/* the sort owns it now */
			p->dev_bytes -= bytes;
		}
		p->store = v->dtype;
		r = v->dtype == WD_F64 ? sort_values<double>(c, (double *)raw, own, n, p)
				       : sort_values<float>(c, (float *)raw, own, n, p);
	}
	if (r)
		return r;
	if (count_in_place)	/* the caller may reuse its memory once we return */
		CU(cudaStreamSynchronize(c->compute));
	if (!keep_raw)
		drop_raw(c, p, bytes);
	return 0;
}

extern "C" int cuda_prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
			    struct wd_prepared *p)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, prepare(c, v, flags, p));
}

extern "C" int cuda_settle(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return 0;
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, settle(c, p));
}

extern "C" void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p)
{
	on_device on(c->device);	/* on failure the frees below fail, and say nothing */
	settle_drop(c, p);
	dev_free(c, &p->dev_keys, 0);	/* accounted below, as a whole */
	dev_free(c, &p->dev_hist, 0);
	if (p->dev_raw_borrowed)
		p->dev_raw = NULL;	/* the caller's memory */
	else
		dev_free(c, &p->dev_raw, 0);
	p->dev_raw_borrowed = 0;
	c->used -= p->dev_bytes < c->used ? p->dev_bytes : c->used;
	p->dev_bytes = 0;
}


/*
 * For engine.c: device memory to the host, a device view of any device
 * (read_device) or a prepared tensor's raw copy. The compute stream is
 * synced first: a raw copy is written on our non-blocking streams, which
 * the legacy stream that cudaMemcpy uses does not wait for.
 */
extern "C" int cuda_copy_to_host(struct cuda_engine *c, const void *dev, size_t bytes, void **out)
{
	void *h = malloc(bytes ? bytes : 1);
	int owner = -1, r;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	on_device on(c->device);
	if (!on.ok) {
		free(h);
		return lost(c, -EIO);
	}
	cudaError_t err = cudaStreamSynchronize(c->compute);
	if (err != cudaSuccess) {
		free(h);
		return lost(c, cuda_fail(err, "cudaStreamSynchronize", __FILE__, __LINE__));
	}
	mem_kind_of(c, dev, 1, &owner);
	if ((r = read_device(c, h, dev, bytes, owner))) {
		free(h);
		return lost(c, r);
	}
	*out = h;
	return 0;
}

/*
 * The count kernels hold a sign half's bins in dynamic shared memory, more
 * than the default 48 KiB: allowed once, at open, for each one count16
 * instantiates.
 */
cudaError_t count16_kernels_setup(void)
{
	cudaError_t err = cudaSuccess;
#define HIST_SMEM(F, W, V) if (err == cudaSuccess) \
	err = cudaFuncSetAttribute(hist16_kernel<F, W, V>, \
				   cudaFuncAttributeMaxDynamicSharedMemorySize, HIST_HALF * 4)
	HIST_SMEM(fmt_bf16, uint16_t, 8);
	HIST_SMEM(fmt_bf16, uint16_t, 1);
	HIST_SMEM(fmt_f16, uint16_t, 8);
	HIST_SMEM(fmt_f16, uint16_t, 1);
	HIST_SMEM(fmt_bf16, uint32_t, 4);
	HIST_SMEM(fmt_bf16, uint32_t, 1);
	HIST_SMEM(fmt_f16, uint32_t, 4);	/* instantiated by count16, never launched */
	HIST_SMEM(fmt_f16, uint32_t, 1);
#undef HIST_SMEM
	return err;
}

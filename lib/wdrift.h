/*
 * wdrift.h: the public C API of libwdrift, the exact drift engine.
 *
 * The engine measures how far two tensors of weights are apart:
 *   - W1, the 1-D Wasserstein-1 distance between the empirical distributions
 *     of their finite values (what scipy.stats.wasserstein_distance returns);
 *   - counts of NaN, +Inf and -Inf on each side, left out of W1;
 *   - element-wise statistics when the element counts match;
 *   - per-tensor summaries.
 *
 * Usage: open an engine, prepare each tensor once (sorted values, or an
 * exact 65536-bin count for 16-bit data), then ask for W1 between any two
 * prepared tensors. A prepared baseline is reused against every run it is
 * compared with.
 *
 * Conventions: functions return 0 or a negative errno. Objects are freed by
 * functions that take a T ** and set it to NULL. An engine is not thread
 * safe: use one per thread (it runs threads of its own inside its calls,
 * wd_engine_set_threads). This header depends on nothing but libc.
 */
#ifndef WDRIFT_H
#define WDRIFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WDRIFT_VERSION "0.1.0"

/* Element types. bf16 is the upper half of an IEEE binary32. */
enum wd_dtype { WD_F32 = 0, WD_F64 = 1, WD_F16 = 2, WD_BF16 = 3 };
#define WD_DTYPE_COUNT 4

/* "f32", "f64", "f16", "bf16"; "?" for an invalid value. */
const char *wd_dtype_name(enum wd_dtype t);
/* Parses the names above (and "float32", "bfloat16", ...). 0 or -EINVAL. */
int wd_dtype_parse(const char *s, enum wd_dtype *out);
/* Bytes per element: 4, 8, 2, 2; 0 for an invalid value. */
size_t wd_dtype_size(enum wd_dtype t);

/* A borrowed, contiguous tensor. The engine never writes through data. */
struct wd_view {
	enum wd_dtype dtype;
	const void *data;
	uint64_t numel;
};

struct wd_nonfinite {
	uint64_t nan, posinf, neginf;
};

/*
 * Summary of a tensor's finite values. std is the population standard
 * deviation (ddof = 0, as numpy.std). mean, std, min and max are NaN when
 * no value is finite; l2 is then 0.
 */
struct wd_summary {
	uint64_t numel;		/* all elements */
	uint64_t n_finite;
	struct wd_nonfinite nonfinite;
	double mean, std, min, max, l2;
};

/*
 * Element-wise statistics of two tensors with the same element count.
 * max_abs_diff and rel_l2 = ||a-b|| / ||a|| run over positions where both
 * values are finite (n_compared of them). rel_l2 is 0 when a == b there and
 * NaN when ||a|| = 0 but a != b; max_abs_diff is NaN when n_compared = 0.
 * n_diff counts positions whose values differ: -0 equals +0, and a position
 * where both hold the same non-finite kind (NaN/NaN, +Inf/+Inf, -Inf/-Inf)
 * does not differ.
 */
struct wd_pair_stats {
	double max_abs_diff;
	double rel_l2;
	uint64_t n_diff;
	uint64_t n_compared;
};

enum wd_backend { WD_BACKEND_AUTO = 0, WD_BACKEND_CPU = 1, WD_BACKEND_CUDA = 2 };

/* How a tensor was prepared. */
enum wd_method {
	WD_METHOD_SORT = 0,	/* finite values, radix sorted */
	WD_METHOD_HIST16 = 1,	/* exact 65536-bin count of 16-bit codes */
};

/* Flags for wd_prepare(). */
#define WD_PREP_FORCE_SORT 1u	/* sort even 16-bit data (tests, references) */
/*
 * Keep the raw values for wd_pair_stats_prepared(). The CPU backend, and the
 * CUDA backend given device memory, keep a reference to v->data, which the
 * caller must then keep alive and unchanged until the prepared tensor is
 * freed; the CUDA backend given host memory keeps a device copy.
 */
#define WD_PREP_KEEP_RAW 2u
/* Every flag wd_prepare knows: any other bit is -EINVAL. */
#define WD_PREP_ALL (WD_PREP_FORCE_SORT | WD_PREP_KEEP_RAW)

struct wd_engine;
struct wd_prepared;

/* Log levels, as syslog's. */
#define WD_LOG_ERR 3
#define WD_LOG_WARNING 4
#define WD_LOG_NOTICE 5
#define WD_LOG_INFO 6
#define WD_LOG_DEBUG 7
/*
 * Routes the library's log lines: those at or below level go to handler, or
 * to stderr as "wdrift: MSG" when handler is NULL. Default: warnings and
 * errors to stderr. Not thread safe: call it before opening engines.
 */
void wd_log_set(int level, void (*handler)(int level, const char *msg));

/* "auto", "cpu", "cuda" to the enum; 0 or -EINVAL. */
int wd_backend_parse(const char *s, enum wd_backend *out);
/* 1 when the library was built with the CUDA backend. */
int wd_have_cuda(void);

/*
 * Opens an engine on the given backend, on CUDA device 0. AUTO picks CUDA
 * when the library was built with it and a device is present, else the CPU,
 * and logs which at NOTICE level (CUDA asked for: the same; the CPU asked
 * for: at DEBUG, as that is no news). Asking for CUDA where it is not available
 * returns -ENODEV. The same as wd_engine_open_device(backend, 0, out).
 */
int wd_engine_open(enum wd_backend backend, struct wd_engine **out);
/*
 * The same on CUDA device `device` (0 to the device count less 1, in the
 * CUDA runtime's numbering, which CUDA_VISIBLE_DEVICES changes). A device
 * that does not exist is -ENODEV for CUDA, logged with the index and the
 * count; AUTO then falls back to the CPU, saying why. The CPU backend
 * ignores the index. -EINVAL for a negative index. The engine makes its
 * device current only during its own calls: the caller's current device is
 * the same after each call as before it.
 */
int wd_engine_open_device(enum wd_backend backend, int device, struct wd_engine **out);
/* Frees the engine. Free its prepared tensors first. */
void wd_engine_close(struct wd_engine **e);
/* A one-line description of the backend and device, e.g. "cpu". */
const char *wd_engine_describe(const struct wd_engine *e);
/* The backend really in use: CPU after a fallback from CUDA. */
enum wd_backend wd_engine_backend(const struct wd_engine *e);
/*
 * Bounds the device memory the engine holds (prepared tensors, staging and
 * scratch), in bytes; 0 means the device's free memory less a margin. A
 * tensor that does not fit is prepared on the CPU instead. The CPU backend
 * ignores it.
 */
void wd_engine_set_budget(struct wd_engine *e, uint64_t bytes);
/*
 * Sets how many threads the CPU side of the engine uses: 0 (the default)
 * means the cores this process may run on (its CPU affinity, as
 * sched_getaffinity says, not the host's core count). A large tensor's
 * sort, count, W1 and statistics are split between them; a batch
 * (wd_prepare_many, wd_w1_many) runs its small tensors many at once.
 * Results are bit for bit those of one thread, whatever the count: every
 * floating-point sum is taken in the same order (docs/engine.md,
 * "Threads"). The threads start at the first job that needs them and
 * are joined by wd_engine_close. Not to be called while another thread
 * is using the engine.
 */
void wd_engine_set_threads(struct wd_engine *e, int threads);
/* The thread count in effect (the cores available when 0 was set). */
int wd_engine_threads(const struct wd_engine *e);
/*
 * The fewest elements a thread is given when a tensor is split (default
 * 65536; 0 restores it). Smaller tensors run on one thread, where the
 * threads' start would cost more than they save. For tests, which set 1
 * to split tiny tensors at every boundary.
 */
void wd_engine_set_grain(struct wd_engine *e, uint64_t elements);
/*
 * In a batch (wd_prepare_many, wd_w1_many, and the daemon's compute
 * workers), a tensor under this many elements runs on one thread, beside
 * others, where a split would cost more than it saves. A larger one is
 * done with all the engine's threads, unless wd_prepare_many can give it a
 * thread of its own (docs/engine.md, "Batches").
 */
#define WD_BATCH_SPLIT_MIN ((uint64_t)1 << 20)
/*
 * The CPU's sort of fp32 and fp64 values (docs/engine.md, "The sort").
 * Both give the same bits. AUTO, the default, is Highway's vqsort where
 * the library was built with it and the CPU has AVX2 (but the radix sort
 * for fp32 tensors of 16 Ki to 128 Ki elements, where it is faster), and
 * the radix sort elsewhere. -ENOTSUP for VQSORT where it is not available (nothing
 * changes), -EINVAL for another value. For benchmarks and tests.
 */
enum wd_sort { WD_SORT_AUTO = 0, WD_SORT_RADIX, WD_SORT_VQSORT };
int wd_engine_set_sort(struct wd_engine *e, enum wd_sort sort);
/* The sort in effect: WD_SORT_RADIX or WD_SORT_VQSORT. */
enum wd_sort wd_engine_sort(const struct wd_engine *e);

/*
 * Prepares a tensor for W1: counts its non-finite values and keeps its finite
 * values sorted, or, for bf16/fp16 data and fp32 data whose low 16 bits are
 * all zero (upcast bf16), an exact 65536-bin count. The prepared tensor owns
 * its memory; the view may be released afterwards. numel may be 0.
 *
 * With the CUDA backend v->data may also be device memory (cudaMalloc'd or
 * managed): the engine orders its reads after work queued on the default
 * streams of the device that holds it; work on other streams the caller
 * must finish first. Memory on the engine's device, aligned to the element
 * size, is read in place; memory on another device, or at an odd offset,
 * is copied through the host first (slower, but never a device fault).
 *
 * Returns 0, -EINVAL (bad dtype or NULL data with numel > 0), -ENOMEM,
 * -EFAULT when device memory was given and could not be read (the engine
 * stays on its device), or -EIO when device memory was given and the device
 * failed.
 */
int wd_prepare(struct wd_engine *e, const struct wd_view *v, unsigned flags,
	       struct wd_prepared **out);
/*
 * The most host memory wd_prepare holds for numel elements of dtype on
 * e's CPU side with one thread, beyond the view: the prepared tensor, any
 * scratch the sort keeps (the radix sort's, of the keys' size) and 1 MiB
 * for its tables (a 16-bit count's 65536 counts are within it). For a
 * caller that bounds the tensors in flight, as wdriftd's compute workers
 * do within memory.budget. 0 for a bad dtype.
 */
uint64_t wd_prepare_bytes(const struct wd_engine *e, enum wd_dtype dtype, uint64_t numel,
			  unsigned flags);
/*
 * Frees the scratch buffer the CPU side keeps between prepares (the radix
 * sort's, as large as the largest tensor it sorted), so that what
 * wd_prepare_bytes counted is given back once the tensor is freed. Freed
 * sort-key buffers and 16-bit counts are kept for the next prepares too:
 * 32 MiB of each, and as much again as the most in use at once exceeds
 * what is in use now (a
 * batch freed, then the next one prepared, reuses its memory). This also
 * frees every kept key buffer of 4 MiB or more and the others beyond 32
 * MiB, and the peak starts again. Not to be called while another thread
 * is using the engine.
 */
void wd_engine_release_scratch(struct wd_engine *e);
/*
 * Bytes of freed sort keys and 16-bit counts kept for the next prepares,
 * by every engine of the process (the lists are the process's): memory
 * beside what is in use, which a daemon reports (status, metrics).
 */
uint64_t wd_engine_spare_bytes(void);
void wd_prepared_free(struct wd_prepared **p);
/*
 * Prepares n tensors, as wd_prepare would each (flags for all), in
 * parallel on the CPU: one per thread, each thread taking the next, for
 * the small ones and for large ones that vqsort or a 16-bit count
 * prepares in their own buffer and that are at most a thread's share of
 * the batch's work; the others are split between the engine's threads
 * one after the other (docs/engine.md, "Batches"). out[i] gets views[i]'s
 * prepared tensor. On the GPU they are prepared in turn. Returns 0;
 * -EINVAL for a bad view (the first by index), before anything is
 * prepared; or the error of a tensor that failed (-ENOMEM, -EIO: the
 * first by index among those tried). Every out[] is then NULL: what was
 * prepared is freed.
 */
int wd_prepare_many(struct wd_engine *e, const struct wd_view *views, size_t n, unsigned flags,
		    struct wd_prepared **out);

enum wd_method wd_prepared_method(const struct wd_prepared *p);
enum wd_dtype wd_prepared_dtype(const struct wd_prepared *p);
uint64_t wd_prepared_numel(const struct wd_prepared *p);
uint64_t wd_prepared_finite(const struct wd_prepared *p);
void wd_prepared_nonfinite(const struct wd_prepared *p, struct wd_nonfinite *out);

/* Computes the summary of a prepared tensor (one pass over its values). */
void wd_summarize(const struct wd_prepared *p, struct wd_summary *out);
/* The same, with a tensor prepared by e on the CPU split between e's threads (same bits). */
void wd_engine_summarize(struct wd_engine *e, const struct wd_prepared *p,
			 struct wd_summary *out);

/*
 * W1 between the finite values of two prepared tensors, of any dtypes and
 * sizes. *w1 is NaN when either side has no finite value (the distance is
 * undefined there; scipy raises). Accumulates in double.
 */
int wd_w1(struct wd_engine *e, const struct wd_prepared *a,
	  const struct wd_prepared *b, double *w1);

/*
 * W1 of n pairs, w1[i] = W1(a[i], b[i]) as wd_w1 gives it: on the CPU,
 * small pairs many at once, one per thread, and large ones split. Returns
 * 0 or the first error (by index); the pairs it did not compute are NaN.
 */
int wd_w1_many(struct wd_engine *e, const struct wd_prepared *const *a,
	       const struct wd_prepared *const *b, size_t n, double *w1);

/*
 * Queues W1 like wd_w1(); *w1 is written by the next wd_engine_sync(), and
 * must stay valid until then. On the GPU this lets the next tensor's upload
 * overlap this one's work. The prepared tensors may be freed before the
 * sync: device memory is released in stream order, after the work using it.
 */
int wd_w1_async(struct wd_engine *e, const struct wd_prepared *a,
		const struct wd_prepared *b, double *w1);
/*
 * Waits for queued work and writes every pending result. Returns 0, or -EIO
 * when the device failed: the engine has then fallen back to the CPU, the
 * pending results are NaN, and tensors prepared on the device must be
 * prepared again (wd_w1 on them returns -EIO).
 */
int wd_engine_sync(struct wd_engine *e);

/* Element-wise statistics; -EINVAL unless a->numel == b->numel. */
int wd_pair_stats(struct wd_engine *e, const struct wd_view *a,
		  const struct wd_view *b, struct wd_pair_stats *out);
/*
 * The same from two tensors prepared with WD_PREP_KEEP_RAW, where their raw
 * values already are (on the device, with the CUDA backend). -EINVAL when a
 * tensor kept no raw values or the counts differ.
 */
int wd_pair_stats_prepared(struct wd_engine *e, const struct wd_prepared *a,
			   const struct wd_prepared *b, struct wd_pair_stats *out);

/*
 * Rounds every value of src to bf16 or fp16 (to = WD_BF16 or WD_F16) with
 * round-to-nearest-even from the exact value, writing the 16-bit codes
 * to dst (src->numel of them). Values beyond the format's range become Inf;
 * NaN stays NaN. From fp32 this is what a PyTorch cast gives; from fp64,
 * PyTorch rounds through fp32 first, which differs in rare near-ties.
 * Returns 0 or -EINVAL.
 */
int wd_round16(const struct wd_view *src, enum wd_dtype to, uint16_t *dst);

/* The value of a 16-bit code of bf16 or fp16 (NaN for other dtypes). */
double wd_decode16(enum wd_dtype t, uint16_t code);

/* --- Errors --- */

/*
 * A message for a negative errno that a function of this library returned,
 * e.g. wd_strerror(-ETIMEDOUT); never NULL.
 */
const char *wd_strerror(int err);
/*
 * What the last failing call of the publisher API on this thread said, in
 * full ("endpoint 'http://x': ..."); "" when it said nothing more than its
 * errno. Valid until the next call on this thread.
 */
const char *wd_last_error(void);

/* --- Publishing snapshots to wdriftd (docs/protocol.md, docs/publishing.md) --- */

/* What to do with a committed snapshot when the queue is full. */
enum wd_drop_policy {
	WD_DROP_OLDEST = 0,	/* drop the oldest queued snapshots (default) */
	WD_DROP_NEWEST = 1,	/* drop this one */
	WD_BLOCK = 2,		/* wait for room (the daemon acking) */
};

struct wd_publisher_opts {
	/*
	 * Payload bytes queued at most; 0: 1 GiB. A snapshot larger than
	 * this is still taken when the queue is empty, so that none is lost
	 * for its size alone.
	 */
	uint64_t queue_bytes;
	enum wd_drop_policy policy;
	int ack_timeout_ms;		/* per snapshot, before reconnecting; 0: 30000 */
	/*
	 * CURVE (docs/security.md), for a daemon with auth.server_key: the
	 * daemon's public key (40 characters of Z85, or a file that holds
	 * it) and this client's key pair file (wdrift keygen). NULL: from
	 * the environment, WDRIFT_SERVER_KEY and WDRIFT_KEY; neither there:
	 * no CURVE. Both or neither.
	 */
	const char *server_key;
	const char *key;
	/*
	 * Snapshots waiting and no ack for this long: one warning on stderr
	 * naming the endpoint, and one more when acks come again. 0: 30000;
	 * negative: never.
	 */
	int stall_warn_ms;
	/*
	 * Publishers that share each snapshot of this run: the ranks of a
	 * sharded job, each sending only its own shards (wd_publisher_block)
	 * and committing every tensor name of the whole snapshot. The
	 * snapshot is durable once all shards are in; every rank is acked.
	 * 0 or 1: this publisher sends whole snapshots alone.
	 */
	int ranks;
	/*
	 * How this publisher's user gives the two keys above, for its
	 * messages (a refused handshake says which to give): NULL for
	 * "server_key" and "key", the fields' names and the Python
	 * package's arguments; `wdrift send` gives "--server-key", "--key".
	 * Up to 31 bytes each: longer ones are cut.
	 */
	const char *server_key_arg, *key_arg;
};

struct wd_publisher_stats {
	uint64_t committed;	/* snapshots committed by the caller */
	uint64_t acked;		/* made durable by the daemon (duplicates included) */
	uint64_t dropped;	/* never made durable: the drop policy, refusals, close */
	uint64_t resent;	/* sent again after a timeout or reconnect */
	uint64_t queued, queued_bytes;	/* waiting, in flight included */
	int connected;		/* the daemon answered, and has not closed the connection since */
	uint64_t duplicates;	/* acked as already durable with the same content */
	uint64_t conflicts;	/* refused: durable with other content (in dropped) */
	uint64_t refused;	/* refused for another final reason (in dropped) */
};

struct wd_publisher;

/*
 * Connects (in the background) to a daemon's ingest endpoint as run. A
 * thread sends queued snapshots and waits for each one's durable ack;
 * unacknowledged snapshots are sent again after a timeout, also across a
 * daemon restart, backing off from 100 ms to 5 s while the daemon does
 * not answer. opts may be NULL. The endpoint must be tcp://, ipc:// or
 * inproc:// and one that ZeroMQ accepts; an ipc:// socket that does not
 * exist yet is a warning (the daemon may start later), naming the full
 * path. Returns 0, -EINVAL (a bad run name, endpoint, key or option:
 * a policy not of the three, a negative ack_timeout_ms; wd_last_error()
 * says which and why) or -ENOMEM.
 *
 * Not to be used across fork(): the sending thread stays in the parent, so
 * a child opens a publisher of its own.
 *
 * Every call below given a NULL publisher (what wd_publisher_close leaves
 * in the handle) returns -EINVAL, said by wd_last_error(), or does nothing
 * (get_stats: zeros; refusals, notice: 0; diagnosis: WD_DIAGNOSIS_NONE;
 * cancel, close: nothing).
 */
int wd_publisher_open(const char *endpoint, const char *run, const struct wd_publisher_opts *opts,
		      struct wd_publisher **out);
/*
 * Checks the CURVE keys wd_publisher_open would use (the two arguments as
 * in struct wd_publisher_opts, NULL for the environment): 0, or -EINVAL
 * with err saying which key and what is wrong (a missing file, bad
 * permissions, one key without the other). The _as form names the two
 * arguments as the caller's users know them (e.g. "server_key=", "key=").
 */
int wd_publisher_check_keys(const char *server_key, const char *key, char *err, size_t errlen);
int wd_publisher_check_keys_as(const char *server_key, const char *key, const char *server_arg,
			       const char *key_arg, char *err, size_t errlen);
/*
 * Starts the snapshot of step; tensors added until wd_publisher_commit.
 * A snapshot begun and not committed is dropped. -EINVAL for a negative
 * step.
 */
int wd_publisher_begin(struct wd_publisher *p, int64_t step);
/*
 * Adds a tensor (or a shard of one: offset and count of total elements, in
 * row-major order) to the snapshot being built: its data is copied, and
 * that copy is all it costs the caller (the checksum is the sending
 * thread's). shape may be NULL, with ndims 0 or 1: 1-D of total; else its
 * ndims sizes must multiply to total. count may be 0: a rank that holds
 * nothing of a tensor still names it. A name added before in this
 * snapshot (another piece of it) must give the same dtype, shape and
 * total. -EINVAL, said by wd_last_error(): no begin, a bad name, dtype or
 * shape, a piece outside the tensor, NULL data for count > 0. A piece
 * refused (by this call or wd_publisher_block) spoils the snapshot, which
 * would be stored without it: wd_publisher_commit refuses it; begin again.
 */
int wd_publisher_tensor(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			const void *data, const uint64_t *shape, int ndims, uint64_t offset,
			uint64_t count, uint64_t total);
/*
 * Adds the block of a tensor that this caller holds: a C-contiguous array
 * of local[0] x ... x local[ndims-1] elements, whose first element is at
 * index start[] of the whole tensor of shape[] (ndims dimensions, 0 for a
 * scalar). It goes as the fewest shards contiguous in the flattened whole:
 * one for a block of whole rows, one per row for a column block. One copy,
 * as wd_publisher_tensor. -EINVAL when the block is not inside the tensor;
 * -E2BIG when it would take more than 65,536 shards. A block refused
 * spoils the snapshot as a refused wd_publisher_tensor does: begin again.
 */
int wd_publisher_block(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
		       const void *data, const uint64_t *shape, const uint64_t *start,
		       const uint64_t *local, int ndims);
/*
 * Queues the snapshot. When the queue is full the policy applies: a
 * dropped snapshot is counted, not an error; so is one the daemon refuses
 * later (a conflict: a run name re-used for other weights), which
 * wd_publisher_refusals, the stats and wd_publisher_close's count say.
 * Returns 0, or -EINVAL, said by wd_last_error(), without a begin, for a
 * snapshot with a piece refused while it was built (refused so until the
 * next begin), for a snapshot of no tensor, for elements that two pieces
 * of a tensor both give, or when ranks is 1 and a tensor is not whole (the
 * snapshot is kept: add what is missing, or begin again; one discarded
 * so, or left at close, is said and counted by wd_publisher_close).
 */
int wd_publisher_commit(struct wd_publisher *p);
void wd_publisher_get_stats(struct wd_publisher *p, struct wd_publisher_stats *out);
/*
 * The number of snapshots the daemon has refused for good so far
 * (conflicts and other final errors), and the last refusal's message
 * ("run 'r' step 10 refused: conflict: ...") copied to buf; with
 * conflicts = 1, the same of conflicts only.
 */
uint64_t wd_publisher_refusals(struct wd_publisher *p, int conflicts, char *buf, size_t len);
/*
 * The daemon's notice for this run, from its welcome, copied to buf ("" when
 * none came): today that the run belongs to no study, so that its snapshots
 * are stored but never compared (a typo in the name), with the nearest
 * run of a study. The publisher also says it once on stderr (wd_log, as a
 * warning). Returns its whole length, as snprintf does, even when buf is
 * shorter. Thread safe.
 *
 * "" until the publisher's first exchange with the daemon: the sending
 * thread connects, and the daemon welcomes it, only once a snapshot is
 * queued (the first wd_publisher_commit). So "" before that, and while the
 * daemon does not answer; once a snapshot is acked or refused (stats) the
 * welcome has come, being the daemon's first reply. "" also when the
 * welcome had no notice. The first notice is kept for the publisher's life.
 */
size_t wd_publisher_notice(struct wd_publisher *p, char *buf, size_t len);
/*
 * The daemon's latest notice after its welcome, copied to buf ("" when
 * none came), as wd_publisher_notice returns it: an ack's (the run
 * published by two jobs at once, ranks that give two counts) or one sent
 * unasked (two publishers of one rank; the run's tensor names match none
 * or not all of its study's baseline's, a `module.` prefix). Each is also
 * said once on stderr as it comes. Kept until a later one replaces it.
 * Thread safe.
 */
size_t wd_publisher_last_notice(struct wd_publisher *p, char *buf, size_t len);
/*
 * Why the daemon does not answer, when the publisher has found out,
 * copied to buf ("" when it has not, or when the daemon answered since):
 * the endpoint is wdriftd's control or events socket, not its ingest one,
 * the CURVE handshake failed (keys missing, not allowed, or given to a
 * daemon without auth), or nothing listens there (connects refused for
 * 5 s, or no ipc socket file), in words that say what to change. The publisher
 * also says it once as a warning (wd_log) and in its stall warning; a
 * program that silences those, or must end, such as `wdrift send`, reads
 * it here. Returns WD_DIAGNOSIS_NONE, _SURE (the peer answered or refused:
 * giving up on it is right) or _GUESS (the peer closed the handshake
 * without a word, as a daemon stopping or killed mid-handshake does too,
 * or nothing listens: a daemon started again may still take the
 * snapshot). Thread safe.
 */
enum { WD_DIAGNOSIS_NONE = 0, WD_DIAGNOSIS_SURE = 1, WD_DIAGNOSIS_GUESS = 2 };
int wd_publisher_diagnosis(struct wd_publisher *p, char *buf, size_t len);
/*
 * Gives a snapshot up after it was sent `tries` times without an answer
 * that ends it: no ack and no final refusal within ack_timeout_ms each
 * time, no connection, or only push-back (over_window, a full disk, ...).
 * It is then dropped and counted (stats.dropped), and said once on stderr.
 * 0 (the default): never; a training job's publisher waits out a daemon
 * restart. For a program that must end, such as `wdrift send`. Takes
 * effect from the next send; 0, or -EINVAL for a negative count. Thread
 * safe.
 */
int wd_publisher_set_tries(struct wd_publisher *p, int tries);
/*
 * Says which rank of opts.ranks this publisher is, from 0 (for a sharded
 * job: torch.distributed's rank, or torchrun's RANK). Each commit then
 * gives it, and the daemon knows when every rank has committed: a
 * snapshot still not whole then (two ranks sent the same piece) is
 * refused at once, not after limits.pending_timeout, and a rank that never
 * commits is named by number (docs/protocol.md, "Several ranks"). Not
 * said, commits count connections, as before. 0, or -EINVAL when ranks is
 * 1 or rank is not from 0 to ranks - 1. Takes effect from the next send;
 * thread safe.
 */
int wd_publisher_set_rank(struct wd_publisher *p, int rank);

/* What became of a snapshot that left the queue. */
enum wd_outcome_kind {
	WD_OUTCOME_ACKED = 1,		/* durable (or already durable: duplicate) */
	WD_OUTCOME_REFUSED = 2,		/* a final refusal (conflict, bad_name, ...) */
	WD_OUTCOME_GIVEN_UP = 3,	/* wd_publisher_set_tries' count of sends, unanswered */
};

struct wd_publisher_outcome {
	enum wd_outcome_kind kind;
	int64_t step;
	int tries;			/* sends it took */
	uint64_t tensors, bytes;	/* acked: the ack's (bytes stored; 0 for a duplicate) */
	int duplicate;			/* acked as already durable with the same content */
	/*
	 * Refused: the daemon's refusal. Given up: what it said to the last
	 * send (its push-back), all "" when it did not answer at all.
	 */
	char code[32];			/* "conflict", "over_window", ... */
	char tensor[256];		/* the tensor it named, truncated; "" for the snapshot */
	char reason[768];
};

/*
 * The outcome of the last snapshot to leave the queue (acked, refused or
 * given up) into out: 0, or -ENOENT while none has (wd_last_error() says
 * so). With one snapshot in
 * flight at a time, after a wd_publisher_flush that returned 0 it is the
 * last one committed (unless the queue's policy dropped that one).
 */
int wd_publisher_last_outcome(struct wd_publisher *p, struct wd_publisher_outcome *out);
/*
 * Makes a commit waiting for room (WD_BLOCK), now or later, drop its
 * snapshot and return: for a program that must close while another of its
 * threads commits. Thread safe.
 */
void wd_publisher_cancel(struct wd_publisher *p);
/*
 * Waits until no snapshot is queued: 0, or -ETIMEDOUT. Refused snapshots
 * leave the queue too: stats say how many were acked. It waits out a sure
 * diagnosis too: a reload that adds the job's key, or a daemon started on
 * a path freed, lets the snapshots through.
 */
int wd_publisher_flush(struct wd_publisher *p, int timeout_ms);
/*
 * wd_publisher_flush for a program that is ending: returns -EHOSTUNREACH
 * at once, before the timeout, while the diagnosis is sure
 * (wd_publisher_diagnosis: WD_DIAGNOSIS_SURE), as what waits can go
 * nowhere until a person fixes the endpoint, the keys or the daemon. An
 * ipc:// path found to be a regular file counts only while it still is
 * one: replaced since, settle waits as flush does.
 */
int wd_publisher_settle(struct wd_publisher *p, int timeout_ms);
/*
 * Settles (wd_publisher_settle, up to timeout_ms), then stops. Returns how
 * many snapshots were never made durable over the publisher's life
 * (stats.dropped, what close gave up included, and every snapshot whose
 * commit was refused and that a begin or close then discarded: never
 * queued, so in no stats), and warns on stderr when there were any.
 */
uint64_t wd_publisher_close(struct wd_publisher **p, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif

/*
 * sort_vq.h: Highway's vqsort of unsigned keys, on its AVX2 code only
 * (lib/sort_vq.cc; docs/engine.md, "The sort"). Internal.
 *
 * The keys are radix_sort.h's order-keeping map of floats, so ascending key
 * order is the radix sort's order exactly, -0 before +0 included: the
 * sorted floats have the same bits whichever sort made them.
 *
 * Which code: AVX-512 (Highway's AVX3_DL, else AVX3) where the CPU has it,
 * except on AMD Zen 4, else AVX2. Not Highway's own dispatch: on Zen 4,
 * Debian 12's Highway (1.0.3) would pick AVX-512, whose partition stores
 * with VCOMPRESSPS to memory, microcoded there: 7x slower than AVX2 on the
 * same machine (docs/performance.md). On Zen 5 AVX-512 is the faster
 * (1.37x). The shim compiles vqsort for each target itself and calls the
 * one it chose, which leaves Highway's process-wide dispatch alone.
 */
#ifndef WD_SORT_VQ_H
#define WD_SORT_VQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Internal to libwdrift.so, whichever file defines them. */
#define VQ_HIDDEN __attribute__((visibility("hidden")))

/*
 * True when vq_sort32 and vq_sort64 sort: built with Highway, and the CPU
 * has AVX2. Asked once, so that it cannot change during a prepare.
 */
VQ_HIDDEN int vq_available(void);
/* The code vq_sort32 runs: "avx3_dl", "avx3", "avx2", or "none". */
VQ_HIDDEN const char *vq_target_name(void);
/* Sorts n keys ascending in place; 0, or -1 (nothing done) when not vq_available(). */
VQ_HIDDEN int vq_sort32(uint32_t *keys, size_t n);
VQ_HIDDEN int vq_sort64(uint64_t *keys, size_t n);

#ifdef __cplusplus
}
#endif

#endif

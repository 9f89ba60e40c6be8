/*
 * backend_cuda_none.c: backend_cuda.h in a library built without CUDA
 * (CUDA=0): no device, ever. cuda_engine_open says why and returns
 * -ENODEV, so engine.c never holds a cuda_engine and calls nothing else
 * here; the rest answer "no device" all the same, so that the engine
 * links and behaves alike either way. Compiled in place of cuda/.
 */
#include <errno.h>
#include <stdio.h>

#include "backend_cuda.h"

int wd_have_cuda(void)
{
	return 0;
}

int cuda_engine_open(struct cuda_engine **out, int device, char *desc, size_t desclen)
{
	(void)device;
	*out = NULL;
	snprintf(desc, desclen, "built without CUDA");
	return -ENODEV;
}

void cuda_engine_close(struct cuda_engine **c)
{
	*c = NULL;
}

void cuda_engine_set_budget(struct cuda_engine *c, uint64_t bytes)
{
	(void)c;
	(void)bytes;
}

int cuda_prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		 struct wd_prepared *p)
{
	(void)c;
	(void)v;
	(void)flags;
	(void)p;
	return -ENODEV;
}

int cuda_summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	(void)c;
	(void)p;
	return -ENODEV;
}

void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p)
{
	(void)c;
	(void)p;
}

int cuda_settle(struct cuda_engine *c, struct wd_prepared *p)
{
	(void)c;
	(void)p;
	return -ENODEV;
}

int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
		  const struct wd_prepared *b, double *out)
{
	(void)c;
	(void)a;
	(void)b;
	(void)out;
	return -ENODEV;
}

int cuda_sync(struct cuda_engine *c)
{
	(void)c;
	return 0;
}

int cuda_pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
		    const struct wd_prepared *b, struct wd_pair_stats *out)
{
	(void)c;
	(void)a;
	(void)b;
	(void)out;
	return -ENODEV;
}

int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values)
{
	(void)c;
	(void)p;
	*values = NULL;
	return -ENODEV;
}

int cuda_copy_to_host(struct cuda_engine *c, const void *dev, size_t bytes, void **out)
{
	(void)c;
	(void)dev;
	(void)bytes;
	*out = NULL;
	return -ENODEV;
}

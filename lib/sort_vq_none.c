/*
 * sort_vq_none.c: sort_vq.h without Highway (make VQSORT=0, or no
 * libhwy-dev): the engine sorts with its radix sort alone.
 */
#include "sort_vq.h"

int vq_available(void)
{
	return 0;
}

int vq_sort32(uint32_t *keys, size_t n)
{
	(void)keys;
	(void)n;
	return -1;
}

int vq_sort64(uint64_t *keys, size_t n)
{
	(void)keys;
	(void)n;
	return -1;
}

const char *vq_target_name(void)
{
	return "none";
}

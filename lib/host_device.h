/*
 * host_device.h: WD_SHARED marks a small function that both engines
 * compile from one definition: the CPU engine (C11) and the CUDA kernel
 * bodies (C++ for the CPU test, CUDA for the device).
 */
#ifndef WD_HOST_DEVICE_H
#define WD_HOST_DEVICE_H

#ifdef __CUDACC__
#define WD_SHARED __host__ __device__ __forceinline__
#elif defined(__cplusplus)
#define WD_SHARED inline
#else
#define WD_SHARED static inline
#endif

#endif

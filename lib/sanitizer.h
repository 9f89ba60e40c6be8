/*
 * sanitizer.h: WD_UNDER_ASAN, 1 in a build with AddressSanitizer and 0
 * otherwise. gcc says so with __SANITIZE_ADDRESS__, clang 14 only through
 * __has_feature. Internal: the code that must act otherwise under ASan
 * (no resource limits in the reader child, no kept buffers) asks here.
 */
#ifndef WD_SANITIZER_H
#define WD_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define WD_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WD_UNDER_ASAN 1
#endif
#endif
#ifndef WD_UNDER_ASAN
#define WD_UNDER_ASAN 0
#endif

#endif

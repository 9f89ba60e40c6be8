/*
 * sanitizer.h: WD_UNDER_ASAN, 1 in a build with AddressSanitizer and 0
 * otherwise. gcc says so with __SANITIZE_ADDRESS__, clang 14 only through
 * __has_feature. Internal: the code that must act otherwise under ASan
 * (no resource limits in the reader child, no kept buffers) asks here.
 * Where buffers are kept under ASan anyway (wdriftd's compute workers'
 * reads, whose budget counts them), WD_POISON and WD_UNPOISON mark one as
 * not to be touched until it is handed out again: ASan reports a use in
 * between (though not a stale pointer's read after it is handed out
 * again, which a freed buffer would catch). Nothing without ASan.
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

#if WD_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#define WD_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define WD_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define WD_POISON(p, n) ((void)(p), (void)(n))
#define WD_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif

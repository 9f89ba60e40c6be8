/*
 * arena.h: memory that is freed all at once. A loaded configuration keeps
 * its strings and arrays in one (struct wd_config's arena); the YAML
 * document the loader reads keeps its nodes in another, freed when loading
 * ends. Internal; libc only.
 */
#ifndef WD_ARENA_H
#define WD_ARENA_H

#include <stddef.h>

struct wd_arena;	/* NULL is an empty arena */

/* size bytes of zeroed memory, aligned for any type, in *a; NULL when out of memory. */
void *wd_arena_alloc(struct wd_arena **a, size_t size);

/* s[0..len) and a NUL, in *a; NULL when out of memory. */
char *wd_arena_strndup(struct wd_arena **a, const char *s, size_t len);

/* Frees all that a holds (NULL: nothing). */
void wd_arena_free(struct wd_arena *a);

#endif

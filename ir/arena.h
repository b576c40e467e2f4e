/* arena.h - one bump allocator per compilation.
 *
 * Everything the front end and the IR allocate (AST, nodes, names, strings)
 * lives in one Arena and is released by a single arena_free(). No individual
 * frees anywhere: ownership is never half arena, half malloc. */
#ifndef MOEC_ARENA_H
#define MOEC_ARENA_H

#include <stdarg.h>
#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
    ArenaChunk *head;   /* newest chunk first */
    size_t total;       /* bytes handed out, for --stats */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);        /* zeroed, 16-byte aligned */
void *arena_calloc(Arena *a, size_t n, size_t size);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
char *arena_vprintf(Arena *a, const char *fmt, va_list ap);

/* A growable pointer array backed by the arena (old storage is abandoned
 * on growth; the arena reclaims it at the end). */
typedef struct PtrVec {
    void **items;
    int len, cap;
} PtrVec;

void ptrvec_push(Arena *a, PtrVec *v, void *item);

#endif

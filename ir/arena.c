/* arena.c - chunked bump allocator; see arena.h for the ownership rule. */
#include "arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

struct ArenaChunk {
    ArenaChunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_CHUNK = 64 * 1024 };

void arena_init(Arena *a) { a->head = NULL; a->total = 0; }

void arena_free(Arena *a)
{
    ArenaChunk *c = a->head;
    while (c) {
        ArenaChunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

void *arena_alloc(Arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    ArenaChunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > ARENA_CHUNK ? size : ARENA_CHUNK;
        c = malloc(sizeof(ArenaChunk) + cap);
        if (!c)
            die("out of memory allocating %zu bytes", cap);
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    a->total += size;
    memset(p, 0, size);
    return p;
}

void *arena_calloc(Arena *a, size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size)
        die("arena_calloc overflow: %zu x %zu", n, size);
    return arena_alloc(a, n * size);
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_vprintf(Arena *a, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        die("vsnprintf failed");
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = arena_vprintf(a, fmt, ap);
    va_end(ap);
    return p;
}

void ptrvec_push(Arena *a, PtrVec *v, void *item)
{
    if (v->len == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        void **items = arena_calloc(a, (size_t)cap, sizeof(void *));
        if (v->len)
            memcpy(items, v->items, (size_t)v->len * sizeof(void *));
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = item;
}

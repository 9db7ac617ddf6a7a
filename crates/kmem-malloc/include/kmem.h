/* libkmem.so's own functions, beside the malloc family it replaces.
 *
 * Memory cgroups: account and limit what threads allocate. While a thread has a
 * group active (kmem_memcg_enter), everything it allocates through malloc and
 * friends is charged to that group and its ancestors; an allocation that would
 * take one of them over its memory.max fails (NULL, errno ENOMEM). A free
 * uncharges the group that was charged, whatever thread frees.
 */
#ifndef KMEM_H
#define KMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kmem_memcg kmem_memcg;

/* A new group under parent (NULL: the root); NULL with errno ENOMEM or EINVAL. */
const kmem_memcg *kmem_memcg_create(const kmem_memcg *parent, const char *name);
/* 0, -EBUSY (it has children) or -EINVAL. Objects still charged to the group are
 * reparented to its parent. No thread may have it active any more. */
int kmem_memcg_remove(const kmem_memcg *cg);
/* memory.max and memory.high in bytes (SIZE_MAX: no limit). */
void kmem_memcg_set_max(const kmem_memcg *cg, size_t bytes);
void kmem_memcg_set_high(const kmem_memcg *cg, size_t bytes);
/* Makes cg (NULL: none) the calling thread's active group; returns a token that
 * kmem_memcg_leave takes to restore the group active before. */
void *kmem_memcg_enter(const kmem_memcg *cg);
void kmem_memcg_leave(void *token);
/* memory.current in bytes. */
size_t kmem_memcg_usage(const kmem_memcg *cg);
/* The group's files (memory.current ... memory.stat, objects per cache) as text in
 * buf (NUL-terminated, cut to len); returns the length of the whole text. */
size_t kmem_memcg_stat(const kmem_memcg *cg, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif

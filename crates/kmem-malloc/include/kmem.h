/* libkmem.so's own functions, beside the malloc family it replaces.
 * (Link with -lkmem; the library's SONAME is libkmem.so.0. Every kmem_* function
 * libkmem.so exports is declared here: crates/kmem-malloc/tests/header.rs checks.)
 *
 * Statistics: kmem_stats_get fills struct kmem_stats, the figures of
 * kmem::stats::counters(), read together, in bytes:
 *   allocated  handed to the program: slab objects in use times their size (as
 *              /proc/slabinfo counts them: objects cached on a CPU's freelist
 *              count as in use), page blocks, live huge mappings;
 *   active     pages in use for the program: whole slabs, page blocks, huge
 *              mappings (allocated plus the free space inside slabs);
 *   resident   what kmem holds without having given it back: active, metadata,
 *              free pages not yet given back, freed huge mappings kept for reuse
 *              (an upper bound of the RSS kmem causes);
 *   mapped     address space mapped: online sections (128 MiB each), huge
 *              mappings, and in per-CPU rseq mode the CPU areas' region (64 MiB);
 *   metadata   kmem's own memory: section memmaps and CPU areas;
 *   retained   free pages given back to the OS (or never touched) but still
 *              mapped for reuse.
 * Always allocated <= active <= resident <= mapped, metadata <= resident and
 * resident + retained <= mapped. Nothing is allocated to read them; all but
 * allocated are read without a lock (allocated walks the slab caches' partial
 * lists under their locks, as /proc/slabinfo does): not for signal handlers.
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

struct kmem_stats {
    size_t allocated;
    size_t active;
    size_t resident;
    size_t mapped;
    size_t metadata;
    size_t retained;
};

/* Fills *out with the figures above; 0, or -EINVAL when out is NULL. */
int kmem_stats_get(struct kmem_stats *out);

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

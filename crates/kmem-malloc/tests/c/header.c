/* Calls every function include/kmem.h declares (tests/header.rs checks that each
 * declared name is called here), compiled with warnings as errors against the header
 * alone and linked against libkmem.so: a declaration that drifts from the library
 * fails to compile or to link. Prints "header ok" when the checks hold. */
#include "../../include/kmem.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); failures++; } } while (0)

static void check_stats(const struct kmem_stats *s) {
    CHECK(s->allocated <= s->active);
    CHECK(s->active <= s->resident);
    CHECK(s->metadata <= s->resident);
    CHECK(s->resident + s->retained <= s->mapped);
}

int main(void) {
    struct kmem_stats before, after;
    CHECK(kmem_stats_get(NULL) == -EINVAL);
    CHECK(kmem_stats_get(&before) == 0);
    check_stats(&before);
    char *big = malloc(16 << 20);
    CHECK(big != NULL);
    memset(big, 1, 16 << 20);
    CHECK(kmem_stats_get(&after) == 0);
    check_stats(&after);
    CHECK(after.allocated >= before.allocated + (16 << 20));
    CHECK(after.active >= before.active + (16 << 20));
    CHECK(after.resident >= before.resident + (16 << 20));
    CHECK(after.mapped >= before.mapped + (16 << 20));
    CHECK(after.metadata > 0);
    free(big);

    const kmem_memcg *cg = kmem_memcg_create(NULL, "header");
    CHECK(cg != NULL);
    kmem_memcg_set_max(cg, SIZE_MAX);
    kmem_memcg_set_high(cg, SIZE_MAX);
    void *tok = kmem_memcg_enter(cg);
    void *p = malloc(4096);
    CHECK(kmem_memcg_usage(cg) >= 4096);
    free(p);
    kmem_memcg_leave(tok);
    char buf[64];
    CHECK(kmem_memcg_stat(cg, buf, sizeof buf) > 0);
    CHECK(kmem_memcg_remove(cg) == 0);

    if (failures) return 1;
    puts("header ok");
    return 0;
}

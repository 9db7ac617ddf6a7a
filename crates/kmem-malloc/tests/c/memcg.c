/* Memory cgroups through libkmem.so: two tenants, one at its limit. Exits 0 and
 * prints "memcg ok" when all checks hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../include/kmem.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); failures++; } } while (0)

static const kmem_memcg *small, *big;

static void *small_tenant(void *arg) {
    (void)arg;
    void *tok = kmem_memcg_enter(small);
    static void *held[100000];
    size_t n = 0;
    int failed = 0;
    while (n < 100000) {
        void *p = malloc(16384);
        if (!p) {
            CHECK(errno == ENOMEM);
            failed = 1;
            break;
        }
        memset(p, 0x5a, 16384);
        held[n++] = p;
    }
    CHECK(failed);
    CHECK(kmem_memcg_usage(small) <= (1 << 20));
    CHECK(n * 16384 >= (1 << 20) - 64 * 1024);
    for (size_t i = 0; i < n; i++) {
        CHECK(((unsigned char *)held[i])[16383] == 0x5a);
        free(held[i]);
    }
    /* Room again after the frees. */
    void *again = malloc(16384);
    CHECK(again != NULL);
    free(again);
    kmem_memcg_leave(tok);
    return NULL;
}

static void *big_tenant(void *arg) {
    (void)arg;
    void *tok = kmem_memcg_enter(big);
    char **strs = malloc(20000 * sizeof(char *));
    CHECK(strs != NULL);
    for (int i = 0; i < 20000; i++) {
        strs[i] = malloc(200);
        CHECK(strs[i] != NULL);
        snprintf(strs[i], 200, "string %d", i);
    }
    CHECK(kmem_memcg_usage(big) >= 20000 * 200);
    for (int i = 0; i < 20000; i++) {
        char want[32];
        snprintf(want, sizeof want, "string %d", i);
        CHECK(strcmp(strs[i], want) == 0);
        free(strs[i]);
    }
    free(strs);
    kmem_memcg_leave(tok);
    return NULL;
}

int main(void) {
    const kmem_memcg *tenants = kmem_memcg_create(NULL, "tenants");
    CHECK(tenants != NULL);
    small = kmem_memcg_create(tenants, "small");
    big = kmem_memcg_create(tenants, "big");
    CHECK(small && big);
    kmem_memcg_set_max(small, 1 << 20);
    kmem_memcg_set_max(big, 64 << 20);

    pthread_t a, b;
    pthread_create(&a, NULL, small_tenant, NULL);
    pthread_create(&b, NULL, big_tenant, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);

    char buf[4096];
    size_t len = kmem_memcg_stat(small, buf, sizeof buf);
    CHECK(len > 0 && len < sizeof buf);
    CHECK(strncmp(buf, "memcg small\nmemory.current ", 27) == 0);
    CHECK(strstr(buf, "memory.max 1048576\n") != NULL);
    unsigned long high, max, oom;
    char *ev = strstr(buf, "memory.events ");
    CHECK(ev && sscanf(ev, "memory.events high %lu max %lu oom %lu", &high, &max, &oom) == 3);
    CHECK(oom >= 1 && max >= 1);
    len = kmem_memcg_stat(big, buf, sizeof buf);
    ev = strstr(buf, "memory.events ");
    CHECK(ev && sscanf(ev, "memory.events high %lu max %lu oom %lu", &high, &max, &oom) == 3);
    CHECK(oom == 0 && max == 0);
    CHECK(strstr(buf, "slab_unreclaimable 0\n") != NULL);
    /* A short buffer is cut and terminated; the full length is returned. */
    char tiny[8];
    CHECK(kmem_memcg_stat(big, tiny, sizeof tiny) == strlen(buf));
    CHECK(strlen(tiny) == 7);

    /* A parent with children cannot go; children then parent can. */
    CHECK(kmem_memcg_remove(tenants) == -EBUSY);
    /* A live object outlives its group: reparented to the parent. */
    void *tok = kmem_memcg_enter(small);
    void *kept = malloc(100000);
    kmem_memcg_leave(tok);
    CHECK(kept != NULL);
    CHECK(kmem_memcg_remove(small) == 0);
    CHECK(kmem_memcg_usage(tenants) >= 100000);
    if (failures)
        fprintf(stderr, "usage tenants %zu big %zu\n", kmem_memcg_usage(tenants), kmem_memcg_usage(big));
    free(kept);
    CHECK(kmem_memcg_remove(big) == 0);
    CHECK(kmem_memcg_remove(tenants) == 0);
    CHECK(kmem_memcg_create(NULL, "\xff") == NULL && errno == EINVAL);

    if (failures) return 1;
    printf("memcg ok\n");
    return 0;
}

/* Every function of libkmem.so's C ABI and its edge cases. Exits 0 when all hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); failures++; } } while (0)

int main(void) {
    /* malloc(0) gives a unique, freeable pointer; free(NULL) does nothing. */
    void *z = malloc(0);
    CHECK(z != NULL);
    free(z);
    free(NULL);

    /* Alignment: 16 bytes above 8, as glibc's malloc (Rust's System allocator and
       clang's code for operator new count on it), 8 up to 8; usable size is
       writable. */
    for (size_t n = 1; n <= 70000; n = n * 3 + 1) {
        unsigned char *p = malloc(n);
        CHECK(p != NULL);
        CHECK(((uintptr_t)p & (n > 8 ? 15 : 7)) == 0);
        size_t u = malloc_usable_size(p);
        CHECK(u >= n);
        memset(p, 0xab, u);
        free(p);
    }
    /* Every size up to 1100 through malloc, calloc and realloc (grown from and shrunk
       to each size), several objects of each kept at once so that every slot
       position of a class comes out. */
    for (size_t n = 1; n <= 1100; n++) {
        size_t mask = n > 8 ? 15 : 7;
        void *keep[12];
        for (int k = 0; k < 4; k++) {
            keep[k] = malloc(n);
            keep[4 + k] = calloc(1, n);
            void *r = malloc(k * 20 + 1);
            CHECK(r != NULL);
            keep[8 + k] = realloc(r, n);
        }
        for (int k = 0; k < 12; k++) {
            CHECK(keep[k] != NULL);
            CHECK(((uintptr_t)keep[k] & mask) == 0);
        }
        for (int k = 0; k < 12; k++) {
            void *r = realloc(keep[k], k + 9);
            CHECK(r != NULL && ((uintptr_t)r & 15) == 0);
            free(r);
        }
    }
    CHECK(malloc_usable_size(NULL) == 0);

    /* Sizes near SIZE_MAX fail with ENOMEM. */
    errno = 0;
    volatile size_t huge = SIZE_MAX;
    CHECK(malloc(huge) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(malloc(SIZE_MAX - 4096) == NULL && errno == ENOMEM);

    /* calloc zeroes, and overflow fails with ENOMEM. */
    int *c = calloc(1000, sizeof(int));
    CHECK(c != NULL);
    for (int i = 0; i < 1000; i++) CHECK(c[i] == 0);
    free(c);
    errno = 0;
    CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    /* calloc takes malloc's sheaves and clears what it pops: objects dirtied and
       freed (more than two sheaves' worth) come back zeroed. */
    static const size_t csizes[] = {8, 24, 32, 100, 1000, 5000};
    static void *dirty[600];
    for (int k = 0; k < 6; k++) {
        size_t cs = csizes[k];
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < 600; i++) {
                dirty[i] = malloc(cs);
                CHECK(dirty[i] != NULL);
                memset(dirty[i], 0xa5, cs);
            }
            for (int i = 0; i < 600; i++) free(dirty[i]);
            for (int i = 0; i < 600; i++) {
                unsigned char *z = calloc(1, cs);
                CHECK(z != NULL);
                for (size_t j = 0; j < cs; j++) CHECK(z[j] == 0);
                dirty[i] = z;
            }
            for (int i = 0; i < 600; i++) free(dirty[i]);
        }
    }

    /* realloc: NULL allocates, 0 frees and returns NULL, contents survive growth. */
    char *r = realloc(NULL, 10);
    CHECK(r != NULL);
    memcpy(r, "0123456789", 10);
    r = realloc(r, 100000);
    CHECK(r != NULL && memcmp(r, "0123456789", 10) == 0);
    r = realloc(r, 5 << 20);
    CHECK(r != NULL && memcmp(r, "0123456789", 10) == 0);
    r = realloc(r, 3);
    CHECK(r != NULL && memcmp(r, "012", 3) == 0);
    CHECK(realloc(r, 0) == NULL);
    /* A buffer doubled past 1 MiB becomes a mapping that grows in place: twice, the
       second round over the first one's cached mapping; a byte per 64 KiB checked. */
    for (int round = 0; round < 2; round++) {
        size_t size = 1 << 20;
        unsigned char *g = malloc(size);
        CHECK(g != NULL);
        for (size_t i = 0; i < size; i += 65536) g[i] = (unsigned char)(i >> 16);
        unsigned char *at_2m = NULL;
        while (size < (32u << 20)) {
            g = realloc(g, 2 * size);
            CHECK(g != NULL && malloc_usable_size(g) >= 2 * size);
            if (size == (1u << 20)) at_2m = g;
            else if (round == 1) CHECK(g == at_2m); /* into the cached mapping's rest */
            for (size_t i = 0; i < size; i += 65536) CHECK(g[i] == (unsigned char)(i >> 16));
            size *= 2;
            for (size_t i = size / 2; i < size; i += 65536) g[i] = (unsigned char)(i >> 16);
        }
        g = realloc(g, 1000);
        CHECK(g != NULL && g[0] == 0 && malloc_usable_size(g) < 4096);
        free(g);
    }
    errno = 0;
    void *q = malloc(8);
    CHECK(realloc(q, SIZE_MAX) == NULL && errno == ENOMEM);
    free(q);

    /* reallocarray overflow. */
    errno = 0;
    CHECK(reallocarray(NULL, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
    int *ra = reallocarray(NULL, 10, sizeof(int));
    CHECK(ra != NULL);
    free(ra);

    /* Alignments 8 … 1 MiB through every aligned allocator. */
    for (size_t a = 8; a <= (1 << 20); a <<= 1) {
        void *p = NULL;
        CHECK(posix_memalign(&p, a, 100) == 0 && ((uintptr_t)p % a) == 0);
        memset(p, 1, 100);
        free(p);
        p = aligned_alloc(a, 3 * a);
        CHECK(p != NULL && ((uintptr_t)p % a) == 0);
        free(p);
        p = memalign(a, 10);
        CHECK(p != NULL && ((uintptr_t)p % a) == 0);
        free(p);
    }
    /* posix_memalign errors. */
    void *pm = (void *)1;
    CHECK(posix_memalign(&pm, 3, 10) == EINVAL && pm == (void *)1);
    CHECK(posix_memalign(&pm, 4, 10) == EINVAL);
    CHECK(posix_memalign(&pm, 64, SIZE_MAX / 2) == ENOMEM);
    errno = 0;
    CHECK(aligned_alloc(24, 48) == NULL && errno == EINVAL);
    /* memalign rounds a bad alignment up, as glibc does. */
    void *m = memalign(24, 10);
    CHECK(m != NULL && ((uintptr_t)m % 32) == 0);
    free(m);

    void *v = valloc(10);
    CHECK(v != NULL && ((uintptr_t)v & 4095) == 0);
    free(v);
    void *pv = pvalloc(5000);
    CHECK(pv != NULL && ((uintptr_t)pv & 4095) == 0 && malloc_usable_size(pv) >= 8192);
    free(pv);

    /* Harmless extras. */
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.arena > 0 && mi.uordblks > 0);
    CHECK(mallopt(M_ARENA_MAX, 1) == 1);
    malloc_trim(0);
    malloc_stats();

    if (failures == 0) printf("api ok\n");
    return failures != 0;
}

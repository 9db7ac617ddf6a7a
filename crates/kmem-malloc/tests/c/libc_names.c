/* glibc's internal malloc names under LD_PRELOAD=libkmem.so: they must be kmem's
 * (kmem's free aborts on memory it did not hand out; kmem_stats_get, found with
 * dlsym, counts what they allocate). Prints "libc names ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

struct kmem_stats { size_t allocated, active, resident, mapped, metadata, retained; };

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); failures++; } } while (0)

int main(void) {
    int (*get)(struct kmem_stats *) = (int (*)(struct kmem_stats *))dlsym(RTLD_DEFAULT, "kmem_stats_get");
    CHECK(get != NULL);
    if (!get) return 1;
    struct kmem_stats a, b;
    CHECK(get(&a) == 0);
    char *m = __libc_malloc(8 << 20);
    CHECK(m != NULL);
    memset(m, 7, 8 << 20);
    CHECK(get(&b) == 0);
    CHECK(b.allocated >= a.allocated + (8 << 20));
    free(m); /* kmem's free: aborts if m were glibc's */

    char *s = __libc_malloc(100);
    char *t = malloc(100);
    CHECK(s && t && malloc_usable_size(s) == malloc_usable_size(t));
    __libc_free(t);
    s = __libc_realloc(s, 5000);
    CHECK(s && malloc_usable_size(s) >= 5000);
    free(s);
    int *z = __libc_calloc(1000, sizeof(int));
    CHECK(z != NULL);
    for (int i = 0; z && i < 1000; i++) CHECK(z[i] == 0);
    free(z);
    void *al = __libc_memalign(256, 300);
    CHECK(al && ((uintptr_t)al & 255) == 0 && malloc_usable_size(al) >= 300);
    free(al);
    void *v = __libc_valloc(10);
    CHECK(v && ((uintptr_t)v & 4095) == 0);
    free(v);
    void *pv = __libc_pvalloc(10);
    CHECK(pv && ((uintptr_t)pv & 4095) == 0 && malloc_usable_size(pv) >= 4096);
    __libc_free(pv);

    /* C23's sized frees (glibc 2.43 has them too; looked up, as older headers and
     * libcs lack them): kmem's, so they free what kmem handed out. */
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*fas)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    CHECK(fs != NULL && fas != NULL);
    if (fs && fas) {
        CHECK(get(&a) == 0);
        char *big = malloc(8 << 20);
        void *al2 = aligned_alloc(4096, 6 << 20);
        CHECK(big && al2);
        memset(big, 1, 8 << 20);
        memset(al2, 2, 6 << 20);
        CHECK(get(&b) == 0);
        CHECK(b.allocated >= a.allocated + (14 << 20));
        fs(big, 8 << 20);
        fas(al2, 4096, 6 << 20);
        fs(NULL, 0);
        fas(NULL, 64, 0);
        for (int i = 0; i < 1000; i++) fs(malloc(i), i);
        CHECK(get(&b) == 0);
        CHECK(b.allocated < a.allocated + (1 << 20));
    }

    if (failures) return 1;
    puts("libc names ok");
    return 0;
}

/* Heap misuse battery: `battery CASE SIZE` commits one error on an allocation of SIZE
 * bytes, then exits 0 if nothing stopped it. Cases: over1 over32 under1 under32 far
 * uaf double double_delayed double_interleaved invalid unaligned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void poke(volatile char *p, long from, long n) {
    for (long i = 0; i < n; i++)
        p[from + i] = 0x41;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    const char *c = argv[1];
    long n = atol(argv[2]);
    volatile char *p = malloc(n);
    volatile char *q = malloc(n);
    memset((char *)p, 0, n);
    if (!strcmp(c, "over1"))
        poke(p, n, 1);
    else if (!strcmp(c, "over32"))
        poke(p, n, 32);
    else if (!strcmp(c, "under1"))
        poke(p, -1, 1);
    else if (!strcmp(c, "under32"))
        poke(p, -32, 32);
    else if (!strcmp(c, "far"))
        poke(p, n + (1 << 20), 1);
    else if (!strcmp(c, "uaf")) {
        free((void *)p);
        poke(p, 0, 8);
        p = NULL;
    } else if (!strcmp(c, "double")) {
        free((void *)p);
    } else if (!strcmp(c, "double_delayed")) {
        free((void *)p);
        for (int i = 0; i < 100; i++)
            free(malloc(n * 2 + 8));
    } else if (!strcmp(c, "double_interleaved")) {
        free((void *)p);
        free((void *)q);
        q = NULL;
    } else if (!strcmp(c, "invalid")) {
        char local[64];
        free(local + 16);
    } else if (!strcmp(c, "unaligned")) {
        free((char *)p + 1);
    }
    free((void *)p);   /* the second free of the double-free cases */
    free((void *)q);
    return 0;
}

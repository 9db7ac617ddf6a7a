/* Threads that each churn a table of their own: free a random slot's block, malloc
 * a new one of a random size (small sizes common: an inverse-square distribution
 * from 4 bytes to 32 KiB, as glibc's malloc benchmark draws them) and write it.
 * No block changes threads; what can slow an allocator down here is what its
 * threads share (locks, lists, cache lines of one another's blocks).
 * Usage: churn THREADS ITERATIONS (per thread). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 1024
#define SIZES 8000

static unsigned sizes[SIZES];
static long iterations;

static void *worker(void *arg) {
    unsigned seed = (unsigned)(intptr_t)arg * 7919u + 1u;
    void **slot = calloc(SLOTS, sizeof(void *));
    if (!slot) abort();
    unsigned k = (unsigned)(intptr_t)arg * 1000u;
    for (long i = 0; i < iterations; i++) {
        unsigned s = (unsigned)(rand_r(&seed) % SLOTS);
        size_t n = sizes[k++ % SIZES];
        free(slot[s]);
        unsigned char *p = malloc(n);
        if (!p) abort();
        memset(p, (int)i, n);
        slot[s] = p;
    }
    for (unsigned s = 0; s < SLOTS; s++) free(slot[s]);
    free(slot);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    iterations = argc > 2 ? atol(argv[2]) : 10000000;
    if (threads < 1 || threads > 256 || iterations < 1) return 2;
    /* Inverse-square sizes: n = 1 / (1/4 - r (1/4 - 1/32768)), r uniform in [0, 1). */
    unsigned seed = 12345;
    for (int i = 0; i < SIZES; i++) {
        double r = (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
        sizes[i] = (unsigned)(1.0 / (0.25 - r * (0.25 - 1.0 / 32768.0)));
    }
    pthread_t t[256];
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i)) return 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}

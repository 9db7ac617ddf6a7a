/* KFENCE's first sample in a C program that has not loaded libgcc_s: the sample's
 * stack trace loads glibc's unwinder (dlopen, which allocates) from inside malloc.
 * Run with KMEM_KFENCE=MS: 16 KiB blocks (never sampled) for three intervals, so the
 * sample is armed and waits; then small objects of many sizes take it, and the
 * dynamic linker's own allocations for libgcc_s come in the middle of that sample.
 * Optionally dlopen()s argv[1] afterwards, so its loading allocates under samples. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int main(int argc, char **argv) {
    long interval = atol(getenv("KMEM_KFENCE") ? getenv("KMEM_KFENCE") : "100");
    static void *p[4096];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ms_since(&t0) < 3 * interval) {
        for (int i = 0; i < 256; i++)
            p[i] = malloc(16384);
        for (int i = 0; i < 256; i++)
            free(p[i]);
    }
    for (int i = 0; i < 4096; i++) {
        p[i] = malloc(i % 1000 + 1);
        memset(p[i], 1, i % 1000 + 1);
    }
    for (int i = 0; i < 4096; i++)
        free(p[i]);
    struct sigaction sa;
    sigaction(SIGSEGV, NULL, &sa);
    if (argc > 1 && !dlopen(argv[1], RTLD_NOW)) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    /* kmem's fault handler is installed at the first sample: one was taken. */
    printf("ok sampled %d\n", sa.sa_handler != SIG_DFL);
    return 0;
}

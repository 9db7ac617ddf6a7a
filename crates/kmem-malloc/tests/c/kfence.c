/* KFENCE cases (run with KMEM_KFENCE=all): each argument commits one error on sampled
 * objects. Two objects are used where the placement matters: one of them sits at the
 * start of its page and one at the end, so one access faults on a guard page. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf env;
static void on_segv(int sig) { (void)sig; siglongjmp(env, 1); }

/* The program's own SIGSEGV handler must keep working: a fault on a page of its own
 * is recovered from, before and after kmem's handler is installed. */
static int own_fault(void) {
    char *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sigsetjmp(env, 1) == 0) {
        ((volatile char *)page)[0] = 1;
        return 0;
    }
    munmap(page, 4096);
    return 1;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "handler")) {
        signal(SIGSEGV, on_segv);
        int a = own_fault();
        /* Allocate for 300 ms: samples are taken, and kmem installs its handler
         * (chaining to ours) at the first one. */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            void *p[64];
            for (int i = 0; i < 64; i++)
                p[i] = malloc(i * 7 % 300 + 1);
            for (int i = 0; i < 64; i++)
                free(p[i]);
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
        struct sigaction cur;
        sigaction(SIGSEGV, NULL, &cur);
        int b = own_fault();
        printf("recovered %d %d chained %d\n", a, b, cur.sa_handler != on_segv);
        return 0;
    }
    if (!strcmp(c, "sent")) {
        /* No handler of its own: once kmem's is installed (samples taken), a SIGSEGV
         * sent by a process still ends the program, as without kmem. */
        void *volatile p[64];
        for (int k = 0; k < 20000; k++) {
            for (int i = 0; i < 64; i++)
                p[i] = malloc(i * 13 + 1);
            for (int i = 0; i < 64; i++)
                free(p[i]);
        }
        /* The loop above may end inside the first sampling interval, after which it
         * takes no slow path: past the interval, bursts that do. A housekeeping tick
         * of their slow paths arms a sample, and the next slow path takes it. */
        struct timespec pause = {0, 5 * 1000 * 1000};
        nanosleep(&pause, NULL);
        static void *burst[4096];
        for (int r = 0; r < 4; r++) {
            for (int i = 0; i < 4096; i++)
                burst[i] = malloc(48);
            for (int i = 0; i < 4096; i++)
                free(burst[i]);
        }
        struct sigaction cur;
        sigaction(SIGSEGV, NULL, &cur);
        printf("kmem handler %d\n", cur.sa_handler != SIG_DFL);
        fflush(stdout);
        kill(getpid(), SIGSEGV);
        printf("still alive\n");
        return 0;
    }
    volatile char *a = malloc(32), *b = malloc(32);
    /* Which one starts its page, which one ends it. */
    volatile char *left = ((unsigned long)a & 4095) == 0 ? a : b;
    volatile char *right = left == a ? b : a;
    if (!strcmp(c, "over")) right[32] = 1;         /* faults on the guard page after */
    if (!strcmp(c, "under")) left[-1] = 1;         /* faults on the guard page before */
    if (!strcmp(c, "uaf")) { free((void *)a); a[0] = 1; }
    if (!strcmp(c, "double")) { free((void *)a); free((void *)a); }
    if (!strcmp(c, "canary")) { left[32] = 1; free((void *)left); }  /* seen at free */
    if (!strcmp(c, "exit")) left[32] = 1;  /* never freed: seen by the check at exit */
    printf("survived\n");
    fflush(stdout);
    return 0;
}

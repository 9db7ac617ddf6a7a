/* A long-running program for `kmem top`: objects held from two call sites, then
 * allocation churn (so the heap keeps publishing its live view) until killed. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *held[70];

__attribute__((noinline)) void *site_a(void) { return malloc(40); }
__attribute__((noinline)) void *site_b(void) { return malloc(300); }

int main(void) {
    for (int i = 0; i < 50; i++)
        held[i] = site_a();
    for (int i = 50; i < 70; i++)
        held[i] = site_b();
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (int n = 0; n < 60000; n++) {   /* about a minute at most */
        void *p[16];
        for (int i = 0; i < 16; i++)
            p[i] = malloc(8);
        for (int i = 0; i < 16; i++)
            free(p[i]);
        usleep(1000);
    }
    return 0;
}

/* slub_debug through libkmem.so (run with KMEM_DEBUG=FZPU): each error on purpose;
 * the program must go on and print "done" (the debug layer reports and
 * quarantines). argv[1] picks the error. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    char *p = malloc(64);
    /* volatile: the compiler must not drop writes to memory about to be freed. */
    volatile char *v = p;
    memset(p, 1, 64);
    if (!strcmp(what, "past-end")) { v[64] = 'X'; free(p); }
    if (!strcmp(what, "before-start")) { v[-1] = 'X'; free(p); }
    if (!strcmp(what, "after-free")) { free(p); v[10] = 'U'; for (int i = 0; i < 100; i++) free(malloc(64)); }
    if (!strcmp(what, "after-free-unseen")) {
        /* A size nothing else in the program allocates: no later allocation checks it. */
        volatile char *w = malloc(3000);
        free((char *)w);
        w[10] = 'U';
    }
    if (!strcmp(what, "past-request")) {
        /* 20 bytes in a 32-byte object (malloc's 16-byte alignment): the red zone
         * starts at the 20 asked for, which is also the usable size. */
        char *r = malloc(20);
        volatile char *vr = r;
        if (malloc_usable_size(r) != 20) { printf("usable %zu\n", malloc_usable_size(r)); return 1; }
        memset(r, 2, 20);
        vr[20] = 'X';
        free(r);
    }
    if (!strcmp(what, "double-head")) { free(p); free(p); }
    if (!strcmp(what, "interior")) { free(p + 16); free(p); }
    if (!strcmp(what, "foreign")) { char local[64]; volatile char *l = local; l[0] = 0; free((char *)l); }
    if (!strcmp(what, "double-nonhead")) { char *q = malloc(64); free(p); free(q); free(p); }
    if (!strcmp(what, "freepointer")) {
        char *q = malloc(64);
        free(p);
        for (int i = 0; i < 128; i++) v[i] = 0x41; /* the object, red zone, free pointer */
        for (int i = 0; i < 100; i++) free(malloc(64));
        free(q);
    }
    if (!strcmp(what, "realloc-zero")) {
        /* malloc(0)'s block, whose usable size under Z or U is the 0 asked for, grown. */
        char *z = realloc(malloc(0), 10);
        strcpy(z, "grown");
        z = realloc(z, 100);
        if (strcmp(z, "grown")) { printf("lost\n"); return 1; }
        free(realloc(calloc(0, 4), 20));
        free(z);
    }
    /* Nothing handed out twice afterwards. */
    void *seen[200];
    for (int i = 0; i < 200; i++) {
        seen[i] = malloc(64);
        for (int j = 0; j < i; j++)
            if (seen[j] == seen[i]) { printf("twice\n"); return 1; }
    }
    for (int i = 0; i < 200; i++) free(seen[i]);
    printf("done\n");
    return 0;
}

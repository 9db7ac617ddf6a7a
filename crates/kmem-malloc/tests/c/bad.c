/* Misuse that libkmem.so must report and abort on; argv[1] picks which. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char local[64];
    const char *what = argc > 1 ? argv[1] : "";
    /* Some objects of the class freed first: the CPU's (or thread's) spare sheaf is
     * installed and has room, so the frees below meet the fast paths, not a first
     * free's slow path. */
    static void *warm[100];
    for (int i = 0; i < 100; i++) warm[i] = malloc(64);
    for (int i = 0; i < 50; i++) free(warm[i]);
    char *p = malloc(64);
    memset(local, 0, sizeof local);
    if (!strcmp(what, "stack")) free(local);
    if (!strcmp(what, "interior")) free(p + 8);
    if (!strcmp(what, "double")) { free(p); free(p); }
    if (!strcmp(what, "garbage")) free((void *)0x1234560);
    if (!strcmp(what, "realloc")) p = realloc(local, 100);
    /* A realloc of a block just freed (a use after free): its move frees it again. */
    if (!strcmp(what, "realloc-freed")) { free(p); p = realloc(p, 200); }
    /* The same, moved past the slab classes (into a mapping). */
    if (!strcmp(what, "realloc-freed-big")) { free(p); p = realloc(p, 3 << 20); }
    return 0;
}

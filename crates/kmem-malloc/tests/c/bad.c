/* Misuse that libkmem.so must report and abort on; argv[1] picks which. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char local[64];
    const char *what = argc > 1 ? argv[1] : "";
    char *p = malloc(64);
    memset(local, 0, sizeof local);
    if (!strcmp(what, "stack")) free(local);
    if (!strcmp(what, "interior")) free(p + 8);
    if (!strcmp(what, "double")) { free(p); free(p); }
    if (!strcmp(what, "garbage")) free((void *)0x1234560);
    if (!strcmp(what, "realloc")) p = realloc(local, 100);
    return 0;
}

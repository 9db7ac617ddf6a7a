/* Prints the program's own mappings (which libraries a preload brought in), after
 * one allocation so the allocator is in use. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    void *p = malloc(100);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        fputs(line, stdout);
    free(p);
    return f ? 0 : 1;
}

/* Prints, for each hot entry point the process resolves (malloc, free, C++'s
 * operator new), its name and its address modulo 64, and whether it is libkmem's
 * (the shared object that defines it). Run under LD_PRELOAD=libkmem.so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    const char *names[] = {"malloc", "free", "_Znwm"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        Dl_info info;
        const char *obj = "?";
        if (f && dladdr(f, &info) && info.dli_fname)
            obj = strstr(info.dli_fname, "libkmem") ? "kmem" : "other";
        printf("%s %lu %s\n", names[i], f ? (unsigned long)((uintptr_t)f % 64) : 99UL, obj);
    }
    return 0;
}

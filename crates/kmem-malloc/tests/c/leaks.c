/* Leaks from three call sites (one a chain of objects that point to each other), and memory kept on purpose (referenced from a global and
 * from a list a global points to), for the KMEM_LEAKS exit report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node { struct node *next; char pad[56]; };
static struct node *kept_list;   /* still referenced: not a leak */
static char *kept_buffer;

__attribute__((noinline)) void leak_small(int i) {
    char *p = malloc(24);          /* leaked: the pointer is dropped */
    memset(p, i, 24);
    __asm__ volatile("" : : "r"(p) : "memory");
}

__attribute__((noinline)) void leak_large(void) {
    void *p = malloc(3000);        /* leaked */
    memset(p, 1, 3000);
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* A list of 5 nodes whose head is dropped: each node is reached only from a leaked
 * one, so all five are leaks (kmemleak's "unreferenced"), not the head alone. */
__attribute__((noinline)) void leak_chain(void) {
    struct node *head = NULL;
    for (int i = 0; i < 5; i++) {
        struct node *n = malloc(sizeof *n);
        memset(n->pad, i, sizeof n->pad);
        n->next = head;
        head = n;
    }
    __asm__ volatile("" : : "r"(head) : "memory");
}

__attribute__((noinline)) void keep(void) {
    kept_buffer = malloc(500);
    for (int i = 0; i < 10; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = kept_list;
        kept_list = n;
    }
}

/* Overwrites the stack below main's frame, where the dropped pointers may linger. */
__attribute__((noinline)) void scrub(void) {
    volatile char junk[16384];
    memset((char *)junk, 0, sizeof junk);
}

int main(void) {
    keep();
    for (int i = 0; i < 7; i++)
        leak_small(i);
    for (int i = 0; i < 3; i++)
        leak_large();
    leak_chain();
    void *freed = malloc(100);
    free(freed);                   /* not a leak */
    scrub();
    puts("done");
    return 0;
}

/* Threads allocate; other threads free (a ring of hand-offs). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 20000
#define SLOTS 256

static void *box[THREADS][SLOTS];
static pthread_mutex_t lock[THREADS];

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg, next = (me + 1) % THREADS;
    unsigned seed = me * 7919 + 1;
    for (int i = 0; i < ROUNDS; i++) {
        size_t n = 1 + (rand_r(&seed) % 2000);
        unsigned char *p = malloc(n);
        if (!p) abort();
        memset(p, (unsigned char)n, n);
        p[0] = (unsigned char)(n & 0xff);
        int slot = rand_r(&seed) % SLOTS;
        pthread_mutex_lock(&lock[next]);
        void *old = box[next][slot];
        box[next][slot] = p;
        pthread_mutex_unlock(&lock[next]);
        free(old); /* allocated by another thread, most of the time */
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_mutex_init(&lock[i], NULL);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        for (int s = 0; s < SLOTS; s++) free(box[i][s]);
    printf("threads ok\n");
    return 0;
}

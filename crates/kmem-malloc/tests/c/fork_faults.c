/* Page faults of a fork: the parent allocates from many size classes (so many caches
 * have slabs and barns), then forks children that exit at once, as a shell's children
 * that go on to exec do. Prints the average minor faults per fork of the parent and of
 * the children (getrusage). With a second argument "threaded", a second thread (which
 * only waits) exists during the forks, so the process is not single-threaded. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *wait_for_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 50;
    int threaded = argc > 2 && strcmp(argv[2], "threaded") == 0;
    pthread_t waiter;
    pthread_mutex_lock(&lock);
    if (threaded && pthread_create(&waiter, NULL, wait_for_main, NULL) != 0) return 5;
    void *keep[96];
    for (int i = 0; i < 96; i++) {
        size_t n = (size_t)8 << (i % 13);
        keep[i] = malloc(n);
        if (!keep[i]) return 2;
        memset(keep[i], i, n);
    }
    struct rusage self0, self1, kids;
    getrusage(RUSAGE_SELF, &self0);
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid < 0) return 3;
        if (pid == 0) _exit(0);
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 4;
    }
    getrusage(RUSAGE_SELF, &self1);
    getrusage(RUSAGE_CHILDREN, &kids);
    printf("parent %ld child %ld\n", (self1.ru_minflt - self0.ru_minflt) / forks,
           kids.ru_minflt / forks);
    pthread_mutex_unlock(&lock);
    if (threaded) pthread_join(waiter, NULL);
    for (int i = 0; i < 96; i++) free(keep[i]);
    return 0;
}

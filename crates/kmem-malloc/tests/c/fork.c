/* A multithreaded parent forks again and again; each child allocates at once. The
 * churning threads fork too now and then, so forks of several threads overlap (the
 * fork handlers must serialise them). A watchdog (alarm) kills the whole test if a
 * child, or the parent, ever hangs on a lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;
static volatile int failed;

/* A child that allocates and frees at once, waited for. */
static void fork_one(void) {
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        void *p = malloc(5000);
        if (!p) _exit(3);
        memset(p, 2, 5000);
        free(p);
        _exit(0);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        failed = 1;
}

static void *churn(void *arg) {
    (void)arg;
    void *keep[64] = {0};
    unsigned i = 0;
    while (!stop) {
        free(keep[i % 64]);
        keep[i % 64] = malloc(16 + (i * 37) % 20000);
        if (i % 16384 == 16383) fork_one();
        i++;
    }
    for (int k = 0; k < 64; k++) free(keep[k]);
    return NULL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    alarm(120);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, NULL);
    for (int r = 0; r < rounds; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10);
            char *p = malloc(100000);
            char *q = calloc(100, 100);
            if (!p || !q) _exit(3);
            memset(p, 1, 100000);
            free(p);
            free(q);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed: status %d\n", r, status);
            return 1;
        }
    }
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    if (failed) {
        fprintf(stderr, "a churning thread's child failed\n");
        return 1;
    }
    printf("fork ok\n");
    return 0;
}

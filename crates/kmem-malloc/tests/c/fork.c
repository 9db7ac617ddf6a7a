/* A multithreaded parent forks again and again; each child allocates at once. A
 * watchdog (alarm) kills the whole test if a child ever hangs on an inherited lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *churn(void *arg) {
    (void)arg;
    void *keep[64] = {0};
    unsigned i = 0;
    while (!stop) {
        free(keep[i % 64]);
        keep[i % 64] = malloc(16 + (i * 37) % 20000);
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
    printf("fork ok\n");
    return 0;
}

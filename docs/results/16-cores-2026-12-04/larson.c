/* A server pattern after Larson and Krishnan (mimalloc-bench's larson): each worker
 * thread replaces random blocks (8-1000 B) of its window of live blocks, then hands the
 * window to a fresh thread and exits; the successor frees and replaces them. Prints
 * replacements per second over a fixed time. usage: larson THREADS SECONDS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#define BLOCKS 1000
#define ROUNDS 10000
static atomic_int stop; static atomic_long total;
struct win { char *b[BLOCKS]; unsigned long rng; };
static unsigned long nextr(unsigned long *s){ unsigned long x=*s; x^=x<<13; x^=x>>7; x^=x<<17; return *s=x; }
static void *worker(void *arg){
  struct win *w=arg;
  while(!atomic_load(&stop)){
    for(int i=0;i<ROUNDS;i++){ unsigned long r=nextr(&w->rng); int k=r%BLOCKS; size_t sz=8+(r>>20)%993;
      free(w->b[k]); w->b[k]=malloc(sz); w->b[k][0]=(char)r; }
    atomic_fetch_add(&total, ROUNDS);
    pthread_t t; if(pthread_create(&t,0,worker,w)) abort(); pthread_detach(t); return 0; }
  for(int k=0;k<BLOCKS;k++) free(w->b[k]);
  free(w); return 0; }
int main(int argc,char**argv){ int n=atoi(argv[1]); double secs=atof(argv[2]);
  for(int t=0;t<n;t++){ struct win *w=malloc(sizeof *w); w->rng=0x9E3779B97F4A7C15ul*(t+1)|1;
    for(int k=0;k<BLOCKS;k++){ w->b[k]=malloc(8+nextr(&w->rng)%993); }
    pthread_t th; pthread_create(&th,0,worker,w); pthread_detach(th); }
  struct timespec ts={(time_t)secs,(long)((secs-(time_t)secs)*1e9)}; nanosleep(&ts,0);
  long ops=atomic_load(&total); atomic_store(&stop,1);
  struct timespec d={0,200000000}; nanosleep(&d,0);
  printf("%d threads: %.0f replacements/s\n", n, ops/secs); return 0; }

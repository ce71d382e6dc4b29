/* parallel.c — the fork-join the CPU kernels share. Threads are started per
 * run rather than pooled: a run that is worth splitting lasts milliseconds
 * at least, against tens of microseconds to start the threads. */
#include "kl_cpu.h"

#include <pthread.h>
#include <unistd.h>

#define KL_MAX_THREADS 256

int kl__threads(int requested)
{
    long n = requested > 0 ? requested : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > KL_MAX_THREADS ? KL_MAX_THREADS : (int)n;
}

typedef struct job {
    void (*fn)(void *ctx, int i, int n);
    void *ctx;
    int i, n;
    kl_cputime *acc;   /* the starter's run account */
} job;

static void *job_main(void *p)
{
    job *j = p;
    kl__cputime_enter(j->acc);
    j->fn(j->ctx, j->i, j->n);
    kl__cputime_leave();
    return NULL;
}

void kl__parallel(int n, void (*fn)(void *ctx, int i, int n), void *ctx)
{
    if (n > KL_MAX_THREADS)
        n = KL_MAX_THREADS;
    if (n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_t tid[KL_MAX_THREADS];
    job jobs[KL_MAX_THREADS];
    int started[KL_MAX_THREADS];
    for (int i = 1; i < n; i++) {
        jobs[i] = (job){.fn = fn, .ctx = ctx, .i = i, .n = n, .acc = kl__cputime_current()};
        started[i] = pthread_create(&tid[i], NULL, job_main, &jobs[i]) == 0;
    }
    fn(ctx, 0, n);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            fn(ctx, i, n);
    }
}

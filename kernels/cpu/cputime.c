/* cputime.c — the CPU time of a run over the threads it uses (kl.h,
 * kl_cputime). Each thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID) is
 * exact for that thread; a run is the thread that called start plus the
 * helpers started from it, found through a thread-local pointer that each
 * helper inherits from its starter. */
#include "kl_cpu.h"

#include <time.h>

static __thread kl_cputime *kl__cur;

static int64_t thread_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kl_cputime_start(kl_cputime *c)
{
    c->helpers_ns = 0;
    c->start_ns = thread_ns();
    kl__cur = c;
}

int64_t kl_cputime_stop(kl_cputime *c)
{
    int64_t own = thread_ns() - c->start_ns;
    kl__cur = NULL;
    return own + __atomic_load_n(&c->helpers_ns, __ATOMIC_ACQUIRE);
}

kl_cputime *kl__cputime_current(void)
{
    return kl__cur;
}

void kl__cputime_enter(kl_cputime *c)
{
    kl__cur = c;
}

/* A helper thread is new, so its clock is all the run's. */
void kl__cputime_leave(void)
{
    if (kl__cur)
        __atomic_add_fetch(&kl__cur->helpers_ns, thread_ns(), __ATOMIC_RELEASE);
    kl__cur = NULL;
}

/* montecarlo.c — the montecarlo_option kernel's catalog entry and CPU
 * reference (cuda/montecarlo.cu is the GPU twin).
 *   params: type (call | put), style (european | asian), s0, strike, rate,
 *           sigma, maturity (years), paths, steps, seed
 *   inputs: none
 *   output: price is (1) float32, std_error is (1) float32
 * Geometric Brownian motion under the risk-neutral measure, log-Euler steps
 * (exact for GBM): log S(t+dt) = log S(t) + (r - sigma^2/2) dt + sigma sqrt(dt) Z.
 * Path p draws its normals from Philox-4x32-10 (kl_philox.h) with key = seed
 * and counter = (step / 4, p low 32 bits, p high 32 bits, 0): the four words
 * give Z for steps 4b..4b+3 by Box–Muller, (w0, w1) -> (Z0, Z1) and
 * (w2, w3) -> (Z2, Z3). Each path runs with its antithetic twin (-Z), so
 * `paths` pairs simulate 2*paths price paths. The sample is the discounted
 * pair mean Y_p = e^(-rT) (payoff(+Z) + payoff(-Z)) / 2; price is the mean of
 * Y over the pairs, std_error its sample standard deviation / sqrt(paths).
 * european pays on S(T); asian on the arithmetic mean of S at the `steps`
 * dates T/steps, 2T/steps, ..., T (S(0) excluded).
 * Precision: per-path arithmetic in float32 (what the GPU does fast),
 * payoffs and every sum in double; outputs float32, whose 7 digits are
 * finer than the Monte Carlo error of any option but a degenerate one.
 * Threads: pthreads through kl__parallel, like every CPU kernel (no OpenMP
 * runtime in the node or the plugin, and cancel is polled the same way).
 * Paths are cut into a fixed number of chunks whatever the thread count,
 * threads take chunks in turn, each chunk's sums go to its own slot, and
 * the slots are added in a fixed order: a seed gives the same bits on 1 or
 * 64 threads. Limits: paths <= 1e9, steps <= 10000, paths*steps <= 1e12. */
#include "kl_cpu.h"
#include "kl_philox.h"

#include <math.h>
#include <stdlib.h>

#define MC_MAX_PATHS 1e9
#define MC_MAX_STEPS 10000
#define MC_MAX_PATH_STEPS 1e12 /* hours on 2 CPU cores; seconds at 1e11 path-steps/s on a GPU */
/* Largest |log(S/s0)| a path may reach, as |r - sigma^2/2| T + 8 sigma sqrt(T):
 * e^80 ~ 5.5e34 stays finite in float32 (whose limit is e^88.7). */
#define MC_MAX_LOG_MOVE 80.0
/* Paths are split into this many chunks (fewer when there are fewer paths),
 * whatever the thread count: the unit of the deterministic reduction. */
#define MC_CHUNKS 4096
/* Path-steps between two polls of the cancel flag (~2 ms on one core). */
#define MC_POLL_PATH_STEPS 65536

static const char *const types[] = {"call", "put", NULL};
static const char *const styles[] = {"european", "asian", NULL};

static const kl_param_spec params[] = {
    {.name = "type", .type = KL_PARAM_ENUM, .choices = types, .def_choice = KL_MC_CALL,
     .doc = "call pays max(S - strike, 0), put max(strike - S, 0)"},
    {.name = "style", .type = KL_PARAM_ENUM, .choices = styles, .def_choice = KL_MC_EUROPEAN,
     .doc = "european: S is the price at maturity; asian: the arithmetic mean of the prices at the steps "
            "dates maturity/steps, ..., maturity"},
    {.name = "s0", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 1e9,
     .doc = "price of the underlying today, > 0"},
    {.name = "strike", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 1e9, .doc = "strike price"},
    {.name = "rate", .type = KL_PARAM_NUMBER, .min = -1, .max = 1, .def = 0,
     .doc = "risk-free rate, continuously compounded, per year (0.05 = 5 %)"},
    {.name = "sigma", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 5,
     .doc = "volatility per sqrt(year) (0.2 = 20 %); with maturity, |rate - sigma^2/2|*maturity + "
            "8*sigma*sqrt(maturity) must be <= 80 (float32 paths)"},
    {.name = "maturity", .type = KL_PARAM_NUMBER, .required = 1, .min = 0, .max = 100,
     .doc = "time to expiry in years, > 0"},
    {.name = "paths", .type = KL_PARAM_INT, .min = 2, .max = MC_MAX_PATHS, .def = 1000000,
     .doc = "antithetic pairs of paths (2*paths are simulated); paths*steps <= 1e12"},
    {.name = "steps", .type = KL_PARAM_INT, .min = 1, .max = MC_MAX_STEPS, .def = 1,
     .doc = "time steps per path; european needs 1 (GBM steps are exact), asian averages over them"},
    {.name = "seed", .type = KL_PARAM_INT, .min = 0, .max = 9007199254740991.0 /* 2^53 - 1 */, .def = 0,
     .doc = "Philox key: the same seed gives the same draws on every backend"},
};

static const kl_io_spec outputs[] = {
    {.name = "price", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "discounted expected payoff, the mean over the antithetic pairs"},
    {.name = "std_error", .dtype = KL_F32, .ndim_min = 1, .ndim_max = 1, .shape_doc = "[1]", .max_elems = 1,
     .doc = "standard error of price: sample standard deviation of the pair means / sqrt(paths)"},
};

static int mc_check(const kl_args *args, kl_err *err)
{
    const kl_value *p = args->params;
    double r = p[KL_MC_RATE].num, sigma = p[KL_MC_SIGMA].num, T = p[KL_MC_MATURITY].num;
    if (!(p[KL_MC_S0].num > 0)) {
        kl_err_set(err, "params.s0", "params.s0 must be > 0");
        return KL_EINVAL;
    }
    if (!(T > 0)) {
        kl_err_set(err, "params.maturity", "params.maturity must be > 0 (years)");
        return KL_EINVAL;
    }
    if (p[KL_MC_PATHS].num * p[KL_MC_STEPS].num > MC_MAX_PATH_STEPS) {
        kl_err_set(err, "params.paths", "params.paths * params.steps is %.4g; the limit is %.0e path-steps",
                   p[KL_MC_PATHS].num * p[KL_MC_STEPS].num, MC_MAX_PATH_STEPS);
        return KL_EINVAL;
    }
    double move = fabs(r - 0.5 * sigma * sigma) * T + 8 * sigma * sqrt(T);
    if (move > MC_MAX_LOG_MOVE) {
        kl_err_set(err, "params.sigma",
                   "params.sigma %g over maturity %g moves log prices by up to %.4g; float32 paths allow %.0f "
                   "(|rate - sigma^2/2|*maturity + 8*sigma*sqrt(maturity))",
                   sigma, T, move, MC_MAX_LOG_MOVE);
        return KL_EINVAL;
    }
    return 0;
}

/* The run's constants, derived once in double and rounded once to float:
 * cuda/montecarlo.cu derives the same values the same way. */
typedef struct mc_model {
    int put, asian, steps;
    float drift, vol;    /* per step: (r - sigma^2/2) dt and sigma sqrt(dt) */
    float drift_t;       /* (r - sigma^2/2) T, for european */
    double s0, strike, disc;
    double shift;        /* subtracted from each sample before summing */
    kl_philox_key key;
} mc_model;

static mc_model mc_model_of(const kl_args *args)
{
    const kl_value *p = args->params;
    double r = p[KL_MC_RATE].num, sigma = p[KL_MC_SIGMA].num, T = p[KL_MC_MATURITY].num;
    int steps = (int)p[KL_MC_STEPS].num;
    double dt = T / steps, mu = r - 0.5 * sigma * sigma;
    uint64_t seed = (uint64_t)p[KL_MC_SEED].num;
    mc_model m = {
        .put = p[KL_MC_TYPE].choice == KL_MC_PUT,
        .asian = p[KL_MC_STYLE].choice == KL_MC_ASIAN,
        .steps = steps,
        .drift = (float)(mu * dt),
        .vol = (float)(sigma * sqrt(dt)),
        .drift_t = (float)(mu * T),
        .s0 = p[KL_MC_S0].num,
        .strike = p[KL_MC_STRIKE].num,
        .disc = exp(-r * T),
        .key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}},
    };
    /* The payoff of the path that grows at the rate r is near the mean, so
     * sums of (Y - shift)^2 do not cancel catastrophically when the standard
     * deviation is tiny against the price (deep in the money, low sigma). */
    double fwd = m.s0 * exp(r * T);
    m.shift = m.disc * (m.put ? fmax(m.strike - fwd, 0) : fmax(fwd - m.strike, 0));
    return m;
}

static inline double payoff(const mc_model *m, double s)
{
    return m->put ? fmax(m->strike - s, 0) : fmax(s - m->strike, 0);
}

/* Y_p - shift for pair p: the discounted mean payoff of path p and its
 * antithetic twin. */
static double mc_pair(const mc_model *m, uint64_t p)
{
    kl_philox4x32 ctr = {{0, (uint32_t)p, (uint32_t)(p >> 32), 0}};
    float zsum = 0;        /* european: sum of Z; log(S(T)/s0) follows */
    float lp = 0, lm = 0;  /* asian: log(S/s0) of the path and of its twin */
    double ap = 0, am = 0; /* asian: sums of S/s0 over the dates */
    for (int t = 0; t < m->steps; t += 4) {
        ctr.v[0] = (uint32_t)(t / 4);
        kl_philox4x32 w = kl_philox4x32_10(ctr, m->key);
        float z[4];
        int n = m->steps - t < 4 ? m->steps - t : 4;
        kl_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
        if (n > 2)
            kl_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
        if (!m->asian) {
            for (int l = 0; l < n; l++)
                zsum += z[l];
            continue;
        }
        for (int l = 0; l < n; l++) {
            kl__mc_step(m->drift, m->vol, z[l], &lp, &lm);
            ap += expf(lp);
            am += expf(lm);
        }
    }
    double sp, sm;
    if (m->asian) {
        sp = m->s0 * ap / m->steps;
        sm = m->s0 * am / m->steps;
    } else {
        float xp, xm;
        kl__mc_end(m->drift_t, m->vol, zsum, &xp, &xm);
        sp = m->s0 * expf(xp);
        sm = m->s0 * expf(xm);
    }
    return kl__mc_value(m->disc, payoff(m, sp), payoff(m, sm), m->shift);
}

typedef struct mc_job {
    const kl_args *args;
    mc_model m;
    int64_t paths, nchunks, poll_every;
    double (*sums)[2]; /* per chunk: sum of (Y - shift), sum of (Y - shift)^2 */
    int64_t next;      /* next chunk to take */
    int64_t done;      /* paths simulated, over every chunk */
    int canceled;      /* see kl__stop_seen */
} mc_job;

void kl__mc_progress(const kl_args *args, int64_t done, int64_t paths)
{
    kl_progress p = {.fraction = (double)done / (double)paths};
    kl_progress_add(&p, "paths_done", (double)done);
    kl_progress_add(&p, "paths", (double)paths);
    kl_progress_report(args->progress, &p);
}

/* Threads take chunks in turn (the load balances when cores differ in
 * speed); a chunk's sums depend only on its paths, not on who ran it. */
static void mc_worker(void *ctx, int i, int n)
{
    mc_job *j = ctx;
    (void)n;
    for (;;) {
        int64_t c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (c >= j->nchunks)
            return;
        int64_t lo = j->paths * c / j->nchunks, hi = j->paths * (c + 1) / j->nchunks;
        double s1 = 0, s2 = 0;
        for (int64_t p = lo; p < hi; p++) {
            if ((p - lo) % j->poll_every == 0 && kl__stop_seen(j->args, &j->canceled))
                return;
            double y = mc_pair(&j->m, (uint64_t)p);
            s1 += y;
            s2 += y * y;
        }
        j->sums[c][0] = s1;
        j->sums[c][1] = s2;
        int64_t done = __atomic_add_fetch(&j->done, hi - lo, __ATOMIC_RELAXED);
        if (i == 0 && done < j->paths) /* one thread reports; the run's end says 1 */
            kl__mc_progress(j->args, done, j->paths);
    }
}

/* Pairwise sum of column k of v[0..n): fixed order, error ~ log2(n) ulps. */
static double sum_pairwise(double (*v)[2], int64_t n, int k)
{
    if (n == 1)
        return v[0][k];
    int64_t h = n / 2;
    return sum_pairwise(v, h, k) + sum_pairwise(v + h, n - h, k);
}

static int mc_run_cpu(const kl_args *args, kl_tensor *outs, kl_err *err)
{
    const int64_t one = 1;
    mc_job j = {.args = args, .m = mc_model_of(args), .paths = (int64_t)args->params[KL_MC_PATHS].num};
    j.nchunks = j.paths < MC_CHUNKS ? j.paths : MC_CHUNKS;
    j.poll_every = MC_POLL_PATH_STEPS / j.m.steps > 1 ? MC_POLL_PATH_STEPS / j.m.steps : 1;
    j.sums = calloc((size_t)j.nchunks, sizeof *j.sums);
    if (!j.sums || kl_tensor_alloc(&outs[0], KL_F32, 1, &one) < 0 || kl_tensor_alloc(&outs[1], KL_F32, 1, &one) < 0) {
        free(j.sums);
        kl_err_set(err, NULL, "montecarlo_option: out of memory");
        return KL_ENOMEM;
    }
    int nt = 1;
    if ((double)j.paths * j.m.steps >= MC_POLL_PATH_STEPS) {
        nt = kl__threads(args->threads);
        nt = j.nchunks < nt ? (int)j.nchunks : nt;
    }
    kl__parallel(nt, mc_worker, &j);
    if (j.canceled) {
        free(j.sums);
        kl_err_set(err, NULL, "montecarlo_option: cancelled");
        return KL_ECANCELED;
    }
    double n = (double)j.paths, s1 = sum_pairwise(j.sums, j.nchunks, 0), s2 = sum_pairwise(j.sums, j.nchunks, 1);
    free(j.sums);
    double var = (s2 - s1 * s1 / n) / (n - 1);
    ((float *)outs[0].data)[0] = (float)(j.m.shift + s1 / n);
    ((float *)outs[1].data)[0] = (float)sqrt(var > 0 ? var / n : 0);
    kl__mc_progress(args, j.paths, j.paths);
    kl_info_set(args->info, "simulated_paths", "%lld (%lld antithetic pairs)", 2 * (long long)j.paths,
                (long long)j.paths);
    return 0;
}

const kl_kernel kl__montecarlo_option = {
    .name = "montecarlo_option",
    .doc = "price of a European or arithmetic-average Asian call or put by Monte Carlo: geometric Brownian "
           "motion, antithetic variates, Philox-4x32-10 keyed by (seed, path), the same draws on CPU and GPU",
    .params = params,
    .nparams = 10,
    .inputs = NULL,
    .ninputs = 0,
    .outputs = outputs,
    .noutputs = 2,
    .check = mc_check,
    .run_cpu = mc_run_cpu,
};

/* check_montecarlo.cu — montecarlo_option on CUDA against the CPU reference,
 * then figures. First the generator: kl_philox.h run on the device against
 * the Random123 known answers and against the host on a million counters
 * (bit for bit), and its Box–Muller normals (to the ulps of CUDA's logf and
 * sincosf), and the path arithmetic (kl__mc_step and its neighbours) on
 * the same normals, bit for bit: nothing fused into an FMA. Then the same
 * options through plugin.run and kl_run_cpu: price and std_error within a
 * few float32 ulps of s0 (see check_case: what is left is libm's ulps),
 * the GPU run repeated for bit-identical output, the GPU price within 3
 * standard errors of Black–Scholes on 1e8 pairs, and a cancel. Figures: path-steps
 * per second through the plugin (host in and out, medians of 3 runs after a
 * warm-up); a path-step is one antithetic pair advanced by one time step.
 * Built and run by tests/gpu/run.sh (check_common.h: the summary line and exit status). */
#include "kl_cuda.h"
#include "kl_kernels.h"
#include "kl_philox.h"
#include "kl_plugin.h"

#include <algorithm>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#define KL_CHECK_SEED 0xa4093822299f31d0ull
#include "check_common.h"

static void report(bool ok, const char *label)
{
    printf("%s %s\n", ok ? "PASS" : "FAIL", label);
    failures += !ok;
}

/* ---- the generator ---- */

__global__ void philox_kernel(const kl_philox4x32 *ctr, const kl_philox_key *key, kl_philox4x32 *out, float *z,
                              int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    kl_philox4x32 w = kl_philox4x32_10(ctr[i], key[i]);
    out[i] = w;
    kl_box_muller(w.v[0], w.v[1], &z[4 * i + 0], &z[4 * i + 1]);
    kl_box_muller(w.v[2], w.v[3], &z[4 * i + 2], &z[4 * i + 3]);
}

static void check_philox(void)
{
    const int n = check_small ? 1 << 12 : 1 << 20;
    std::vector<kl_philox4x32> ctr(n), got(n);
    std::vector<kl_philox_key> key(n);
    std::vector<float> z(4 * (size_t)n);
    /* The Random123 known answers first, then counters and keys from a
     * splitmix64 stream: every bit pattern of the words gets exercised. */
    const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
         0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1},
    };
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        uint32_t w[6];
        for (int k = 0; k < 6; k++) {
            uint64_t x = (s += 0x9e3779b97f4a7c15ull);
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
            w[k] = (uint32_t)(x ^ (x >> 31));
        }
        if (i < 3)
            memcpy(w, kat[i], sizeof w);
        ctr[i] = kl_philox4x32{{w[0], w[1], w[2], w[3]}};
        key[i] = kl_philox_key{{w[4], w[5]}};
    }
    kl_philox4x32 *dctr, *dout;
    kl_philox_key *dkey;
    float *dz;
    CHECK_CUDA(cudaMalloc(&dctr, sizeof(kl_philox4x32) * n));
    CHECK_CUDA(cudaMalloc(&dout, sizeof(kl_philox4x32) * n));
    CHECK_CUDA(cudaMalloc(&dkey, sizeof(kl_philox_key) * n));
    CHECK_CUDA(cudaMalloc(&dz, sizeof(float) * 4 * n));
    CHECK_CUDA(cudaMemcpy(dctr, ctr.data(), sizeof(kl_philox4x32) * n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dkey, key.data(), sizeof(kl_philox_key) * n, cudaMemcpyHostToDevice));
    philox_kernel<<<(n + 255) / 256, 256>>>(dctr, dkey, dout, dz, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(got.data(), dout, sizeof(kl_philox4x32) * n, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(z.data(), dz, sizeof(float) * 4 * n, cudaMemcpyDeviceToHost));
    cudaFree(dctr);
    cudaFree(dout);
    cudaFree(dkey);
    cudaFree(dz);

    bool kat_ok = true;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            kat_ok = kat_ok && got[i].v[k] == kat[i][6 + k];
    report(kat_ok, "philox4x32-10 on the device: Random123 known answers");

    int differ = 0;
    double zmax = 0, zerr = 0;
    for (int i = 0; i < n; i++) {
        kl_philox4x32 h = kl_philox4x32_10(ctr[i], key[i]);
        differ += memcmp(&h, &got[i], sizeof h) != 0;
        float hz[4];
        kl_box_muller(h.v[0], h.v[1], &hz[0], &hz[1]);
        kl_box_muller(h.v[2], h.v[3], &hz[2], &hz[3]);
        for (int k = 0; k < 4; k++) {
            zerr = std::max(zerr, fabs((double)hz[k] - z[4 * (size_t)i + k]));
            zmax = std::max(zmax, fabs((double)hz[k]));
        }
    }
    char label[160];
    snprintf(label, sizeof label, "philox4x32-10 device == host on %d counters (%d differ)", n, differ);
    report(differ == 0, label);
    /* |z| <= 6.8; a few ulps of logf, sqrtf and sincosf: ~1e-6 at most. */
    snprintf(label, sizeof label, "box-muller device vs host: max |dz| %.3g (max |z| %.3f)", zerr, zmax);
    report(zerr <= 4e-6, label);
}

/* ---- the path arithmetic: the same normals in, the same bits out ---- */

/* Path t: `steps` asian steps from normals z[t*steps ..], then its log-
 * prices and a european end and a pair's value, each as the kernel does
 * them (kl__mc_step and its neighbours). */
__global__ void path_kernel(const float *z, const float *drift, const float *vol, int steps, int n, float *lp,
                            float *lm, float *xp, float *xm, double *val)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float p = 0, m = 0, zsum = 0;
    for (int k = 0; k < steps; k++) {
        kl__mc_step(drift[t], vol[t], z[(size_t)t * steps + k], &p, &m);
        zsum = KL_FADD(zsum, z[(size_t)t * steps + k]);
    }
    lp[t] = p;
    lm[t] = m;
    kl__mc_end(drift[t], vol[t], zsum, &xp[t], &xm[t]);
    val[t] = kl__mc_value(0.95, (double)p * 3.0, (double)m * 5.0, 0.25);
}

/* nvcc fuses drift + vol*z into one FMA unless every operation is its own
 * (kl_kernels.h); this is the check that none is fused: on identical
 * normals, device and host must agree bit for bit. */
static void check_path_arithmetic(void)
{
    const int n = 1 << 14, steps = 64;
    std::vector<float> z((size_t)n * steps), drift(n), vol(n), lp(n), lm(n), xp(n), xm(n);
    std::vector<double> val(n);
    for (size_t i = 0; i < z.size(); i++)
        z[i] = 3.0f * frand();
    for (int t = 0; t < n; t++) {
        drift[t] = 1e-3f * frand();
        vol[t] = 0.3f * (frand() + 1.0f);
    }
    float *dz, *dd, *dv, *dp, *dm, *dxp, *dxm;
    double *dval;
    CHECK_CUDA(cudaMalloc(&dz, sizeof(float) * z.size()));
    CHECK_CUDA(cudaMalloc(&dd, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dv, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dp, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dm, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dxp, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dxm, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dval, sizeof(double) * n));
    CHECK_CUDA(cudaMemcpy(dz, z.data(), sizeof(float) * z.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dd, drift.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dv, vol.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    path_kernel<<<(n + 255) / 256, 256>>>(dz, dd, dv, steps, n, dp, dm, dxp, dxm, dval);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(lp.data(), dp, sizeof(float) * n, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(lm.data(), dm, sizeof(float) * n, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(xp.data(), dxp, sizeof(float) * n, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(xm.data(), dxm, sizeof(float) * n, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(val.data(), dval, sizeof(double) * n, cudaMemcpyDeviceToHost));
    for (float *d : {dz, dd, dv, dp, dm, dxp, dxm})
        cudaFree(d);
    cudaFree(dval);
    int differ = 0;
    for (int t = 0; t < n; t++) {
        float p = 0, m = 0, zsum = 0, hxp, hxm;
        for (int k = 0; k < steps; k++) {
            kl__mc_step(drift[t], vol[t], z[(size_t)t * steps + k], &p, &m);
            zsum = KL_FADD(zsum, z[(size_t)t * steps + k]);
        }
        kl__mc_end(drift[t], vol[t], zsum, &hxp, &hxm);
        const double hv = kl__mc_value(0.95, (double)p * 3.0, (double)m * 5.0, 0.25);
        differ += memcmp(&p, &lp[t], sizeof p) != 0 || memcmp(&m, &lm[t], sizeof m) != 0 ||
                  memcmp(&hxp, &xp[t], sizeof hxp) != 0 || memcmp(&hxm, &xm[t], sizeof hxm) != 0 ||
                  memcmp(&hv, &val[t], sizeof hv) != 0;
    }
    char label[160];
    snprintf(label, sizeof label, "path arithmetic device == host, bit for bit, on %d paths x %d steps (%d differ)",
             n, steps, differ);
    report(differ == 0, label);
}

/* ---- the kernel ---- */

struct option {
    const char *type, *style;
    double s0, strike, rate, sigma, maturity, paths, steps, seed;
};

static kl_args args_of(const option &o)
{
    kl_args a = kernel_args("montecarlo_option");
    a.params[KL_MC_TYPE] = kl_value{0, strcmp(o.type, "put") == 0 ? KL_MC_PUT : KL_MC_CALL, 1};
    a.params[KL_MC_STYLE] = kl_value{0, strcmp(o.style, "asian") == 0 ? KL_MC_ASIAN : KL_MC_EUROPEAN, 1};
    const double nums[] = {o.s0, o.strike, o.rate, o.sigma, o.maturity, o.paths, o.steps, o.seed};
    for (int i = 0; i < 8; i++)
        a.params[KL_MC_S0 + i] = kl_value{nums[i], 0, 1};
    return a;
}

struct priced {
    int rc;
    float price, std_error;
    double seconds;
    char message[256];
};

static priced run(const option &o, bool gpu, volatile int *cancel = NULL)
{
    kl_args a = args_of(o);
    a.cancel = cancel;
    kl_tensor out[2];
    kl_err err;
    memset(&err, 0, sizeof err);
    priced p;
    memset(&p, 0, sizeof p);
    double t0 = now_s();
    p.rc = gpu ? check_run(&a, 1, out, &err) : kl_run_cpu(&a, out, &err);
    p.seconds = now_s() - t0;
    snprintf(p.message, sizeof p.message, "%s", err.message);
    if (p.rc == 0) {
        p.price = ((float *)out[0].data)[0];
        p.std_error = ((float *)out[1].data)[0];
        kl_tensor_free(&out[0]);
        kl_tensor_free(&out[1]);
    }
    return p;
}

static const char *describe(const option &o, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s K=%g paths=%.0f steps=%.0f seed=%.0f", o.style, o.type, o.strike, o.paths, o.steps,
             o.seed);
    return buf;
}

/* The spacing of float32 numbers at |x|: one unit in the last place. */
static double ulp_f(double x)
{
    const float f = fabsf((float)x);
    return (double)nextafterf(f, INFINITY) - (double)f;
}

/* Same draws and the same path arithmetic on both (check_path_arithmetic):
 * what is left between the two prices are the ulps of CUDA's logf, sincosf
 * and expf against glibc's in each path's price, a few ulps of s0 at most
 * (averaged over the pairs: fewer), and the rounding of the sums. So the
 * price must agree within 8 ulps of s0 (plus 2 of its own), std_error
 * within 8 ulps of s0 / sqrt(paths) (plus 2 of its own): near bit for bit,
 * some hundred times tighter than the paths' own spread. */
static void check_case(const option &o)
{
    char what[128];
    describe(o, what, sizeof what);
    priced g = run(o, true), c = run(o, false), g2 = run(o, true);
    bool ok = g.rc == 0 && c.rc == 0 && g2.rc == 0;
    if (!ok)
        printf("    cuda rc %d (%s)  cpu rc %d (%s)\n", g.rc, g.message, c.rc, c.message);
    const double tol_p = 8 * ulp_f(o.s0) + 2 * ulp_f(c.price);
    const double tol_e = 8 * ulp_f(o.s0) / sqrt(o.paths) + 2 * ulp_f(c.std_error);
    const double dp = fabs((double)g.price - c.price), de = fabs((double)g.std_error - c.std_error);
    ok = ok && isfinite(g.price) && isfinite(g.std_error) && dp <= tol_p && de <= tol_e;
    printf("%s %-55s cuda %.7f ± %.3g  cpu %.7f ± %.3g  (|dprice| %.2g = %.1f ulp(s0), |dse| %.2g = %.1f ulp(se); "
           "tolerances %.2g, %.2g)  cuda %7.1f ms  cpu %7.1f ms\n",
           ok ? "PASS" : "FAIL", what, g.price, g.std_error, c.price, c.std_error, dp, dp / ulp_f(o.s0), de,
           de / ulp_f(c.std_error > 0 ? c.std_error : 1), tol_p, tol_e, g.seconds * 1e3, c.seconds * 1e3);
    failures += !ok;
    bool same = g.rc == 0 && g2.rc == 0 && g.price == g2.price && g.std_error == g2.std_error;
    printf("%s %-55s\n", same ? "PASS" : "FAIL", "  cuda run twice: the same bits");
    failures += !same;
}

static double norm_cdf(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

static double black_scholes(const option &o)
{
    double sd = o.sigma * sqrt(o.maturity);
    double d1 = (log(o.s0 / o.strike) + (o.rate + 0.5 * o.sigma * o.sigma) * o.maturity) / sd, d2 = d1 - sd;
    double df = exp(-o.rate * o.maturity);
    if (strcmp(o.type, "call") == 0)
        return o.s0 * norm_cdf(d1) - o.strike * df * norm_cdf(d2);
    return o.strike * df * norm_cdf(-d2) - o.s0 * norm_cdf(-d1);
}

static void check_black_scholes(const option &o)
{
    char what[128], label[256];
    priced g = run(o, true);
    double bs = black_scholes(o);
    bool ok = g.rc == 0 && g.std_error > 0 && fabs(g.price - bs) <= 3 * g.std_error;
    snprintf(label, sizeof label, "%-55s cuda %.6f ± %.2g, Black-Scholes %.6f (%.2f std_error)",
             describe(o, what, sizeof what), g.price, g.std_error, bs, (g.price - bs) / g.std_error);
    report(ok, label);
}

static void check_cancel(void)
{
    option o = {"call", "asian", 100, 100, 0.05, 0.2, 1, 1e9, 1000, 1}; /* 1e12 path-steps: seconds */
    volatile int cancel = 0;
    pthread_t t;
    pthread_create(&t, NULL, raise_later, (void *)&cancel);
    priced g = run(o, true, &cancel);
    pthread_join(t, NULL);
    char label[128];
    snprintf(label, sizeof label, "cancel raised after 100 ms: returned after %.0f ms", g.seconds * 1e3);
    report(g.rc == KL_ECANCELED && g.seconds < 0.1 + 0.25, label);
}

/* ---- figures ---- */

static void figure(const option &o)
{
    priced warm = run(o, true);
    if (warm.rc != 0) {
        printf("FAIL figure run: %s\n", warm.message);
        failures++;
        return;
    }
    std::vector<double> ts;
    for (int i = 0; i < 3; i++)
        ts.push_back(run(o, true).seconds);
    double t = median(ts), path_steps = o.paths * o.steps;
    char what[128];
    printf("montecarlo %-50s %8.2f ms  %.3g path-steps/s  (%.3g price path-steps/s counting both of a pair)\n",
           describe(o, what, sizeof what), t * 1e3, path_steps / t, 2 * path_steps / t);
}

int main(int argc, char **argv)
{
    check_begin("check_montecarlo", argc, argv);
    int rc = open_plugin();
    if (rc != 0)
        return rc;

    check_philox();
    check_path_arithmetic();
    const option cases[] = {
        {"call", "european", 100, 100, 0.05, 0.2, 1, 2, 1, 0},
        {"put", "asian", 100, 105, 0.03, 0.3, 2, 1001, 5, 12},
        {"call", "european", 100, 100, 0.05, 0.2, 1, 1000001, 1, 7},
        {"put", "european", 100, 100, 0.05, 0.2, 1, 1000000, 7, 7},
        {"put", "european", 50, 40, -0.01, 0.35, 2.5, 300000, 3, 0x123456789ull},
        {"call", "asian", 100, 100, 0.05, 0.2, 1, 100000, 64, 11},
        {"put", "asian", 100, 100, 0.05, 0.2, 1, 20000, 1000, 13},
        {"call", "asian", 1e6, 9e5, 0.0, 0.8, 10, 20000, 365, 14},
    };
    for (const option &o : cases) {
        if (check_small && o.paths * o.steps > 1e4)
            continue; /* under compute-sanitizer: the two small ones */
        check_case(o);
    }
    if (!check_small) {
        check_black_scholes({"call", "european", 100, 100, 0.05, 0.2, 1, 1e8, 1, 21});
        check_black_scholes({"put", "european", 100, 110, 0.05, 0.25, 0.5, 1e8, 1, 22});
        check_black_scholes({"call", "european", 100, 90, 0.02, 0.3, 3, 1e7, 50, 23});
        check_cancel();
    }
    printf("%s: %d failure(s)\n\n", failures ? "FAIL" : "PASS", failures);
    if (check_small)
        return check_end();

    figure({"call", "european", 100, 100, 0.05, 0.2, 1, 1e9, 1, 1});
    figure({"call", "european", 100, 100, 0.05, 0.2, 1, 1 << 26, 256, 1});
    figure({"call", "asian", 100, 100, 0.05, 0.2, 1, 1 << 26, 256, 1});
    figure({"call", "asian", 100, 100, 0.05, 0.2, 1, 1 << 22, 4096, 1});
    return check_end();
}

/* test_kl_montecarlo.c — the CPU montecarlo_option against Black–Scholes
 * (European prices within 3 standard errors), put-call parity, an Asian
 * call below its European twin, a naive double-precision reference of the
 * same estimator on the same Philox draws, determinism, the parameter
 * checks, and cancel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "kl.h"
#include "kl_test_clock.h"
#include "kl_kernels.h"
#include "kl_test_args.h"
#include "kl_philox.h"

typedef struct option {
    kl_mc_type type;
    kl_mc_style style;
    double s0, strike, rate, sigma, maturity;
    double paths, steps, seed;
} option;

typedef struct result {
    float price, std_error;
} result;

static const option atm = {KL_MC_CALL, KL_MC_EUROPEAN, 100, 100, 0.05, 0.2, 1, 200000, 1, 7};

/* atm as an Asian option averaged over steps steps, priced on paths paths. */
static option asian(double steps, double paths)
{
    option o = atm;
    o.style = KL_MC_ASIAN;
    o.steps = steps;
    o.paths = paths;
    return o;
}

static kl_args args_of(const option *o, int threads)
{
    kl_args a = args_for("montecarlo_option");
    a.params[KL_MC_TYPE] = (kl_value){.choice = o->type, .given = 1};
    a.params[KL_MC_STYLE] = (kl_value){.choice = o->style, .given = 1};
    const double nums[] = {o->s0, o->strike, o->rate, o->sigma, o->maturity, o->paths, o->steps, o->seed};
    for (int i = 0; i < 8; i++)
        a.params[KL_MC_S0 + i] = (kl_value){.num = nums[i], .given = 1};
    a.threads = threads;
    return a;
}

static result price_threads(const option *o, int threads)
{
    kl_args a = args_of(o, threads);
    kl_tensor out[2];
    kl_err err = {0};
    kl_info info = {0};
    a.info = &info;
    int rc = kl_run_cpu(&a, out, &err);
    if (rc != 0)
        fail_msg("montecarlo_option: %d %s: %s", rc, err.field, err.message);
    assert_int_equal(out[0].dtype, KL_F32);
    assert_int_equal(out[0].ndim, 1);
    assert_int_equal(out[0].shape[0], 1);
    assert_int_equal(out[1].shape[0], 1);
    result r = {((float *)out[0].data)[0], ((float *)out[1].data)[0]};
    kl_tensor_free(&out[0]);
    kl_tensor_free(&out[1]);
    return r;
}

static result price(const option *o)
{
    return price_threads(o, 0);
}

static double norm_cdf(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

static double black_scholes(const option *o)
{
    double sd = o->sigma * sqrt(o->maturity);
    double d1 = (log(o->s0 / o->strike) + (o->rate + 0.5 * o->sigma * o->sigma) * o->maturity) / sd, d2 = d1 - sd;
    double df = exp(-o->rate * o->maturity);
    if (o->type == KL_MC_CALL)
        return o->s0 * norm_cdf(d1) - o->strike * df * norm_cdf(d2);
    return o->strike * df * norm_cdf(-d2) - o->s0 * norm_cdf(-d1);
}

static void assert_within_3_se_of_black_scholes(const option *o)
{
    result r = price(o);
    double bs = black_scholes(o);
    if (!(fabs(r.price - bs) <= 3 * r.std_error) || !(r.std_error > 0))
        fail_msg("%s K=%g T=%g steps=%g: price %.6f, Black-Scholes %.6f, std_error %.6f",
                 o->type == KL_MC_CALL ? "call" : "put", o->strike, o->maturity, o->steps, r.price, bs,
                 r.std_error);
    /* Antithetic pairs of 200k paths: the error is small in absolute terms too. */
    assert_true(r.std_error < 0.01 * bs + 0.01);
}

static void european_call_and_put_within_3_se_of_black_scholes(void **state)
{
    (void)state;
    option o = atm;
    assert_within_3_se_of_black_scholes(&o);
    o.type = KL_MC_PUT;
    assert_within_3_se_of_black_scholes(&o);
    /* Out of the money, several steps (a partial Philox block), a negative rate. */
    option p = {KL_MC_PUT, KL_MC_EUROPEAN, 50, 40, -0.01, 0.35, 2.5, 100000, 7, 123};
    assert_within_3_se_of_black_scholes(&p);
    p.type = KL_MC_CALL;
    assert_within_3_se_of_black_scholes(&p);
}

/* C - P = s0 - K e^(-rT): on the same draws, C - P is the Monte Carlo
 * estimate of the forward, which has its own (smaller) error. */
static void european_put_call_parity_holds(void **state)
{
    (void)state;
    option c = atm, p = atm;
    p.type = KL_MC_PUT;
    result rc = price(&c), rp = price(&p);
    double parity = atm.s0 - atm.strike * exp(-atm.rate * atm.maturity);
    assert_true(fabs((rc.price - rp.price) - parity) <= 3 * hypot(rc.std_error, rp.std_error));
}

static void asian_call_is_below_european_call(void **state)
{
    (void)state;
    option e = atm, a = atm;
    a.style = KL_MC_ASIAN;
    a.steps = 64;
    a.paths = 20000;
    result re = price(&e), ra = price(&a);
    /* About 5.8 against 10.45 (s0 = K = 100, r = 5 %, sigma = 20 %, 1 year). */
    assert_true(ra.price + 3 * ra.std_error < re.price - 3 * re.std_error);
    assert_true(ra.price > 5.0f && ra.price < 6.5f);
    assert_true(ra.std_error > 0);
}

static void asian_over_one_date_is_european(void **state)
{
    (void)state;
    option e = atm, a = atm;
    e.paths = a.paths = 5000;
    a.style = KL_MC_ASIAN;
    result re = price(&e), ra = price(&a);
    assert_true(re.price == ra.price && re.std_error == ra.std_error);
}

/* The estimator written out plainly in double, one path at a time, on the
 * same draws: pairs of +Z/-Z paths, Asian dates T/steps ... T, discounted
 * pair means, their sample standard deviation / sqrt(paths). */
static result naive(const option *o)
{
    int steps = (int)o->steps;
    double dt = o->maturity / steps, mu = (o->rate - 0.5 * o->sigma * o->sigma) * dt;
    double sd = o->sigma * sqrt(dt), df = exp(-o->rate * o->maturity);
    uint64_t seed = (uint64_t)o->seed;
    kl_philox_key key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    long double sum = 0, sum2 = 0;
    for (uint64_t p = 0; p < (uint64_t)o->paths; p++) {
        double pay[2];
        for (int sign = 0; sign < 2; sign++) {
            double s = o->s0, avg = 0;
            for (int t = 0; t < steps; t++) {
                kl_philox4x32 w = kl_philox4x32_10((kl_philox4x32){{(uint32_t)(t / 4), (uint32_t)p, 0, 0}}, key);
                float z[4];
                kl_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
                kl_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
                s *= exp(mu + (sign ? -sd : sd) * z[t % 4]);
                avg += s / steps;
            }
            double x = o->style == KL_MC_ASIAN ? avg : s;
            pay[sign] = o->type == KL_MC_CALL ? fmax(x - o->strike, 0) : fmax(o->strike - x, 0);
        }
        double y = df * 0.5 * (pay[0] + pay[1]);
        sum += y;
        sum2 += (long double)y * y;
    }
    long double n = o->paths, mean = sum / n;
    result r = {(float)mean, (float)sqrtl((sum2 - n * mean * mean) / (n - 1) / n)};
    return r;
}

static void assert_matches_naive(const option *o)
{
    result r = price_threads(o, 2), ref = naive(o);
    /* float32 paths against double ones agree to ~1e-8 s0 per step (they
     * differ by roundings of random sign); a wrong date, sign or draw moves
     * the price by a good fraction of std_error instead. */
    double tol = 1e-6 * o->s0 * sqrt(o->steps);
    if (!(fabs(r.price - ref.price) <= tol && fabs(r.std_error - ref.std_error) <= 1e-4 * ref.std_error))
        fail_msg("price %.7g naive %.7g, std_error %.7g naive %.7g", r.price, ref.price, r.std_error,
                 ref.std_error);
}

static void cpu_matches_naive_double_reference_on_the_same_draws(void **state)
{
    (void)state;
    option o = {KL_MC_CALL, KL_MC_ASIAN, 100, 95, 0.03, 0.3, 0.75, 3001, 13, 99};
    assert_matches_naive(&o);
    o.type = KL_MC_PUT;
    assert_matches_naive(&o);
    o.style = KL_MC_EUROPEAN;
    o.steps = 6;
    assert_matches_naive(&o);
    o.type = KL_MC_CALL;
    o.steps = 1;
    o.paths = 20000;
    assert_matches_naive(&o);
    /* A seed past 2^32 uses the key's high word. */
    o.seed = 0x123456789ull;
    assert_matches_naive(&o);
}

static void same_seed_gives_same_bits_on_any_thread_count(void **state)
{
    (void)state;
    option o = asian(10, 50001);
    result a = price_threads(&o, 1), b = price_threads(&o, 3), c = price_threads(&o, 0);
    assert_memory_equal(&a, &b, sizeof a);
    assert_memory_equal(&a, &c, sizeof a);
    o.seed = 8;
    result d = price_threads(&o, 1);
    assert_true(d.price != a.price && d.std_error != a.std_error);
    /* ...yet the same option: the two estimates agree within their errors. */
    assert_true(fabs(d.price - a.price) < 4 * hypot(a.std_error, d.std_error));
}

static void zero_sigma_gives_the_discounted_forward_payoff(void **state)
{
    (void)state;
    option o = atm;
    o.sigma = 0;
    o.paths = 100;
    result r = price(&o);
    double want = 100 - 100 * exp(-0.05); /* e^(-rT) (s0 e^(rT) - K) */
    assert_true(fabs(r.price - want) < 1e-4);
    assert_true(r.std_error < 1e-4);
}

/* Deep in the money with almost no volatility the call is the forward,
 * s0 - K e^(-rT), and the samples barely spread: sums of (y - shift) keep
 * the standard error tiny, finite and non-negative. */
static void deep_in_the_money_call_is_the_forward(void **state)
{
    (void)state;
    option o = {KL_MC_CALL, KL_MC_EUROPEAN, 1000, 10, 0.02, 1e-6, 1, 100000, 1, 3};
    result r = price(&o);
    assert_true(fabs(r.price - (1000 - 10 * exp(-0.02))) < 1e-3);
    assert_true(r.std_error >= 0 && r.std_error < 1e-5);
}

static void expect_einval(const option *o, const char *field)
{
    kl_args a = args_of(o, 0);
    kl_tensor out[2];
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
    assert_string_equal(err.field, field);
    assert_non_null(strstr(err.message, field));
}

static void rejects_parameters_out_of_range_naming_the_field(void **state)
{
    (void)state;
    const struct {
        int param;
        double value;
        const char *field;
    } cases[] = {
        {KL_MC_PATHS, 0, "params.paths"},       {KL_MC_PATHS, -5, "params.paths"},
        {KL_MC_PATHS, 1, "params.paths"},       {KL_MC_PATHS, 1e9 + 1, "params.paths"},
        {KL_MC_PATHS, 2.5, "params.paths"},     {KL_MC_STEPS, 0, "params.steps"},
        {KL_MC_STEPS, 10001, "params.steps"},   {KL_MC_SIGMA, -0.1, "params.sigma"},
        {KL_MC_SIGMA, NAN, "params.sigma"},     {KL_MC_S0, 0, "params.s0"},
        {KL_MC_S0, -1, "params.s0"},            {KL_MC_STRIKE, -1, "params.strike"},
        {KL_MC_MATURITY, 0, "params.maturity"}, {KL_MC_MATURITY, 101, "params.maturity"},
        {KL_MC_RATE, 2, "params.rate"},         {KL_MC_SEED, -1, "params.seed"},
        {KL_MC_SEED, 0.5, "params.seed"},       {KL_MC_SEED, 0x1p53, "params.seed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kl_args a = args_of(&atm, 0);
        a.params[cases[i].param].num = cases[i].value;
        kl_tensor out[2];
        kl_err err = {0};
        assert_int_equal(kl_run_cpu(&a, out, &err), KL_EINVAL);
        assert_string_equal(err.field, cases[i].field);
    }
    /* Each within its range, too much together. */
    option o = atm;
    o.paths = 1e9;
    o.steps = 1001;
    expect_einval(&o, "params.paths");
    o = atm;
    o.sigma = 2;
    o.maturity = 30; /* e^(8 sigma sqrt T) would overflow float32 */
    expect_einval(&o, "params.sigma");
    o.maturity = 10; /* 1.95*10 + 16*3.16 = 70: fine */
    o.paths = 1000;
    result r = price(&o);
    assert_true(isfinite(r.price) && isfinite(r.std_error));
}

static void limits_and_defaults_are_in_the_catalog(void **state)
{
    (void)state;
    const kl_kernel *k = kl_kernel_find("montecarlo_option");
    assert_non_null(k);
    static const char *names[] = {"type",  "style",    "s0",    "strike", "rate",
                                  "sigma", "maturity", "paths", "steps",  "seed"};
    for (int i = 0; i < 10; i++)
        assert_int_equal(kl_param_index(k, names[i]), i); /* the KL_MC_* enum */
    assert_int_equal(k->ninputs, 0);
    assert_int_equal(k->noutputs, 2);
    assert_string_equal(k->outputs[0].name, "price");
    assert_string_equal(k->outputs[1].name, "std_error");
    assert_true(k->params[KL_MC_PATHS].max == 1e9);
    assert_true(k->params[KL_MC_STEPS].max == 10000);
    /* Only the option itself is required; the rest has defaults. */
    kl_args a;
    memset(&a, 0, sizeof a);
    a.kernel = k;
    a.params[KL_MC_S0] = (kl_value){.num = 100, .given = 1};
    a.params[KL_MC_STRIKE] = (kl_value){.num = 100, .given = 1};
    a.params[KL_MC_SIGMA] = (kl_value){.num = 0.2, .given = 1};
    a.params[KL_MC_MATURITY] = (kl_value){.num = 1, .given = 1};
    kl_args_defaults(&a);
    kl_err err = {0};
    assert_int_equal(kl_args_check(&a, &err), 0);
    assert_true(a.params[KL_MC_PATHS].num == 1e6 && a.params[KL_MC_STEPS].num == 1);
    a.params[KL_MC_SIGMA].given = 0;
    assert_int_equal(kl_args_check(&a, &err), KL_EINVAL);
    assert_string_equal(err.field, "params.sigma");
}

static void stops_when_cancelled(void **state)
{
    (void)state;
    option o = asian(10000, 1e8); /* hours of work */
    kl_args a = args_of(&o, 0);
    volatile int cancel = 1;
    a.cancel = &cancel;
    kl_tensor out[2];
    kl_err err = {0};
    assert_int_equal(kl_run_cpu(&a, out, &err), KL_ECANCELED);
    assert_null(out[0].data);
    assert_null(out[1].data);
    assert_non_null(strstr(err.message, "cancelled"));
}

/* The threads poll every 65536 path-steps (a millisecond or two); the
 * bound leaves room for a loaded machine. */
static void stops_soon_after_a_cancel_mid_run(void **state)
{
    (void)state;
    option o = asian(5000, 1e8);
    kl_args a = args_of(&o, 0);
    volatile int cancel = 0;
    a.cancel = &cancel;
    kl_tensor out[2];
    kl_err err = {0};
    double took;
    int rc = kl_test_run_cancelled(&a, 50, out, &err, &took);
    assert_int_equal(rc, KL_ECANCELED);
    if (took > 0.05 + 0.2)
        fail_msg("returned %.0f ms after the start, %.0f ms after the cancel", took * 1e3, (took - 0.05) * 1e3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(european_call_and_put_within_3_se_of_black_scholes),
        cmocka_unit_test(european_put_call_parity_holds),
        cmocka_unit_test(asian_call_is_below_european_call),
        cmocka_unit_test(asian_over_one_date_is_european),
        cmocka_unit_test(cpu_matches_naive_double_reference_on_the_same_draws),
        cmocka_unit_test(same_seed_gives_same_bits_on_any_thread_count),
        cmocka_unit_test(zero_sigma_gives_the_discounted_forward_payoff),
        cmocka_unit_test(deep_in_the_money_call_is_the_forward),
        cmocka_unit_test(rejects_parameters_out_of_range_naming_the_field),
        cmocka_unit_test(limits_and_defaults_are_in_the_catalog),
        cmocka_unit_test(stops_when_cancelled),
        cmocka_unit_test(stops_soon_after_a_cancel_mid_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

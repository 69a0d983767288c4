/* support_random.c: splitmix64 and the uniform draws the suites' inputs come from. */
#include "support_random.h"

#include <check.h>
#include <stdlib.h>

static uint64_t next_u64(ts_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ts_uniform(ts_rng *rng, double lo, double hi) {
    return lo + (hi - lo) * ((double)(next_u64(rng) >> 11) * 0x1.0p-53);
}

size_t ts_index(ts_rng *rng, size_t n) {
    /* The modulo bias is below 2^-40 for the small n the tests draw. */
    return (size_t)(next_u64(rng) % (uint64_t)n);
}

void ts_fill_uniform(ts_rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)ts_uniform(rng, lo, hi);
}

float *ts_random_floats(ts_rng *rng, size_t n, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_msg(x != NULL, "out of host memory");
    ts_fill_uniform(rng, x, n, lo, hi);
    return x;
}

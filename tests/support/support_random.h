/* support_random.h: the one seeded generator of test inputs, so every failure reproduces from its seed. */
#ifndef FLASHCL_SUPPORT_RANDOM_H
#define FLASHCL_SUPPORT_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: any seed (0 included) gives a full-quality stream, and the
 * same stream on every machine and compiler. */
typedef struct ts_rng {
    uint64_t state;
} ts_rng;

/* Uniform in [lo, hi), from 53 random bits. */
double ts_uniform(ts_rng *rng, double lo, double hi);
/* Uniform integer in [0, n), n > 0 (for picking strides, offsets, slots). */
size_t ts_index(ts_rng *rng, size_t n);
void ts_fill_uniform(ts_rng *rng, float *x, size_t n, float lo, float hi);
/* n floats uniform in [lo, hi), malloc'ed (n = 0 allowed); fails the test if out of memory. */
float *ts_random_floats(ts_rng *rng, size_t n, float lo, float hi);

#endif

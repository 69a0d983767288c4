/* cli_rng.h: the generators' random numbers (cli_make_inputs, cli_make_kv_cache): xorshift64*, reproducible data
 * without depending on the C library's rand(). One generator per program: the state is the including file's. */
#ifndef FLASHCL_CLI_RNG_H
#define FLASHCL_CLI_RNG_H

#include <stdint.h>

static uint64_t rng_state;

/* Uniform in [0, 1), 53 bits. */
static inline double uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

#endif

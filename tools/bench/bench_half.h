/* bench_half.h: float <-> 16-bit storage conversions (IEEE half, bfloat16) for the bench's host-side data. */
#ifndef FLASHCL_TOOLS_BENCH_HALF_H
#define FLASHCL_TOOLS_BENCH_HALF_H

#include <stdint.h>

/* Round to nearest even; overflow gives infinity, NaN stays NaN. */
uint16_t bench_float_to_half(float value);
uint16_t bench_float_to_bf16(float value);

/* Exact: every half and bfloat16 value is a float. */
float bench_half_to_float(uint16_t bits);
float bench_bf16_to_float(uint16_t bits);

#endif

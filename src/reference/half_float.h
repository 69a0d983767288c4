/* half_float.h: conversions between float and the 16-bit storage formats (IEEE half, bfloat16): the one host-side
 * implementation the tests, the CLI and the bench share. */
#ifndef FLASHCL_REFERENCE_HALF_FLOAT_H
#define FLASHCL_REFERENCE_HALF_FLOAT_H

#include <stdint.h>

/* Exact: every half and bfloat16 value is a float. */
float half_to_float(uint16_t bits);
float bf16_to_float(uint16_t bits);

/* Round to nearest even, as the kernels' stores do; overflow gives
 * infinity and NaN stays NaN. */
uint16_t float_to_half(float value);
uint16_t float_to_bf16(float value);

#endif

/* half_float.c: bit-level float <-> half / bfloat16 conversions, independent of compiler support for _Float16. */
#include "half_float.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const int exponent = (h >> 10) & 0x1f;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
    /* ldexpf is exact here: the subnormal and normal values all fit a float. */
    const float magnitude = exponent == 0 ? ldexpf((float)mantissa, -24)
                                          : ldexpf((float)(mantissa | 0x400u), exponent - 25);
    return sign ? -magnitude : magnitude;
}

uint16_t float_to_half(float value) {
    const uint32_t u = float_bits(value);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t abs_bits = u & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (abs_bits >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: infinity */
    const float magnitude = bits_float(abs_bits);
    /* Scale so the half's last mantissa bit has weight 1, then let the
     * float rounding mode (nearest even) round: nearbyintf does exactly that. */
    int exponent;
    frexpf(magnitude, &exponent); /* magnitude = m * 2^exponent, m in [0.5, 1) */
    int unit_exponent = exponent - 11; /* weight of the half's last mantissa bit */
    if (unit_exponent < -24) unit_exponent = -24; /* subnormals share the smallest unit */
    const uint32_t units = (uint32_t)nearbyintf(ldexpf(magnitude, -unit_exponent));
    if (units == 0) return sign;
    /* units < 2048 (one more than a 10-bit mantissa with its leading 1) unless rounding carried. */
    int e = unit_exponent + 25; /* the half exponent field for a leading 1 at bit 10 */
    uint32_t m = units;
    if (m >= 0x800u) {
        m >>= 1;
        ++e;
    }
    if (m < 0x400u) return (uint16_t)(sign | m); /* subnormal (e is 1, the field is 0) */
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | ((uint32_t)e << 10) | (m & 0x3ffu));
}

float bf16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

uint16_t float_to_bf16(float value) {
    uint32_t u = float_bits(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

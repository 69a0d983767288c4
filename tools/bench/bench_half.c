/* bench_half.c: float <-> IEEE half and bfloat16 by bit manipulation (no cl_khr_fp16 on the host side). */
#include "bench_half.h"

#include <string.h>

static uint32_t float_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

uint16_t bench_float_to_bf16(float value) {
    const uint32_t bits = float_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* quiet NaN */
    /* Adding 0x7fff plus the lowest kept bit rounds half-way cases to even. */
    const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(rounded >> 16);
}

float bench_bf16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

uint16_t bench_float_to_half(float value) {
    const uint32_t bits = float_bits(value);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
    const int exponent = (int)(magnitude >> 23) - 127;
    uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u; /* with the implicit bit */
    int shift;       /* bits of the 24-bit mantissa that do not fit */
    uint32_t base;   /* the half's exponent field, before adding the kept mantissa */
    if (exponent < -25) return sign; /* below half the smallest subnormal: zero */
    if (exponent < -14) {
        shift = 13 + (-14 - exponent); /* subnormal: the implicit bit lands in the fraction */
        base = 0;
    } else {
        shift = 13;
        base = (uint32_t)(exponent + 15) << 10;
        mantissa &= 0x7fffffu;
    }
    uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half_way = 1u << (shift - 1);
    if (rest > half_way || (rest == half_way && (kept & 1u))) kept++;
    /* A carry out of the fraction correctly bumps the exponent field. */
    return (uint16_t)(sign | (base + kept));
}

float bench_half_to_float(uint16_t bits) {
    const uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    uint32_t fraction = bits & 0x3ffu;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (fraction << 13));
    if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (fraction << 13));
    if (fraction == 0) return bits_float(sign);
    /* Subnormal: normalise. */
    int e = -14;
    while (!(fraction & 0x400u)) {
        fraction <<= 1;
        e--;
    }
    fraction &= 0x3ffu;
    return bits_float(sign | ((uint32_t)(e + 127) << 23) | (fraction << 13));
}

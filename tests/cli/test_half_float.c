/* test_half_float.c: Check suite for tools/half_float.c -- exact widening, round-to-nearest-even narrowing. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "half_float.h"

/* Every non-NaN half widens to a float that narrows back to the same bits. */
START_TEST(every_half_round_trips) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = half_to_float((uint16_t)h);
        const int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        if (is_nan) {
            ck_assert_msg(isnan(f), "0x%04x", h);
            ck_assert_msg(isnan(half_to_float(float_to_half(f))), "0x%04x", h);
            continue;
        }
        ck_assert_msg(float_to_half(f) == h, "0x%04x -> %a -> 0x%04x", h, (double)f, float_to_half(f));
    }
}
END_TEST

START_TEST(half_values_are_exact) {
    ck_assert(half_to_float(0x3c00) == 1.0f);
    ck_assert(half_to_float(0xc000) == -2.0f);
    ck_assert(half_to_float(0x7bff) == 65504.0f);
    ck_assert(half_to_float(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    ck_assert(half_to_float(0x03ff) == ldexpf(1023.0f, -24)); /* largest subnormal */
    ck_assert(half_to_float(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    ck_assert(half_to_float(0x3555) == 0.333251953125f);
    ck_assert(isinf(half_to_float(0x7c00)) && half_to_float(0x7c00) > 0);
    ck_assert(isinf(half_to_float(0xfc00)) && half_to_float(0xfc00) < 0);
    ck_assert(signbit(half_to_float(0x8000)) && half_to_float(0x8000) == 0.0f);
}
END_TEST

/* Between adjacent halves a and b: below the midpoint gives a, above gives
 * b, the midpoint itself gives the one with an even mantissa. */
START_TEST(half_rounds_to_nearest_even) {
    for (uint32_t h = 0; h < 0x7bff; h += 7) {
        const float a = half_to_float((uint16_t)h), b = half_to_float((uint16_t)(h + 1));
        const float mid = a + (b - a) * 0.5f; /* exact: one more bit than a half has */
        const uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        ck_assert_msg(float_to_half(mid) == even, "midpoint above 0x%04x", h);
        ck_assert_msg(float_to_half(nextafterf(mid, 0.0f)) == h, "below midpoint above 0x%04x", h);
        ck_assert_msg(float_to_half(nextafterf(mid, INFINITY)) == h + 1, "above midpoint above 0x%04x", h);
        ck_assert_msg(float_to_half(-mid) == (0x8000u | even), "negative midpoint above 0x%04x", h);
    }
}
END_TEST

START_TEST(half_overflow_and_underflow) {
    ck_assert_uint_eq(float_to_half(65519.0f), 0x7bff);
    ck_assert_uint_eq(float_to_half(65520.0f), 0x7c00); /* halfway to 2^16 rounds to even: infinity */
    ck_assert_uint_eq(float_to_half(1e10f), 0x7c00);
    ck_assert_uint_eq(float_to_half(-1e10f), 0xfc00);
    ck_assert_uint_eq(float_to_half(INFINITY), 0x7c00);
    ck_assert_uint_eq(float_to_half(ldexpf(1.0f, -25)), 0x0000);             /* half the smallest subnormal: even */
    ck_assert_uint_eq(float_to_half(ldexpf(1.5f, -25)), 0x0001);             /* above it */
    ck_assert_uint_eq(float_to_half(-ldexpf(1.0f, -30)), 0x8000);            /* signed zero */
    ck_assert_uint_eq(float_to_half(ldexpf(1023.5f, -24)), 0x0400);           /* subnormal rounds up to normal */
    ck_assert(isnan(half_to_float(float_to_half(NAN))));
}
END_TEST

START_TEST(every_bf16_round_trips) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = bf16_to_float((uint16_t)h);
        if (isnan(f)) {
            ck_assert(isnan(bf16_to_float(float_to_bf16(f))));
            continue;
        }
        ck_assert_msg(float_to_bf16(f) == h, "0x%04x", h);
    }
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even) {
    for (uint32_t h = 0; h < 0x7f7f; h += 5) {
        const float a = bf16_to_float((uint16_t)h), b = bf16_to_float((uint16_t)(h + 1));
        const float mid = a + (b - a) * 0.5f; /* (a + b) would overflow near the top */
        const uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        ck_assert_msg(float_to_bf16(mid) == even, "midpoint above 0x%04x", h);
        ck_assert_msg(float_to_bf16(nextafterf(mid, 0.0f)) == h, "below midpoint above 0x%04x", h);
        ck_assert_msg(float_to_bf16(nextafterf(mid, INFINITY)) == h + 1, "above midpoint above 0x%04x", h);
    }
    ck_assert(bf16_to_float(0x3f80) == 1.0f);
    ck_assert(isnan(bf16_to_float(float_to_bf16(NAN))));
}
END_TEST

int main(void) {
    Suite *s = suite_create("half_float");
    TCase *half = tcase_create("half");
    tcase_add_test(half, every_half_round_trips);
    tcase_add_test(half, half_values_are_exact);
    tcase_add_test(half, half_rounds_to_nearest_even);
    tcase_add_test(half, half_overflow_and_underflow);
    suite_add_tcase(s, half);
    TCase *bf16 = tcase_create("bfloat16");
    tcase_add_test(bf16, every_bf16_round_trips);
    tcase_add_test(bf16, bf16_rounds_to_nearest_even);
    suite_add_tcase(s, bf16);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

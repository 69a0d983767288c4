/* test_bench_half.c: the float -> half / bfloat16 rounding the bench, the CLI and the tests share
 * (src/reference/half_float.c), against hand-derived bit patterns and round trips. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half_float.h"

START_TEST(half_rounds_to_nearest_even) {
    const struct { float in; uint16_t bits; } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff},                   /* largest half */
        {65519.0f, 0x7bff},                   /* below the half-way point to 65536 */
        {65520.0f, 0x7c00},                   /* half-way: rounds to even, i.e. infinity */
        {1.0f + 0x1p-11f, 0x3c00},            /* tie, even is down */
        {1.0f + 3 * 0x1p-11f, 0x3c02},        /* tie, even is up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {0x1p-14f, 0x0400},                   /* smallest normal */
        {0x1p-24f, 0x0001},                   /* smallest subnormal */
        {0x1p-25f, 0x0000},                   /* tie between 0 and the smallest subnormal */
        {0x1.8p-25f, 0x0001},
        {0x1.ffcp-15f, 0x0400},               /* 1023.5 subnormal steps: tie, even is up into the normals */
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        ck_assert_msg(float_to_half(cases[i].in) == cases[i].bits, "%a -> %04x, expected %04x", cases[i].in,
                      float_to_half(cases[i].in), cases[i].bits);
    ck_assert((float_to_half(NAN) & 0x7c00) == 0x7c00 && (float_to_half(NAN) & 0x03ff) != 0);
}
END_TEST

START_TEST(half_round_trips_every_value) {
    for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
        const float value = half_to_float((uint16_t)bits);
        if (isnan(value)) {
            ck_assert((bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0);
            continue;
        }
        ck_assert_msg(float_to_half(value) == bits, "%04x -> %a -> %04x", bits, value,
                      float_to_half(value));
    }
    ck_assert(half_to_float(0x0001) == 0x1p-24f);
    ck_assert(half_to_float(0x3555) == 0x1.554p-2f);
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even) {
    const struct { float in; uint16_t bits; } cases[] = {
        {1.0f, 0x3f80},
        {-1.0f, 0xbf80},
        {1.0f + 0x1p-8f, 0x3f80},            /* tie, even is down */
        {1.0f + 3 * 0x1p-8f, 0x3f82},        /* tie, even is up */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, /* just above the tie */
        {0x1.fffffep127f, 0x7f80},           /* the largest float rounds to infinity */
        {INFINITY, 0x7f80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        ck_assert_msg(float_to_bf16(cases[i].in) == cases[i].bits, "%a -> %04x, expected %04x", cases[i].in,
                      float_to_bf16(cases[i].in), cases[i].bits);
    ck_assert(isnan(bf16_to_float(float_to_bf16(NAN))));
    for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
        const float value = bf16_to_float((uint16_t)bits);
        if (!isnan(value)) ck_assert_int_eq(float_to_bf16(value), bits);
    }
}
END_TEST

int main(void) {
    Suite *suite = suite_create("bench_half");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, half_rounds_to_nearest_even);
    tcase_add_test(tc, half_round_trips_every_value);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? 1 : 0;
}

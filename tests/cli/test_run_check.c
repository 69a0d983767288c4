/* test_run_check.c: Check suite for tools/run_check.c -- the NaN/infinity agreement rule, the tolerance floor,
 * the non-finite counts, and a whole backward check whose gradients are ~0 by cancellation. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "attention_reference.h"
#include "run_check.h"

/* One element pair through check_compare (floor 1). */
static check_error compare_pair(double ref, float got) {
    check_error e;
    check_compare(&ref, &got, 1, 1.0, &e);
    return e;
}

START_TEST(nan_on_both_sides_agrees) {
    const check_error e = compare_pair(NAN, NAN);
    ck_assert_uint_eq(e.mismatched, 0);
    ck_assert_uint_eq(e.nonfinite_agreed, 1);
    ck_assert(check_report("O", &e, 1e-5));
}
END_TEST

START_TEST(same_infinity_agrees) {
    ck_assert_uint_eq(compare_pair(INFINITY, INFINITY).mismatched, 0);
    ck_assert_uint_eq(compare_pair(-INFINITY, -INFINITY).mismatched, 0);
    ck_assert_uint_eq(compare_pair(-INFINITY, -INFINITY).nonfinite_agreed, 1);
}
END_TEST

/* Exactly one side non-finite, or opposite infinities, or NaN against an infinity. */
static const struct {
    double ref;
    float got;
} DISAGREEING[] = {
    {NAN, 1.0f}, {1.0, NAN}, {INFINITY, 1.0f}, {1.0, -INFINITY}, {INFINITY, -INFINITY}, {NAN, INFINITY},
    {-INFINITY, NAN}, {1e300, INFINITY}, /* finite in double, overflowed in float: still a mismatch */
};

START_TEST(one_sided_or_different_nonfinite_is_a_mismatch) {
    const check_error e = compare_pair(DISAGREEING[_i].ref, DISAGREEING[_i].got);
    ck_assert_uint_eq(e.mismatched, 1);
    ck_assert_uint_eq(e.nonfinite_agreed, 0);
    ck_assert(!check_report("O", &e, 1.0));
}
END_TEST

START_TEST(nonfinite_pairs_stay_out_of_the_error) {
    const double ref[4] = {NAN, INFINITY, 2.0, -4.0};
    const float got[4] = {NAN, INFINITY, 2.5f, -4.0f};
    check_error e;
    check_compare(ref, got, 4, 0.0, &e);
    ck_assert_double_eq(e.max_abs, 0.5);
    ck_assert_double_eq(e.max_ref, 4.0);
    ck_assert_double_eq_tol(e.relative, 0.125, 1e-15);
    ck_assert_uint_eq(e.nonfinite_agreed, 2);
}
END_TEST

/* The case seen in practice: a reference of 1e-16 (cancellation in double)
 * and float rounding of 1e-7 gave a relative error of 1e9. */
START_TEST(floor_keeps_near_zero_outputs_from_failing) {
    const double ref[2] = {1.2e-16, -3e-17};
    const float got[2] = {8.9e-8f, 1e-8f};
    check_error e;
    check_compare(ref, got, 2, 0.0, &e);
    ck_assert(!check_report("dQ", &e, 1e-4)); /* purely relative: fails */
    check_compare(ref, got, 2, 0.8, &e);
    ck_assert_double_eq_tol(e.relative, 8.9e-8 / 0.8, 1e-12);
    ck_assert(check_report("dQ", &e, 1e-4));
}
END_TEST

START_TEST(floor_does_not_hide_a_real_error) {
    const double ref[2] = {1e-16, 0.0};
    const float got[2] = {0.01f, 0.0f}; /* 1% of the floor */
    check_error e;
    check_compare(ref, got, 2, 1.0, &e);
    ck_assert(!check_report("dQ", &e, 1e-4));
}
END_TEST

START_TEST(floor_below_max_ref_changes_nothing) {
    const double ref[2] = {10.0, -2.0};
    const float got[2] = {10.001f, -2.0f};
    check_error e;
    check_compare(ref, got, 2, 1.0, &e);
    ck_assert_double_eq_tol(e.relative, fabs((double)10.001f - 10.0) / 10.0, 1e-12);
}
END_TEST

START_TEST(counts_nonfinite_values_of_every_dtype) {
    size_t nan, inf;
    const float f32[5] = {NAN, INFINITY, -INFINITY, 0.0f, 1.0f};
    check_count_nonfinite(f32, FLASHCL_DTYPE_F32, 5, &nan, &inf);
    ck_assert_uint_eq(nan, 1);
    ck_assert_uint_eq(inf, 2);
    /* f16: 0x7c00 +inf, 0xfc00 -inf, 0x7e00 and 0xfe01 NaN, 0x7bff the largest finite. */
    const uint16_t f16[5] = {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7bff};
    check_count_nonfinite(f16, FLASHCL_DTYPE_F16, 5, &nan, &inf);
    ck_assert_uint_eq(nan, 2);
    ck_assert_uint_eq(inf, 2);
    /* bf16: 0x7f80 +inf, 0x7fc0 NaN, 0xff81 NaN, 0x7f7f the largest finite. */
    const uint16_t bf16[4] = {0x7f80, 0x7fc0, 0xff81, 0x7f7f};
    check_count_nonfinite(bf16, FLASHCL_DTYPE_BF16, 4, &nan, &inf);
    ck_assert_uint_eq(nan, 2);
    ck_assert_uint_eq(inf, 1);
    ck_assert_uint_eq(check_note_nonfinite("O", f32, FLASHCL_DTYPE_F32, 5), 3);
    ck_assert_uint_eq(check_note_nonfinite("O", f32 + 3, FLASHCL_DTYPE_F32, 2), 0);
}
END_TEST

START_TEST(floors_follow_the_documented_rule) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 2, 2, 4);
    float q[8], k[8], v[8], dout[8];
    for (int i = 0; i < 8; ++i) {
        q[i] = 3.0f;
        k[i] = (i % 2) ? 2.0f : -2.0f;
        v[i] = 0.5f;
        dout[i] = (i == 0) ? NAN : 4.0f; /* non-finite elements are left out of the rms */
    }
    const check_inputs in = {.q = q, .k = k, .v = v, .dout = dout};
    check_floors f;
    check_floors_of(&d, &in, &f);
    const double scale = 0.5; /* 1/sqrt(4) */
    ck_assert_double_eq_tol(f.o, 0.5, 1e-12);
    ck_assert_double_eq(f.lse, 1.0);
    ck_assert_double_eq_tol(f.dv, 4.0, 1e-12);
    ck_assert_double_eq_tol(f.dq, scale * 2.0 * 4.0 * 0.5 * 2.0, 1e-12);
    ck_assert_double_eq_tol(f.dk, scale * 2.0 * 4.0 * 0.5 * 3.0, 1e-12);
}
END_TEST

/* xorshift64*: reproducible inputs. */
static uint64_t rng_state = 88172645463325252ull;
static float random_value(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* All V rows equal: dP = dO V^T equals D = rowsum(dO * O) in every row, so
 * dQ and dK are exactly 0 and any float computation gives rounding noise.
 * The float reference stands in for a device: its gradients must pass. */
START_TEST(backward_with_equal_value_rows_passes) {
    enum { B = 1, H = 2, SQ = 13, SK = 17, D = 24 };
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, B, H, SQ, SK, D);
    static float q[B * H * SQ * D], k[B * H * SK * D], v[B * H * SK * D], dout[B * H * SQ * D];
    static float row[D], got_dq[B * H * SQ * D], got_dk[B * H * SK * D], got_dv[B * H * SK * D];
    static double dq[B * H * SQ * D], dk[B * H * SK * D], dv[B * H * SK * D];
    for (int i = 0; i < D; ++i) row[i] = random_value();
    for (int i = 0; i < B * H * SQ * D; ++i) q[i] = random_value(), dout[i] = random_value();
    for (int i = 0; i < B * H * SK * D; ++i) k[i] = random_value(), v[i] = row[i % D];
    ck_assert_int_eq(flashcl_reference_backward(&d, FLASHCL_REF_FLOAT, q, k, v, dout, dq, dk, dv), 0);
    for (int i = 0; i < B * H * SQ * D; ++i) got_dq[i] = (float)dq[i];
    for (int i = 0; i < B * H * SK * D; ++i) got_dk[i] = (float)dk[i], got_dv[i] = (float)dv[i];
    const check_inputs in = {.q = q, .k = k, .v = v, .dout = dout};
    ck_assert_int_eq(check_backward(&d, &in, got_dq, got_dk, got_dv, 0.0), 1);
    /* An error of 1% of the floor in one element of dQ still fails. */
    check_floors f;
    check_floors_of(&d, &in, &f);
    got_dq[5] += (float)(0.01 * f.dq);
    ck_assert_int_eq(check_backward(&d, &in, got_dq, got_dk, got_dv, 0.0), 0);
}
END_TEST

static Suite *run_check_suite(void) {
    Suite *s = suite_create("run_check");
    TCase *nonfinite = tcase_create("non-finite agreement");
    tcase_add_test(nonfinite, nan_on_both_sides_agrees);
    tcase_add_test(nonfinite, same_infinity_agrees);
    tcase_add_loop_test(nonfinite, one_sided_or_different_nonfinite_is_a_mismatch, 0,
                        (int)(sizeof DISAGREEING / sizeof DISAGREEING[0]));
    tcase_add_test(nonfinite, nonfinite_pairs_stay_out_of_the_error);
    tcase_add_test(nonfinite, counts_nonfinite_values_of_every_dtype);
    suite_add_tcase(s, nonfinite);
    TCase *floor_rule = tcase_create("tolerance floor");
    tcase_add_test(floor_rule, floor_keeps_near_zero_outputs_from_failing);
    tcase_add_test(floor_rule, floor_does_not_hide_a_real_error);
    tcase_add_test(floor_rule, floor_below_max_ref_changes_nothing);
    tcase_add_test(floor_rule, floors_follow_the_documented_rule);
    tcase_add_test(floor_rule, backward_with_equal_value_rows_passes);
    suite_add_tcase(s, floor_rule);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(run_check_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

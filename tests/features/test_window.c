/* test_window.c: sliding-window attention, forward and backward, against the reference with the equivalent dense mask. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"

typedef struct window_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, left, right;
} window_case;

/* Odd shapes around tile sizes; Sq > Sk leaves top rows with no key. */
static const window_case cases[] = {
    {"1x239 d16 left 16", 1, 1, 1, 1, 239, 16, 0, 16, -1},
    {"113x203 d40 gqa 32,8", 2, 4, 2, 113, 203, 40, 0, 32, 8},
    {"128x217 d64 causal left 50", 1, 2, 2, 128, 217, 64, 1, 50, -1},
    {"255x256 d59 right 3 only", 1, 2, 1, 255, 256, 59, 0, -1, 3},
    {"300x100 d32 10,10 masked rows", 1, 2, 2, 300, 100, 32, 0, 10, 10},
    {"97x97 d80 causal right 5 = causal", 1, 1, 1, 97, 97, 80, 1, 0, 5},
};

static fh_case case_of(const window_case *w) {
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = w->name;
    flashcl_attention_desc_init(&c.desc, w->batch, w->heads_q, w->seqlen_q, w->seqlen_k, w->head_dim);
    c.desc.heads_kv = w->heads_kv;
    c.desc.causal = w->causal;
    c.desc.sliding_window = 1;
    c.desc.window_left = w->left;
    c.desc.window_right = w->right;
    return c;
}

START_TEST(test_window_matches_dense_mask) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    const fh_case c = case_of(&cases[_i]);
    flashcl_context *ctx = ts_context();
    fh_inputs in;
    fh_inputs_make(&c, 11 + (uint64_t)_i, &in);
    fh_result r;
    fh_run(ctx, &c, &in, 1, &r);
    uint8_t *mask = fh_dense_mask(&c);
    fh_check(&c, &in, &r, 1, mask, NULL);
    free(mask);
    fh_result_free(&r);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* Forced plans with small tiles (many skipped and boundary tiles) must all
 * match the reference. */
START_TEST(test_window_forced_plans) {
    const window_case w = {"200x180 d32 window 20,7 forced", 1, 2, 1, 200, 180, 32, 0, 20, 7};
    const fh_case c = case_of(&w);
    fh_check_forced_plans(&c, 5);
}
END_TEST

/* Key rows no query can see, in tiles wholly outside the band, hold NaN:
 * if such a tile were loaded and computed, NaN would reach O or the
 * gradients. The result must be bitwise that of zeros in those rows. */
START_TEST(test_window_skips_tiles_outside_band) {
    const window_case w = {"16x512 d32 left 32", 1, 1, 1, 16, 512, 32, 0, 32, 0};
    const fh_case c = case_of(&w);
    fh_inputs in;
    fh_inputs_make(&c, 9, &in);
    flashcl_context *ctx = ts_context();
    const int hidden = 256; /* keys 0..255: below every band and every tile boundary (tiles <= 128) */
    for (size_t x = 0; x < (size_t)hidden * 32; ++x) in.k[x] = in.v[x] = 0.0f;
    fh_result zeros, poisoned;
    fh_run(ctx, &c, &in, 1, &zeros);
    for (size_t x = 0; x < (size_t)hidden * 32; ++x) in.k[x] = in.v[x] = NAN;
    fh_run(ctx, &c, &in, 1, &poisoned);
    ck_assert(memcmp(zeros.o, poisoned.o, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.lse, poisoned.lse, in.lse_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dq, poisoned.dq, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dk, poisoned.dk, in.kv_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dv, poisoned.dv, in.kv_count * sizeof(float)) == 0);
    fh_result_free(&zeros);
    fh_result_free(&poisoned);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* Window fields 0,0 without sliding_window set mean nothing: the result is
 * plain dense attention, forward and backward. */
START_TEST(test_zero_window_fields_are_no_window) {
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = "zero window fields";
    /* A desc starts from its _init (a zero-filled one has no struct_size and is refused, tests/abi); the
     * window sides are then zeroed as a zero fill would leave them. */
    flashcl_attention_desc_init(&c.desc, 1, 2, 45, 70, 32);
    c.desc.window_left = c.desc.window_right = 0;
    flashcl_context *ctx = ts_context();
    fh_inputs in;
    fh_inputs_make(&c, 99, &in);
    fh_result r;
    fh_run(ctx, &c, &in, 1, &r);
    fh_check(&c, &in, &r, 1, NULL, NULL);
    fh_result_free(&r);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* A side at or near INT_MAX means the same as an unbounded one (no key is
 * that far away): forward and backward must equal the reference with the
 * equivalent dense mask, and bitwise the call with that side -1, instead of
 * overflowing the kernels' 32-bit band bounds into an empty band. */
static const window_case wide_cases[] = {
    {"37x53 d16 gqa window 4,INT_MAX", 1, 4, 2, 37, 53, 16, 0, 4, 2147483647},
    {"53x37 d16 window INT_MAX,3", 2, 2, 2, 53, 37, 16, 0, 2147483647, 3},
    {"40x40 d32 causal window INT_MAX,INT_MAX", 1, 2, 1, 40, 40, 32, 1, 2147483647, 2147483647},
    {"30x70 d16 window INT_MAX-1,1000000000", 1, 1, 1, 30, 70, 16, 0, 2147483646, 1000000000},
};

START_TEST(test_window_wide_sides_are_unbounded) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    const window_case *w = &wide_cases[_i];
    const fh_case c = case_of(w);
    window_case unbounded = *w;
    if (unbounded.left > 1000) unbounded.left = -1;
    if (unbounded.right > 1000) unbounded.right = -1;
    const fh_case u = case_of(&unbounded);
    flashcl_context *ctx = ts_context();
    fh_inputs in;
    fh_inputs_make(&c, 31 + (uint64_t)_i, &in);
    fh_result r, ru;
    fh_run(ctx, &c, &in, 1, &r);
    fh_run(ctx, &u, &in, 1, &ru);
    uint8_t *mask = fh_dense_mask(&c);
    fh_check(&c, &in, &r, 1, mask, NULL);
    ck_assert_msg(memcmp(r.o, ru.o, in.q_count * sizeof(float)) == 0, "%s: O differs from the unbounded side's", w->name);
    ck_assert(memcmp(r.lse, ru.lse, in.lse_count * sizeof(float)) == 0);
    ck_assert(memcmp(r.dq, ru.dq, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(r.dk, ru.dk, in.kv_count * sizeof(float)) == 0);
    ck_assert(memcmp(r.dv, ru.dv, in.kv_count * sizeof(float)) == 0);
    free(mask);
    fh_result_free(&r);
    fh_result_free(&ru);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* With a window the kernels' band bounds reach seqlen_q + 2 * seqlen_k and
 * 2 * seqlen_q + seqlen_k: lengths that would overflow them are refused
 * (UNSUPPORTED) before the tensors are looked at; without a window the same
 * lengths pass the desc check. */
START_TEST(test_window_length_bound) {
    flashcl_context *ctx = ts_context();
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor t = {m, 0, 0, 0, 1};
    static const int lengths[2][2] = {{1, 1 << 30}, {1 << 30, 1}};
    for (int i = 0; i < 2; ++i) {
        flashcl_attention_desc d;
        flashcl_attention_desc_init(&d, 1, 1, lengths[i][0], lengths[i][1], 1);
        d.sliding_window = 1;
        d.window_left = 8;
        ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "window"));
        d.sliding_window = 0;
        ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    }
    clReleaseMemObject(m);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_window_bad_values_rejected) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 8, 8, 16);
    d.sliding_window = 1;
    d.window_left = -2;
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor t = flashcl_tensor_contiguous(m, FLASHCL_LAYOUT_BHSD, 1, 8, 16);
    const flashcl_tensor o = {m, 512, 128, 128, 16};
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "window"));
    d.window_left = 3;
    d.window_right = -5;
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    /* The standard implementation has no window: refused, not ignored. */
    d.window_right = 0;
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "standard"));
    clReleaseMemObject(m);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *window_suite(void) {
    Suite *s = suite_create("window");
    TCase *tc = tcase_create("window");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_window_matches_dense_mask, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_window_forced_plans);
    tcase_add_test(tc, test_window_skips_tiles_outside_band);
    tcase_add_loop_test(tc, test_window_wide_sides_are_unbounded, 0, (int)(sizeof wide_cases / sizeof wide_cases[0]));
    tcase_add_test(tc, test_window_length_bound);
    tcase_add_test(tc, test_window_bad_values_rejected);
    tcase_add_test(tc, test_zero_window_fields_are_no_window);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("window");
    SRunner *runner = srunner_create(window_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

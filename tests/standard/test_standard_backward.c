/* test_standard_backward.c: the standard implementation's backward (through flashcl_backward) against the CPU reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct bwd_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    flashcl_layout layout;
    size_t offset, pad;
} bwd_case;

static const bwd_case cases[] = {
    {"1x1", 1, 1, 1, 1, 1, 8, 0, FLASHCL_LAYOUT_BHSD, 0, 0},
    {"37x53 causal", 1, 2, 2, 37, 53, 16, 1, FLASHCL_LAYOUT_BHSD, 0, 0},
    {"29x31 d40 gqa bshd", 2, 4, 2, 29, 31, 40, 0, FLASHCL_LAYOUT_BSHD, 3, 0},
    {"48x20 causal masked rows mqa", 1, 3, 1, 48, 20, 32, 1, FLASHCL_LAYOUT_BHSD, 0, 1},
    {"70x64 d59 causal bshd", 1, 2, 2, 70, 64, 59, 1, FLASHCL_LAYOUT_BSHD, 1, 0},
};

/* Gradients can cancel exactly (one key: dS = dP - D = 0), where the float
 * reference happens to round both terms alike and the rule's relative floor
 * is 0; an absolute floor of a few float ulps of the O(1) terms covers it. */
#define GRADIENT_ABSOLUTE_FLOOR 1e-6

/* The tolerance rule with k per gradient (dQ loosest) and the relative target. */
static void check_gradient(const char *label, const char *name, const float *got, const double *ref,
                           const double *low, size_t n, double k) {
    ts_error e;
    const int ok = ts_compare(got, ref, low, n, k, &e);
    ck_assert_msg(e.nonfinite == 0, "%s: %s has %zu non-finite values", label, name, e.nonfinite);
    ck_assert_msg(ok || e.max_err <= e.bound + GRADIENT_ABSOLUTE_FLOOR,
                  "%s: %s max error %.3g at %zu exceeds %g x low-precision error %.3g + floor (%.3g)", label, name,
                  e.max_err, e.worst, k, e.max_low_err, e.bound);
    ck_assert_msg(e.max_err <= 5e-4 * e.max_ref + GRADIENT_ABSOLUTE_FLOOR,
                  "%s: %s max error %.3g above 5e-4 x max |ref| %.3g", label, name, e.max_err, e.max_ref);
}

START_TEST(test_backward_matches_reference) {
    const bwd_case *c = &cases[_i];
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, c->batch, c->heads_q, c->seqlen_q, c->seqlen_k, c->head_dim);
    desc.heads_kv = c->heads_kv;
    desc.causal = c->causal;
    const size_t B = (size_t)c->batch, Hq = (size_t)c->heads_q, Hkv = (size_t)c->heads_kv;
    const size_t Sq = (size_t)c->seqlen_q, Sk = (size_t)c->seqlen_k, D = (size_t)c->head_dim;
    const size_t nq = B * Hq * Sq * D, nkv = B * Hkv * Sk * D;

    float *q = malloc(nq * sizeof *q), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
    float *dout = malloc(nq * sizeof *dout);
    ts_rng rng = {4242u + (uint64_t)_i};
    ts_fill_uniform(&rng, q, nq, -1.0f, 1.0f);
    ts_fill_uniform(&rng, k, nkv, -1.0f, 1.0f);
    ts_fill_uniform(&rng, v, nkv, -1.0f, 1.0f);
    ts_fill_uniform(&rng, dout, nq, -1.0f, 1.0f);

    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement place = {c->layout, c->offset, c->pad};
    const ts_placement lse_place = {FLASHCL_LAYOUT_BHSD, c->offset, 0};
    ts_tensor tq, tk, tv, tdo, to, tlse, tdq, tdk, tdv;
    ts_tensor_create(&tq, context, &place, B, Hq, Sq, D, FLASHCL_DTYPE_F32, q);
    ts_tensor_create(&tk, context, &place, B, Hkv, Sk, D, FLASHCL_DTYPE_F32, k);
    ts_tensor_create(&tv, context, &place, B, Hkv, Sk, D, FLASHCL_DTYPE_F32, v);
    ts_tensor_create(&tdo, context, &place, B, Hq, Sq, D, FLASHCL_DTYPE_F32, dout);
    ts_tensor_create(&to, context, &place, B, Hq, Sq, D, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&tlse, context, &lse_place, B, Hq, Sq, 1, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&tdq, context, &place, B, Hq, Sq, D, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&tdk, context, &place, B, Hkv, Sk, D, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&tdv, context, &place, B, Hkv, Sk, D, FLASHCL_DTYPE_F32, NULL);

    flashcl_status status =
        flashcl_forward(ctx, &desc, &tq.view, &tk.view, &tv.view, &to.view, &tlse.view, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "forward: %s", flashcl_last_error(ctx));
    status = flashcl_backward(ctx, &desc, &tq.view, &tk.view, &tv.view, &to.view, &tlse.view, &tdo.view, &tdq.view,
                              &tdk.view, &tdv.view, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "backward: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);

    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.impl, FLASHCL_IMPL_STANDARD);
    ck_assert_int_eq(stats.pass, FLASHCL_PASS_BACKWARD);
    ck_assert_uint_eq(stats.extra_device_bytes, 2 * B * Hq * Sq * Sk * sizeof(float));
    double predicted = 0.0;
    ck_assert_int_eq(flashcl_predict_global_bytes(ctx, FLASHCL_IMPL_STANDARD, FLASHCL_PASS_BACKWARD, &desc,
                                                  &predicted),
                     FLASHCL_SUCCESS);
    ck_assert(predicted > 0.0 && predicted == stats.predicted_global_bytes);

    ts_tensor *outs[3] = {&tdq, &tdk, &tdv};
    const char *names[3] = {"dQ", "dK", "dV"};
    float *got[3];
    for (int i = 0; i < 3; ++i) {
        ts_tensor_read(queue, outs[i]);
        ts_assert_written_exactly(outs[i], names[i]);
        got[i] = malloc((i == 0 ? nq : nkv) * sizeof(float));
        ts_tensor_gather(outs[i], got[i]);
    }
    ts_assert_untouched(queue, &tq, "Q (an input)");
    ts_assert_untouched(queue, &tdo, "dO (an input)");

    double *ref[3], *low[3];
    for (int i = 0; i < 3; ++i) {
        ref[i] = malloc((i == 0 ? nq : nkv) * sizeof(double));
        low[i] = malloc((i == 0 ? nq : nkv) * sizeof(double));
    }
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_DOUBLE, q, k, v, dout, ref[0], ref[1], ref[2]), 0);
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_FLOAT, q, k, v, dout, low[0], low[1], low[2]), 0);
    check_gradient(c->name, "dQ", got[0], ref[0], low[0], nq, 5.0);
    check_gradient(c->name, "dK", got[1], ref[1], low[1], nkv, 4.0);
    check_gradient(c->name, "dV", got[2], ref[2], low[2], nkv, 4.0);

    /* Fully masked query rows get exactly zero dQ. */
    if (c->causal && Sq > Sk)
        for (size_t bh = 0; bh < B * Hq; ++bh)
            for (size_t i = 0; i < Sq - Sk; ++i)
                for (size_t d = 0; d < D; ++d)
                    ck_assert_msg(got[0][(bh * Sq + i) * D + d] == 0.0f, "%s: dQ of masked row %zu is not 0",
                                  c->name, i);

    /* Same inputs, bitwise the same gradients. */
    status = flashcl_backward(ctx, &desc, &tq.view, &tk.view, &tv.view, &to.view, &tlse.view, &tdo.view, &tdq.view,
                              &tdk.view, &tdv.view, 0, NULL, NULL);
    ck_assert_int_eq(status, FLASHCL_SUCCESS);
    for (int i = 0; i < 3; ++i) {
        const size_t n = i == 0 ? nq : nkv;
        float *again = malloc(n * sizeof *again);
        ts_tensor_read(queue, outs[i]);
        ts_tensor_gather(outs[i], again);
        ck_assert_msg(memcmp(again, got[i], n * sizeof *again) == 0, "%s: %s differs run to run", c->name, names[i]);
        free(again);
    }

    for (int i = 0; i < 3; ++i) free(got[i]), free(ref[i]), free(low[i]);
    ts_tensor *all[] = {&tq, &tk, &tv, &tdo, &to, &tlse, &tdq, &tdk, &tdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ts_tensor_free(all[i]);
    free(q), free(k), free(v), free(dout);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *standard_backward_suite(void) {
    Suite *s = suite_create("standard_backward");
    TCase *tc = tcase_create("accuracy");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_backward_matches_reference, 0, (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(standard_backward_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* test_varlen.c: packed variable-length batches, forward and backward, against each sequence run alone through the dense API. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"

/* Odd lengths around tile sizes, empty sequences on either side, GQA,
 * Sq != Sk per sequence (bottom-right alignment), a desc maximum above the
 * real one, and window + dropout applied per sequence. */
static const fh_varlen_case cases[] = {
    {"1,37,64,0,100 d32", 5, 2, 2, 32, 0, {1, 37, 64, 0, 100}, {1, 37, 64, 0, 100}, 0, -1, -1, 0.0f},
    {"1,37,64,0,100 d40 causal gqa", 5, 4, 2, 40, 1, {1, 37, 64, 0, 100}, {1, 37, 64, 0, 100}, 0, -1, -1, 0.0f},
    {"q!=k causal mqa d64 empty k", 4, 2, 1, 64, 1, {5, 70, 0, 33}, {50, 20, 9, 0}, 7, -1, -1, 0.0f},
    {"window 16,4 dropout 0.2 d16", 3, 2, 2, 16, 0, {60, 3, 129}, {80, 3, 100}, 0, 16, 4, 0.2f},
    {"single long causal d59", 2, 3, 1, 59, 1, {200, 17}, {200, 130}, 0, -1, -1, 0.0f},
};

/* The shared library's buffers and read-back, on a context. */
static cl_mem device_copy(flashcl_context *ctx, const void *host, size_t bytes) {
    return ts_buffer(flashcl_context_cl_context(ctx), bytes, host);
}

static cl_mem nan_buffer(flashcl_context *ctx, size_t count) { /* poisoned: unwritten elements stay NaN */
    return ts_buffer(flashcl_context_cl_context(ctx), count * sizeof(float), NULL);
}

static float *read_back(flashcl_context *ctx, cl_mem m, size_t count) {
    return ts_read_floats(flashcl_context_queue(ctx), m, count);
}

START_TEST(test_varlen_matches_sequences_alone) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    const fh_varlen_case *v = &cases[_i];
    const int n = v->batch, H = v->heads_q, Hk = v->heads_kv, D = v->head_dim;
    int cu_q[FH_MAX_SEQS + 1], cu_k[FH_MAX_SEQS + 1];
    const int total_q = fh_cu_offsets(v->len_q, n, cu_q), total_k = fh_cu_offsets(v->len_k, n, cu_k);
    const size_t nq = (size_t)total_q * H * D, nk = (size_t)total_k * Hk * D, nl = (size_t)total_q * H;
    ts_rng rng = {77u + (uint64_t)_i};
    float *q = ts_random_floats(&rng, nq, -1.0f, 1.0f), *k = ts_random_floats(&rng, nk, -1.0f, 1.0f);
    float *vv = ts_random_floats(&rng, nk, -1.0f, 1.0f), *dout = ts_random_floats(&rng, nq, -1.0f, 1.0f);

    flashcl_context *ctx = ts_context();
    if (_i % 2 == 0) { /* small tiles: many blocks past the shorter sequences' ends */
        const flashcl_plan forward_plan = {16, 16, 4, 4, 0, 0}, backward_plan = {16, 16, 4, 4, 0, 0};
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forward_plan), FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, &backward_plan), FLASHCL_SUCCESS);
    }
    const flashcl_attention_desc d =
        fh_varlen_desc(v, n, fh_max_len(v->len_q, n) + v->extra_max, fh_max_len(v->len_k, n) + v->extra_max, 1234);
    cl_mem mq = device_copy(ctx, q, nq * 4), mk = device_copy(ctx, k, nk * 4), mv = device_copy(ctx, vv, nk * 4);
    cl_mem mdo = device_copy(ctx, dout, nq * 4);
    cl_mem mo = nan_buffer(ctx, nq), ml = nan_buffer(ctx, nl), mdq = nan_buffer(ctx, nq), mdk = nan_buffer(ctx, nk),
           mdv = nan_buffer(ctx, nk);
    cl_mem mcq = device_copy(ctx, cu_q, sizeof(int) * (size_t)(n + 1));
    cl_mem mck = device_copy(ctx, cu_k, sizeof(int) * (size_t)(n + 1));
    /* Packed (total, heads, dim); LSE (heads_q, total_q). Batch strides are ignored: give a wrong one. */
    const flashcl_tensor tq = {mq, 0, 12345, (size_t)D, (size_t)H * D}, to = {mo, 0, 0, (size_t)D, (size_t)H * D};
    const flashcl_tensor tdo = {mdo, 0, 0, (size_t)D, (size_t)H * D}, tdq = {mdq, 0, 0, (size_t)D, (size_t)H * D};
    const flashcl_tensor tk = {mk, 0, 0, (size_t)D, (size_t)Hk * D}, tv = {mv, 0, 0, (size_t)D, (size_t)Hk * D};
    const flashcl_tensor tdk = {mdk, 0, 0, (size_t)D, (size_t)Hk * D}, tdv = {mdv, 0, 0, (size_t)D, (size_t)Hk * D};
    const flashcl_tensor tl = {ml, 0, 0, (size_t)total_q, 1};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = mcq;
    ex.cu_seqlens_k = mck;
    ck_assert_msg(flashcl_forward_ex(ctx, &d, &ex, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, &d, &ex, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    float *o = read_back(ctx, mo, nq), *lse = read_back(ctx, ml, nl), *dq = read_back(ctx, mdq, nq);
    float *dk = read_back(ctx, mdk, nk), *dv = read_back(ctx, mdv, nk);

    for (int b = 0; b < n; ++b) {
        const int lq = v->len_q[b], lk = v->len_k[b];
        const float *sq = q + (size_t)cu_q[b] * H * D, *sdo = dout + (size_t)cu_q[b] * H * D;
        const float *sk = k + (size_t)cu_k[b] * Hk * D, *sv = vv + (size_t)cu_k[b] * Hk * D;
        const size_t cq = (size_t)lq * H * D, ck = (size_t)lk * Hk * D;
        if (lq == 0 || lk == 0) { /* no dense equivalent: the definitions */
            for (size_t i = 0; i < cq; ++i) {
                fh_expect_close_in_sequence(v->name, "O (no keys)", b, i, o[(size_t)cu_q[b] * H * D + i], 0.0f);
                fh_expect_close_in_sequence(v->name, "dQ (no keys)", b, i, dq[(size_t)cu_q[b] * H * D + i], 0.0f);
            }
            for (int h = 0; h < H; ++h)
                for (int i = 0; i < lq; ++i)
                    fh_expect_close_in_sequence(v->name, "LSE (no keys)", b, (size_t)i, lse[(size_t)h * total_q + cu_q[b] + i],
                                 -INFINITY);
            for (size_t i = 0; i < ck; ++i) {
                fh_expect_close_in_sequence(v->name, "dK (no queries)", b, i, dk[(size_t)cu_k[b] * Hk * D + i], 0.0f);
                fh_expect_close_in_sequence(v->name, "dV (no queries)", b, i, dv[(size_t)cu_k[b] * Hk * D + i], 0.0f);
            }
            continue;
        }
        flashcl_attention_desc alone = fh_varlen_desc(v, 1, lq, lk, 1234);
        alone.dropout_offset = (uint64_t)b * (uint64_t)H; /* the packed call's mask of sequence b */
        float *ro = malloc(cq * 4), *rl = malloc((size_t)H * lq * 4), *rdq = malloc(cq * 4);
        float *rdk = malloc(ck * 4), *rdv = malloc(ck * 4);
        ck_assert_msg(flashcl_backward_host(ctx, &alone, FLASHCL_LAYOUT_BSHD, sq, sk, sv, sdo, ro, rl, rdq, rdk,
                                            rdv) == FLASHCL_SUCCESS,
                      "%s", flashcl_last_error(ctx));
        for (size_t i = 0; i < cq; ++i) {
            fh_expect_close_in_sequence(v->name, "O", b, i, o[(size_t)cu_q[b] * H * D + i], ro[i]);
            fh_expect_close_in_sequence(v->name, "dQ", b, i, dq[(size_t)cu_q[b] * H * D + i], rdq[i]);
        }
        for (int h = 0; h < H; ++h)
            for (int i = 0; i < lq; ++i)
                fh_expect_close_in_sequence(v->name, "LSE", b, (size_t)i, lse[(size_t)h * total_q + cu_q[b] + i],
                             rl[(size_t)h * lq + i]);
        for (size_t i = 0; i < ck; ++i) {
            fh_expect_close_in_sequence(v->name, "dK", b, i, dk[(size_t)cu_k[b] * Hk * D + i], rdk[i]);
            fh_expect_close_in_sequence(v->name, "dV", b, i, dv[(size_t)cu_k[b] * Hk * D + i], rdv[i]);
        }
        free(ro), free(rl), free(rdq), free(rdk), free(rdv);
    }
    free(o), free(lse), free(dq), free(dk), free(dv);
    cl_mem all[] = {mq, mk, mv, mdo, mo, ml, mdq, mdk, mdv, mcq, mck};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    free(q), free(k), free(vv), free(dout);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_varlen_bad_inputs_rejected) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 1, 8, 8, 16);
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem o_buf = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const int good[3] = {0, 5, 12}, decreasing[3] = {0, 6, 4}, not_zero[3] = {1, 5, 12}, too_long[3] = {0, 9, 12};
    cl_mem cu_good = device_copy(ctx, good, sizeof good), cu_dec = device_copy(ctx, decreasing, sizeof decreasing);
    cl_mem cu_nz = device_copy(ctx, not_zero, sizeof not_zero), cu_long = device_copy(ctx, too_long, sizeof too_long);
    const flashcl_tensor t = {m, 0, 0, 16, 16}, o = {o_buf, 0, 0, 16, 16};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);

    ex.cu_seqlens_q = cu_good; /* only one of the two */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "cu_seqlens_k"));
    ex.cu_seqlens_q = NULL;
    ex.cu_seqlens_k = cu_good;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);

    ex.cu_seqlens_q = cu_dec; /* non-monotonic */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "non-decreasing"));
    ex.cu_seqlens_q = cu_nz; /* does not start at 0 */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ex.cu_seqlens_q = cu_long; /* a sequence longer than desc->seqlen_q */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);

    /* Packed tensors too small for the totals. */
    ex.cu_seqlens_q = cu_good;
    d.head_dim = 16;
    const flashcl_tensor wide = {m, 0, 0, 16, 400};
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &wide, &t, &t, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);

    /* Fine as it is on the flash implementation... */
    ck_assert_msg(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    /* ...refused by the standard implementation (a block mask with it: test_varlen_block_mask.c). */
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "variable-length"));
    cl_mem all[] = {m, o_buf, cu_good, cu_dec, cu_nz, cu_long};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

/* The kernels read cu_seqlens while they write the outputs: an output (O,
 * LSE, dQ, dK, dV) overlapping either offsets array is refused with
 * FLASHCL_ERROR_ALIASING before anything runs, and the offsets stay intact. */
START_TEST(test_varlen_outputs_overlapping_cu_seqlens_rejected) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 1, 8, 8, 16);
    const int cu[3] = {0, 5, 12};
    float *zeros = calloc(1024, sizeof *zeros);
    ck_assert_ptr_nonnull(zeros);
    cl_mem in = device_copy(ctx, zeros, 1024 * sizeof(float));
    /* Each of these buffers holds an offsets array in its first 12 bytes and room for a view after it. */
    cl_mem shared_q = device_copy(ctx, zeros, 1024 * sizeof(float)), shared_k = device_copy(ctx, zeros, 1024 * sizeof(float));
    cl_mem outputs = device_copy(ctx, zeros, 1024 * sizeof(float)), cu_alone = device_copy(ctx, cu, sizeof cu);
    free(zeros);
    cl_command_queue queue = flashcl_context_queue(ctx);
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, shared_q, CL_TRUE, 0, sizeof cu, cu, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, shared_k, CL_TRUE, 0, sizeof cu, cu, 0, NULL, NULL), CL_SUCCESS);
    /* Packed views of 12 rows of 16 floats: from element 0 or 2 they cover the offsets, from 16 they do not. */
    const flashcl_tensor t = {in, 0, 0, 16, 16};
    const flashcl_tensor over_q = {shared_q, 0, 0, 16, 16}, over_k = {shared_k, 2, 0, 16, 16};
    const flashcl_tensor o = {outputs, 0, 0, 16, 16}, lse = {outputs, 256, 0, 12, 1};
    const flashcl_tensor dq = {outputs, 300, 0, 16, 16}, dk = {outputs, 500, 0, 16, 16}, dv = {outputs, 700, 0, 16, 16};
    const flashcl_tensor lse_over_k = {shared_k, 2, 0, 12, 1};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = shared_q;
    ex.cu_seqlens_k = shared_k;

    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &over_q, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "cu_seqlens_q"));
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse_over_k, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "cu_seqlens_k"));
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &over_q, &dk, &dv, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "cu_seqlens_q"));
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &dq, &over_k, &dv, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "cu_seqlens_k"));
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &dq, &dk, &over_k, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    /* Nothing ran: the offsets are intact. */
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    cl_mem shared[2] = {shared_q, shared_k};
    for (int i = 0; i < 2; ++i) {
        int back[3];
        ck_assert_int_eq(clEnqueueReadBuffer(queue, shared[i], CL_TRUE, 0, sizeof back, back, 0, NULL, NULL),
                         CL_SUCCESS);
        ck_assert(memcmp(back, cu, sizeof cu) == 0);
    }
    /* The same buffers with the views past the offsets are fine, and so are
     * inputs that overlap them (both are only read). */
    const flashcl_tensor after_q = {shared_q, 16, 0, 16, 16};
    ck_assert_msg(flashcl_forward_ex(ctx, &d, &ex, &t, &over_k, &t, &after_q, &lse, 0, NULL, NULL) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ex.cu_seqlens_k = cu_alone;
    ck_assert_msg(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &dq, &dk, &dv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    cl_mem all[] = {in, shared_q, shared_k, outputs, cu_alone};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *varlen_suite(void) {
    Suite *s = suite_create("varlen");
    TCase *tc = tcase_create("varlen");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_varlen_matches_sequences_alone, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_varlen_bad_inputs_rejected);
    tcase_add_test(tc, test_varlen_outputs_overlapping_cu_seqlens_rejected);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("varlen");
    SRunner *runner = srunner_create(varlen_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* test_standard_forward.c: the standard implementation's forward against the CPU reference, against flash, and its queue contract. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <clblast_c.h>

#include "test_support.h"

static flashcl_context *standard_context(void) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    return ctx;
}

typedef struct std_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    flashcl_layout layout;
    size_t offset, pad;
    float scale; /* 0: default */
} std_case;

/* Odd shapes, both layouts, GQA/MQA, offsets and padded strides, seqlen_q >
 * seqlen_k with causal (top rows fully masked), one row, and large logits. */
static const std_case cases[] = {
    {"1x1", 1, 1, 1, 1, 1, 16, 0, FLASHCL_LAYOUT_BHSD, 0, 0, 0},
    {"1x239 causal", 1, 2, 2, 1, 239, 32, 1, FLASHCL_LAYOUT_BSHD, 5, 0, 0},
    {"3x79 d40 gqa", 2, 4, 2, 3, 79, 40, 0, FLASHCL_LAYOUT_BHSD, 3, 1, 0},
    {"113x203 d59 causal bshd gqa", 2, 4, 2, 113, 203, 59, 1, FLASHCL_LAYOUT_BSHD, 7, 0, 0},
    {"128x117 causal masked rows", 1, 2, 2, 128, 117, 64, 1, FLASHCL_LAYOUT_BHSD, 0, 0, 0},
    {"65x64 d111 mqa bshd", 1, 3, 1, 65, 64, 111, 0, FLASHCL_LAYOUT_BSHD, 0, 2, 0},
    {"127x130 d128 causal", 2, 2, 2, 127, 130, 128, 1, FLASHCL_LAYOUT_BHSD, 1, 0, 0},
    {"64x96 large logits", 1, 2, 2, 64, 96, 16, 0, FLASHCL_LAYOUT_BHSD, 0, 0, 12.0f},
};

static void make_desc(const std_case *c, flashcl_attention_desc *desc) {
    flashcl_attention_desc_init(desc, c->batch, c->heads_q, c->seqlen_q, c->seqlen_k, c->head_dim);
    desc->heads_kv = c->heads_kv;
    desc->causal = c->causal;
    desc->scale = c->scale;
}

START_TEST(test_matches_reference) {
    const std_case *c = &cases[_i];
    /* Even cases on rusticl, odd ones on POCL (ts_split_takes: POCL specialises CLBlast's kernels for every local
     * size, about 2 s a case there); the large-logit case, numbers at their limits, on both. */
    if (c->scale == 0.0f && !ts_split_takes(_i, 0, 2)) return;
    flashcl_context *ctx = standard_context();
    flashcl_attention_desc desc;
    make_desc(c, &desc);
    ts_problem p;
    ts_problem_init(&p, &desc, 1000u + (uint64_t)_i, c->scale > 0 ? 2.0f : 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(lse);
    const ts_placements place = ts_uniform_placements(c->layout, c->offset, c->pad);
    ts_run_forward(ctx, &p, &place, o, lse);
    ts_check_forward(&p, o, lse, c->name);

    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.impl, FLASHCL_IMPL_STANDARD);
    ck_assert_int_eq(stats.pass, FLASHCL_PASS_FORWARD);
    const size_t s_bytes = (size_t)c->batch * (size_t)c->heads_q * (size_t)c->seqlen_q * (size_t)c->seqlen_k * 4;
    ck_assert_uint_eq(stats.extra_device_bytes, s_bytes);
    ck_assert(stats.predicted_global_bytes > 0.0);

    /* Without an LSE output the same O. */
    float *o_no_lse = malloc(p.q_count * sizeof *o_no_lse);
    ck_assert_ptr_nonnull(o_no_lse);
    ts_run_forward(ctx, &p, &place, o_no_lse, NULL);
    ck_assert_msg(memcmp(o, o_no_lse, p.q_count * sizeof *o) == 0, "%s: O differs without LSE", c->name);
    free(o_no_lse);
    free(o);
    free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Fully masked rows (seqlen_q > seqlen_k, causal): O = 0, LSE = -inf exactly. */
START_TEST(test_fully_masked_rows) {
    flashcl_context *ctx = standard_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 40, 9, 24);
    desc.causal = 1;
    ts_problem p;
    ts_problem_init(&p, &desc, 77, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 0, 0);
    ts_run_forward(ctx, &p, &place, o, lse);
    ts_check_forward(&p, o, lse, "fully masked");
    const int masked_rows = desc.seqlen_q - desc.seqlen_k; /* rows i < Sq - Sk see no key */
    for (int h = 0; h < desc.heads_q; ++h)
        for (int i = 0; i < desc.seqlen_q; ++i) {
            const float l = lse[(size_t)h * (size_t)desc.seqlen_q + (size_t)i];
            if (i < masked_rows) {
                ck_assert_msg(isinf(l) && l < 0, "row %d: LSE %g, want -inf", i, (double)l);
                for (int d = 0; d < desc.head_dim; ++d)
                    ck_assert_msg(o[((size_t)h * (size_t)desc.seqlen_q + (size_t)i) * (size_t)desc.head_dim + (size_t)d] == 0.0f,
                                  "row %d of a fully masked head is not 0", i);
            } else {
                ck_assert_msg(isfinite(l), "row %d: LSE %g", i, (double)l);
            }
        }
    free(o);
    free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Standard and flash agree within the sum of their tolerances. */
START_TEST(test_agrees_with_flash) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 4, 97, 150, 64);
    desc.heads_kv = 2;
    desc.causal = _i;
    ts_problem p;
    ts_problem_init(&p, &desc, 31 + (uint64_t)_i, 1.0f);
    float *o_flash = malloc(p.q_count * sizeof(float)), *o_std = malloc(p.q_count * sizeof(float));
    float *l_flash = malloc(p.lse_count * sizeof(float)), *l_std = malloc(p.lse_count * sizeof(float));
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 0, 0);
    ts_run_forward(ctx, &p, &place, o_flash, l_flash);
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.impl, FLASHCL_IMPL_FLASH);
    ck_assert_uint_eq(stats.extra_device_bytes, 0);
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ts_run_forward(ctx, &p, &place, o_std, l_std);

    ts_error e_flash, e_std;
    ts_compare(o_flash, p.o_ref, p.o_low, p.q_count, 2.0, &e_flash);
    ts_compare(o_std, p.o_ref, p.o_low, p.q_count, 2.0, &e_std);
    double diff = 0.0;
    for (size_t i = 0; i < p.q_count; ++i) diff = fmax(diff, fabs((double)o_flash[i] - (double)o_std[i]));
    ck_assert_msg(diff <= e_flash.bound + e_std.bound, "standard vs flash: max |dO| %.3g > %.3g", diff,
                  e_flash.bound + e_std.bound);
    double ldiff = 0.0;
    for (size_t i = 0; i < p.lse_count; ++i) ldiff = fmax(ldiff, fabs((double)l_flash[i] - (double)l_std[i]));
    ts_error le_flash, le_std;
    ts_compare(l_flash, p.lse_ref, p.lse_low, p.lse_count, 2.0, &le_flash);
    ts_compare(l_std, p.lse_ref, p.lse_low, p.lse_count, 2.0, &le_std);
    ck_assert_msg(ldiff <= le_flash.bound + le_std.bound, "standard vs flash: max |dLSE| %.3g", ldiff);
    free(o_flash), free(o_std), free(l_flash), free(l_std);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* S split over several buffers (as on a device whose largest allocation is
 * smaller than S): the same answer, the same extra bytes. 5 heads of 3 per
 * chunk leave a short last chunk. */
START_TEST(test_chunked_scores) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 5, 2, 33, 47, 32);
    desc.heads_kv = 1;
    desc.causal = 1;
    char cap[32];
    snprintf(cap, sizeof cap, "%zu", (size_t)3 * 33 * 47 * 4 + 100);
    ck_assert_int_eq(setenv("FLASHCL_STANDARD_CHUNK_BYTES", cap, 1), 0);
    flashcl_context *ctx = standard_context();
    ts_problem p;
    ts_problem_init(&p, &desc, 5, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 2, 0);
    ts_run_forward(ctx, &p, &place, o, lse);
    ts_check_forward(&p, o, lse, "chunked scores");
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_uint_eq(stats.extra_device_bytes, (size_t)5 * 2 * 33 * 47 * 4);
    unsetenv("FLASHCL_STANDARD_CHUNK_BYTES");
    free(o);
    free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* CLBlast's strided-batched GEMM takes its indirect path (padding copies and
 * a fast kernel) only above a size threshold, so the small problems here run
 * the direct one. Forcing the threshold to 1 puts them on the indirect path,
 * where CLBlast 1.5.3 ignores operand offsets (found on the H100 at N=8192):
 * later score chunks (sub-buffer rebasing) and an unaligned caller offset
 * (head-by-head plain GEMM) must still give the reference answer. Check forks
 * each test, so the override stays in this one. */
static void force_clblast_indirect(flashcl_context *ctx) {
    const char *names[1] = {"XGEMM_MIN_INDIRECT_SIZE"};
    const size_t values[1] = {1};
    ck_assert_int_eq(CLBlastOverrideParameters(flashcl_context_device(ctx), "GemmRoutine", CLBlastPrecisionSingle, 1,
                                               names, values),
                     CLBlastSuccess);
}

START_TEST(test_indirect_gemm_offsets) {
    static const struct {
        const char *name;
        size_t offset;
        int chunked;
    } variants[] = {{"indirect, chunked scores", 0, 1}, {"indirect, unaligned offset", 3, 0},
                    {"indirect, aligned offset", 1024, 0}};
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 2, 128, 128, 64);
    if (variants[_i].chunked) {
        char cap[32];
        snprintf(cap, sizeof cap, "%zu", (size_t)128 * 128 * 4);
        ck_assert_int_eq(setenv("FLASHCL_STANDARD_CHUNK_BYTES", cap, 1), 0);
    }
    flashcl_context *ctx = standard_context();
    force_clblast_indirect(ctx);
    ts_problem p;
    ts_problem_init(&p, &desc, 40u + (uint64_t)_i, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(lse);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, variants[_i].offset, 0);
    ts_run_forward(ctx, &p, &place, o, lse);
    ts_check_forward(&p, o, lse, variants[_i].name);
    unsetenv("FLASHCL_STANDARD_CHUNK_BYTES");
    free(o);
    free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* The wait list gates the first command (CLBlast takes none) and the
 * returned event covers the last: with a user event pending nothing may
 * finish, and after it the result is complete. */
START_TEST(test_wait_list_and_event) {
    flashcl_context *ctx = standard_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 50, 70, 32);
    ts_problem p;
    ts_problem_init(&p, &desc, 9, 1.0f);
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement place = {FLASHCL_LAYOUT_BHSD, 0, 0};
    ts_tensor q, k, v, o, lse;
    ts_tensor_create(&q, context, &place, 1, 2, 50, 32, FLASHCL_DTYPE_F32, p.q);
    ts_tensor_create(&k, context, &place, 1, 2, 70, 32, FLASHCL_DTYPE_F32, p.k);
    ts_tensor_create(&v, context, &place, 1, 2, 70, 32, FLASHCL_DTYPE_F32, p.v);
    ts_tensor_create(&o, context, &place, 1, 2, 50, 32, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&lse, context, &place, 1, 2, 50, 1, FLASHCL_DTYPE_F32, NULL);
    cl_int err;
    cl_event gate = clCreateUserEvent(context, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    ck_assert_int_eq(flashcl_forward(ctx, &desc, &q.view, &k.view, &v.view, &o.view, &lse.view, 1, &gate, &done),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_nonnull(done);
    clFlush(queue);
    const struct timespec pause = {0, 200000000L};
    nanosleep(&pause, NULL);
    cl_int state = CL_COMPLETE;
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_msg(state != CL_COMPLETE, "the call finished before its wait list");
    ck_assert_int_eq(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    /* Read without clFinish: the event alone must cover the work. */
    ck_assert_int_eq(clEnqueueReadBuffer(queue, o.view.buffer, CL_FALSE, 0, o.capacity * o.elem_size, o.image, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    ts_assert_written_exactly(&o, "O");
    ts_tensor_read(queue, &lse);
    float *got = malloc(p.q_count * sizeof *got), *got_lse = malloc(p.lse_count * sizeof *got_lse);
    ts_tensor_gather(&o, got);
    ts_tensor_gather(&lse, got_lse);
    ts_check_forward(&p, got, got_lse, "gated");
    clReleaseEvent(done);
    clReleaseEvent(gate);
    free(got);
    free(got_lse);
    ts_tensor_free(&q), ts_tensor_free(&k), ts_tensor_free(&v), ts_tensor_free(&o), ts_tensor_free(&lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Half storage is not implemented on the standard path: a clear refusal
 * that writes nothing. */
START_TEST(test_half_unsupported) {
    flashcl_context *ctx = standard_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 1, 8, 8, 16);
    desc.dtype = FLASHCL_DTYPE_F16;
    cl_context context = flashcl_context_cl_context(ctx);
    const ts_placement place = {FLASHCL_LAYOUT_BHSD, 0, 0};
    float values[8 * 16];
    for (int i = 0; i < 8 * 16; ++i) values[i] = (float)i / 64.0f;
    ts_tensor q, o;
    ts_tensor_create(&q, context, &place, 1, 1, 8, 16, FLASHCL_DTYPE_F16, values);
    ts_tensor_create(&o, context, &place, 1, 1, 8, 16, FLASHCL_DTYPE_F16, NULL);
    flashcl_status status = flashcl_forward(ctx, &desc, &q.view, &q.view, &q.view, &o.view, NULL, 0, NULL, NULL);
    ck_assert_int_eq(status, FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "float32") != NULL, "message: %s", flashcl_last_error(ctx));
    ts_assert_untouched(flashcl_context_queue(ctx), &o, "O");
    ts_tensor_free(&q), ts_tensor_free(&o);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *standard_forward_suite(void) {
    Suite *s = suite_create("standard_forward");
    TCase *tc = tcase_create("accuracy");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_matches_reference, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_fully_masked_rows);
    tcase_add_loop_test(tc, test_agrees_with_flash, 0, 2);
    tcase_add_test(tc, test_chunked_scores);
    tcase_add_loop_test(tc, test_indirect_gemm_offsets, 0, 3);
    suite_add_tcase(s, tc);
    TCase *api = tcase_create("api");
    tcase_set_timeout(api, TS_CASE_TIMEOUT);
    tcase_add_test(api, test_wait_list_and_event);
    tcase_add_test(api, test_half_unsupported);
    suite_add_tcase(s, api);
    return s;
}

int main(void) {
    ts_sweep_announce("standard_forward");
    SRunner *runner = srunner_create(standard_forward_suite());
    /* Cases here set environment variables: each runs in a child of its own, also where the tests' environment
     * turns Check's forking off (CK_FORK=no, top-level CMakeLists.txt), so none leaks into the next case. */
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

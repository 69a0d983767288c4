/* test_explain.c: what is reported is what ran. flashcl_explain_call before a call, flashcl_last_call_stats
 * after it, flashcl_context_plan and flashcl_predict_global_bytes all give the dispatcher's one plan, for the
 * portable, emulated tensor-core and standard kernels. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static void assert_same_stats(const flashcl_call_stats *a, const flashcl_call_stats *b, const char *label) {
    ck_assert_msg(a->impl == b->impl && a->pass == b->pass && a->kernel == b->kernel, "%s: impl/pass/kernel differ",
                  label);
    ck_assert_msg(memcmp(&a->plan, &b->plan, sizeof a->plan) == 0, "%s: plans differ", label);
    ck_assert_msg(a->extra_device_bytes == b->extra_device_bytes, "%s: extra bytes %zu vs %zu", label,
                  a->extra_device_bytes, b->extra_device_bytes);
    ck_assert_msg(a->predicted_global_bytes == b->predicted_global_bytes, "%s: predicted bytes differ", label);
    ck_assert_str_eq(a->backend, b->backend);
    ck_assert_str_eq(a->program, b->program);
    ck_assert_str_eq(a->build_options, b->build_options);
}

/* Runs one forward of desc on ctx (contiguous BHSD) and checks explain == last stats, and the plan and byte
 * queries against them. Returns the stats. */
static flashcl_call_stats explain_then_run(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const char *label) {
    flashcl_call_stats before, after;
    ck_assert_msg(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, desc, NULL, &before) == FLASHCL_SUCCESS, "%s: %s",
                  label, flashcl_last_error(ctx));
    ts_problem p;
    ts_problem_init(&p, desc, 11, 1.0f);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    ts_run_forward(ctx, &p, &place, o, lse);
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &after), FLASHCL_SUCCESS);
    /* The tensor-core kernels' accuracy is test_forward_mma's concern (P is rounded to the storage type). */
    if (after.kernel == FLASHCL_KERNEL_PORTABLE || after.kernel == FLASHCL_KERNEL_STANDARD)
        ts_check_forward(&p, o, lse, label);
    assert_same_stats(&before, &after, label);
    if (after.impl == FLASHCL_IMPL_FLASH) {
        flashcl_plan plan;
        ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, desc, &plan), FLASHCL_SUCCESS);
        ck_assert_msg(memcmp(&plan, &after.plan, sizeof plan) == 0, "%s: flashcl_context_plan differs", label);
    }
    double bytes = 0;
    ck_assert_int_eq(flashcl_predict_global_bytes(ctx, after.impl, FLASHCL_PASS_FORWARD, desc, &bytes),
                     FLASHCL_SUCCESS);
    ck_assert_msg(bytes == after.predicted_global_bytes, "%s: predicted %g, stats %g", label, bytes,
                  after.predicted_global_bytes);
    free(o);
    free(lse);
    ts_problem_free(&p);
    return after;
}

START_TEST(portable_reports_what_ran) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 70, 70, 32);
    desc.dtype = FLASHCL_DTYPE_F32;
    desc.causal = 1;
    const flashcl_call_stats s = explain_then_run(ctx, &desc, "portable f32");
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_str_eq(s.program, "forward.cl");
    ck_assert_str_eq(s.backend, "");
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DHEAD_DIM=32 "));
    ck_assert_str_eq(flashcl_kernel_kind_name(s.kernel), "portable");
}
END_TEST

/* The emulated tensor-core kernel on a CPU device: explain says so before, the stats after. */
START_TEST(emulated_reports_what_ran) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 40, 40, 32);
    desc.dtype = FLASHCL_DTYPE_F16;
    const flashcl_call_stats s = explain_then_run(ctx, &desc, "emulated f16");
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
    ck_assert_str_eq(s.backend, "emulated");
    ck_assert_str_eq(s.program, "forward_mma.cl");
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_MMA_PTX=0"));
    /* The backward's plan too, without running it. */
    flashcl_call_stats bwd;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_BACKWARD, &desc, NULL, &bwd), FLASHCL_SUCCESS);
    ck_assert_int_eq(bwd.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
    ck_assert_str_eq(bwd.program, "backward_mma.cl");
    ck_assert_uint_eq(bwd.extra_device_bytes, 2 * 40 * sizeof(float)); /* D: one float per query row */
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
}
END_TEST

#if FLASHCL_HAS_STANDARD /* runs the standard implementation; without CLBlast test_forward_errors checks its refusal */
START_TEST(standard_reports_what_ran) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 2, 33, 33, 16);
    desc.dtype = FLASHCL_DTYPE_F32;
    const flashcl_call_stats s = explain_then_run(ctx, &desc, "standard");
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_STANDARD);
    ck_assert_uint_eq(s.extra_device_bytes, 2 * 2 * 33 * 33 * sizeof(float));
    ck_assert_str_eq(s.program, "");
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_FLASH), FLASHCL_SUCCESS);
}
END_TEST
#endif

/* explain with extras: a window runs the portable kernel even where the tensor-core one would take the dense
 * call, and the window's define is in the options; refusals as the call's. */
START_TEST(explain_with_features_and_refusals) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 40, 40, 32);
    desc.dtype = FLASHCL_DTYPE_F16;
    desc.sliding_window = 1;
    desc.window_left = 8;
    desc.window_right = 0;
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_WINDOW=1"));
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_explain_call(ctx, (flashcl_pass)7, &desc, NULL, &s), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_explain_call(NULL, FLASHCL_PASS_FORWARD, &desc, NULL, &s), FLASHCL_ERROR_INVALID_ARGUMENT);
    desc.head_dim = 0;
    ck_assert_int_ne(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &s), FLASHCL_SUCCESS);
    desc.head_dim = 32;
    ck_assert_int_eq(flashcl_context_set_memory_budget(ctx, 16), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_BACKWARD, &desc, NULL, &s),
                     FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "bytes of scratch"));
    ck_assert_int_eq(flashcl_context_set_memory_budget(ctx, 0), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    ck_assert_str_eq(flashcl_kernel_kind_name((flashcl_kernel_kind)42), "unknown");
}
END_TEST

static Suite *explain_suite(void) {
    Suite *s = suite_create("explain");
    TCase *tc = tcase_create("plans");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, portable_reports_what_ran);
    tcase_add_test(tc, emulated_reports_what_ran);
#if FLASHCL_HAS_STANDARD
    tcase_add_test(tc, standard_reports_what_ran);
#endif
    tcase_add_test(tc, explain_with_features_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(explain_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

/* test_ptx_wgmma_fallback.c: a call the wgmma forward (or backward) would take, whose sm_90a program cannot be
 * built, is planned on the mma.sync kernels instead (src/call_plan.c), with the reason in flashcl_last_build_log.
 * The failure is forced: the kernels come from a directory of the test's own whose wgmma.cl (placed before
 * forward_wgmma.cl and backward_wgmma.cl) marks an instruction ptxas does not know (on an H100 the rewrite accepts
 * it and the rebuild fails); on any other device the context's caps are made to claim compute capability 9.0, so
 * the dispatcher picks the wgmma kernels and their sm_90 build from source fails there (inline PTX). Either way the
 * fallback path itself runs. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kernel_source.h"
#include "program_sm90a.h"

static char dir[256];

/* Every embedded kernel into dir; wgmma.cl with its first wgmma.fence replaced by an unknown instruction. */
static void write_kernels(void) {
    for (const flashcl_embedded_kernel *k = flashcl_embedded_kernels; k->name; ++k) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, k->name);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        if (strcmp(k->name, "wgmma.cl") == 0) {
            static const char fence[] = "wgmma.fence.sync.aligned", bogus[] = "wgmma.no_such_op.sync.aligned";
            const char *at = strstr(k->text, fence);
            ck_assert_ptr_nonnull(at);
            ck_assert_uint_eq(fwrite(k->text, 1, (size_t)(at - k->text), f), (size_t)(at - k->text));
            ck_assert_int_ge(fputs(bogus, f), 0);
            ck_assert_int_ge(fputs(at + strlen(fence), f), 0);
        } else {
            ck_assert_int_ge(fputs(k->text, f), 0);
        }
        ck_assert_int_eq(fclose(f), 0);
    }
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/flashcl_wgmma_fallback_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    write_kernels();
    setenv("FLASHCL_CACHE_DIR", "off", 1); /* nothing of the broken kernels outlives the test */
    setenv("FLASHCL_WGMMA", "1", 1);
}

static void teardown(void) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *entry;
        while ((entry = readdir(d)) != NULL) {
            if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, entry->d_name);
            remove(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* A context on the device whose sm_90a programs cannot build (their kernel directory holds a broken copy), made to
 * look like an H100 where it is not one; then a call of pass it would take on wgmma must be planned on the
 * mma.sync kernels' program, with the reason in flashcl_last_build_log, and asked again must build nothing.
 * Returns the context, for the caller's further checks. */
static flashcl_context *expect_fallback(flashcl_pass pass, const flashcl_attention_desc *desc, const char *program,
                                        const char *head) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.kernel_dir = dir;
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, &options) == FLASHCL_SUCCESS, "%s", flashcl_last_error(NULL));
    const int h100 = flashcl_sm90a_device_refusal(&ctx->caps) == NULL;
    if (!h100) {
        ctx->caps.vendor = FLASHCL_VENDOR_NVIDIA;
        ctx->caps.compute_capability = 90;
        ctx->caps.limits.static_local_mem_bytes = 231424;
    }
    flashcl_call_stats stats;
    ck_assert_msg(flashcl_explain_call(ctx, pass, desc, NULL, &stats) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_str_eq(stats.backend, "nvidia-mma-sync");
    ck_assert_str_eq(stats.program, program);
    ck_assert_msg(strncmp(flashcl_last_build_log(ctx), head, strlen(head)) == 0, "%s", flashcl_last_build_log(ctx));
    const char *why = h100 ? "the build of the rewritten PTX failed" : "its sm_90 build from source failed";
    ck_assert_msg(strstr(flashcl_last_build_log(ctx), why), "\"%s\" lacks \"%s\"", flashcl_last_build_log(ctx), why);
    /* Asked again: the same plan, the unavailable variant remembered (nothing built). */
    const unsigned long builds = ctx->cache_stats.source_builds;
    ck_assert_int_eq(flashcl_explain_call(ctx, pass, desc, NULL, &stats), FLASHCL_SUCCESS);
    ck_assert_str_eq(stats.backend, "nvidia-mma-sync");
    ck_assert_uint_eq(ctx->cache_stats.source_builds, builds);
    return ctx;
}

START_TEST(unavailable_wgmma_falls_back_to_mma_sync) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 200, 200, 64);
    desc.dtype = FLASHCL_DTYPE_F16;
    desc.causal = _i;
    /* The program is named by its files, the prelude's first. */
    flashcl_context *ctx = expect_fallback(FLASHCL_PASS_FORWARD, &desc, "forward_mma.cl",
                                           "sm_90a variant of mma.cl mma_nvidia.cl mma_operands.cl wgmma.cl "
                                           "forward_wgmma.cl unavailable: ");
    /* With the Hopper forward off the sm_90a program is not even asked for. */
    ctx->wgmma = 0;
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &stats), FLASHCL_SUCCESS);
    ck_assert_str_eq(stats.backend, "nvidia-mma-sync");
    flashcl_context_free(ctx);
}
END_TEST

/* The same for the Hopper backward (cl/backward_wgmma.cl, which wgmma.cl precedes). */
START_TEST(unavailable_wgmma_backward_falls_back_to_mma_sync) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 1, 2, 200, 200, 128);
    desc.dtype = FLASHCL_DTYPE_BF16;
    desc.causal = _i;
    flashcl_context_free(expect_fallback(FLASHCL_PASS_BACKWARD, &desc, "backward_mma.cl",
                                         "sm_90a variant of mma.cl mma_nvidia.cl mma_operands.cl wgmma.cl "
                                         "backward_mma.cl backward_wgmma.cl unavailable: "));
}
END_TEST

int main(void) {
    Suite *s = suite_create("ptx_wgmma_fallback");
    TCase *tc = tcase_create("fallback");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, unavailable_wgmma_falls_back_to_mma_sync, 0, 2);
    tcase_add_loop_test(tc, unavailable_wgmma_backward_falls_back_to_mma_sync, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

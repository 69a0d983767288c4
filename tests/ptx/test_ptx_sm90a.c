/* test_ptx_sm90a.c: the sm_90a second compile step (src/program_sm90a.c) and the static local memory probe
 * (src/static_local.c) on the device FLASHCL_DEVICE names. On an H100 the marked kernel must build through the
 * rewrite and compute the right numbers, from source and from the disk cache; everywhere else every path must
 * fall back with its reason, and the context must go on working. */
#include <check.h>
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk_cache.h"
#include "internal.h"
#include "program_cache.h"
#include "program_sm90a.h"
#include "ptx_rewrite.h"

/* One wgmma.mma_async per work-group of 128 (a warpgroup): A (64x16, registers) all 1.0, B (16x8, local memory,
 * read by descriptor) all 2.0, so every element of D = A B is 16 x 1 x 2 = 32. The wgmma instructions are marked
 * (the sm_90 compiler refuses them); fence.proxy.async is plain sm_90 PTX. */
static const char marked_kernel[] =
    "__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void sm90a_check(__global float *out) {\n"
    "    /* wgmma's descriptor addresses the tile in 16-byte units and reads whole core matrices: at the\n"
    "     * array's default 2-byte alignment the results come out wrong. */\n"
    "    __local ushort b[2048] __attribute__((aligned(128)));\n"
    "    const int lid = get_local_id(0);\n"
    "    for (int i = lid; i < 2048; i += 128) b[i] = (ushort)0x4000;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    /* Stores through the generic proxy become visible to wgmma's async proxy only after this fence. */\n"
    "    asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    const uint address = (uint)(size_t)b;\n"
    "    const ulong descriptor = (ulong)((address & 0x3FFFF) >> 4) | ((ulong)(128 >> 4) << 16) |\n"
    "                             ((ulong)(256 >> 4) << 32);\n"
    "    const uint a = 0x3C003C00u;\n"
    "    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;\n"
    "    asm volatile(\"// FLASHCL_SM90A wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %9, 0;\\n\"\n"
    "                 \"// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 \"\n"
    "                 \"{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\\n}\"\n"
    "                 : \"+f\"(d0), \"+f\"(d1), \"+f\"(d2), \"+f\"(d3)\n"
    "                 : \"r\"(a), \"r\"(a), \"r\"(a), \"r\"(a), \"l\"(descriptor), \"r\"(0));\n"
    "    asm volatile(\"// FLASHCL_SM90A wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
    "    asm volatile(\"// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;\"\n"
    "                 : \"+f\"(d0), \"+f\"(d1), \"+f\"(d2), \"+f\"(d3) :: \"memory\");\n"
    "    const size_t g = get_global_id(0);\n"
    "    out[4 * g + 0] = d0;\n"
    "    out[4 * g + 1] = d1;\n"
    "    out[4 * g + 2] = d2;\n"
    "    out[4 * g + 3] = d3;\n"
    "}\n";

/* Marked, but the preprocessor drops the marker: the source asks for the step, the PTX holds no marker. */
static const char dropped_marker_kernel[] =
    "__kernel void sm90a_dropped(__global float *out) {\n"
    "#if 0\n"
    "    asm volatile(\"// FLASHCL_SM90A wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "#endif\n"
    "    out[get_global_id(0)] = 1.0f;\n"
    "}\n";

/* A marked instruction that ptxas does not know: the rewrite accepts it, the rebuild fails. */
static const char bogus_kernel[] =
    "__kernel void sm90a_bogus(__global float *out) {\n"
    "    asm volatile(\"// FLASHCL_SM90A wgmma.no_such_instruction.sync.aligned;\" ::: \"memory\");\n"
    "    out[get_global_id(0)] = 1.0f;\n"
    "}\n";

static const char plain_kernel[] = "__kernel void plain(__global float *out) { out[get_global_id(0)] = 7.0f; }\n";

static char dir[256];

static void write_text(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* A kernel directory of the test's own (common.cl empty), and a disk cache inside it. */
static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/flashcl_ptx_test_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    write_text("common.cl", "/* empty: these kernels need nothing of flashcl's */\n");
    write_text("sm90a_check.cl", marked_kernel);
    write_text("sm90a_dropped.cl", dropped_marker_kernel);
    write_text("sm90a_bogus.cl", bogus_kernel);
    write_text("plain.cl", plain_kernel);
    char cache[512];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("FLASHCL_CACHE_DIR", cache, 1);
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        remove(path);
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", path, entry->d_name);
        remove_tree(child);
    }
    closedir(d);
    rmdir(path);
}

static void teardown(void) { remove_tree(dir); }

static flashcl_context *context(void) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.kernel_dir = dir;
    flashcl_context *ctx = NULL;
    ck_assert_msg(flashcl_context_create(&ctx, &options) == FLASHCL_SUCCESS, "%s", flashcl_last_error(NULL));
    return ctx;
}

static int is_h100(const flashcl_context *ctx) { return flashcl_sm90a_device_refusal(&ctx->caps) == NULL; }

/* Runs kernel (one float* argument) over groups work-groups of local work-items; returns the outputs (malloc'd,
 * per_item floats per work-item). */
static float *run(flashcl_context *ctx, cl_kernel kernel, size_t groups, size_t local, size_t per_item) {
    const size_t global = groups * local, count = global * per_item;
    cl_int err;
    cl_mem out = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, count * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clSetKernelArg(kernel, 0, sizeof out, &out), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueNDRangeKernel(ctx->queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL), CL_SUCCESS);
    float *host = malloc(count * sizeof(float));
    ck_assert_ptr_nonnull(host);
    ck_assert_int_eq(clEnqueueReadBuffer(ctx->queue, out, CL_TRUE, 0, count * sizeof(float), host, 0, NULL, NULL),
                     CL_SUCCESS);
    clReleaseMemObject(out);
    return host;
}

static void expect_all(const float *values, size_t count, float expected) {
    size_t right = 0;
    for (size_t i = 0; i < count; ++i) right += values[i] == expected;
    ck_assert_msg(right == count, "%zu of %zu outputs are %g (first: %g)", right, count, expected, values[0]);
}

/* A plain kernel still builds and runs after whatever the variant did. */
static void context_still_works(flashcl_context *ctx) {
    cl_kernel plain;
    ck_assert_msg(flashcl_get_kernel(ctx, "plain.cl", "plain", "", &plain) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    float *out = run(ctx, plain, 2, 64, 1);
    expect_all(out, 128, 7.0f);
    free(out);
}

static void expect_unavailable(flashcl_context *ctx, const char *file, const char *kernel, const char *words) {
    cl_kernel k = NULL;
    const flashcl_status status = flashcl_get_sm90a_kernel(ctx, NULL, file, kernel, "", &k);
    ck_assert_msg(status == FLASHCL_ERROR_UNSUPPORTED, "%s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    char head[128];
    snprintf(head, sizeof head, "sm_90a variant of %s unavailable: ", file);
    ck_assert_msg(strstr(flashcl_last_error(ctx), head) == flashcl_last_error(ctx), "%s", flashcl_last_error(ctx));
    ck_assert_msg(strstr(flashcl_last_error(ctx), words), "\"%s\" lacks \"%s\"", flashcl_last_error(ctx), words);
    ck_assert_msg(strncmp(flashcl_last_build_log(ctx), head, strlen(head)) == 0, "%s", flashcl_last_build_log(ctx));
    ck_assert_ptr_null(k);
    if (getenv("FLASHCL_TEST_VERBOSE")) printf("%s: %s\n", file, flashcl_last_build_log(ctx));
}

START_TEST(marked_kernel_runs_or_falls_back) {
    flashcl_context *ctx = context();
    cl_kernel k = NULL;
    const flashcl_status status = flashcl_get_sm90a_kernel(ctx, NULL, "sm90a_check.cl", "sm90a_check", "", &k);
    if (!is_h100(ctx)) {
        expect_unavailable(ctx, "sm90a_check.cl", "sm90a_check", "the device is not");
        /* Asked again: the same answer from the context's cache, nothing built. */
        const unsigned long builds = ctx->cache_stats.source_builds;
        expect_unavailable(ctx, "sm90a_check.cl", "sm90a_check", "the device is not");
        ck_assert_uint_eq(ctx->cache_stats.source_builds, builds);
        context_still_works(ctx);
        flashcl_context_free(ctx);
        return;
    }
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s\n%s", flashcl_last_error(ctx), flashcl_last_build_log(ctx));
    float *out = run(ctx, k, 2, 128, 4);
    expect_all(out, 2 * 128 * 4, 32.0f);
    free(out);
    cl_kernel again = NULL;
    const unsigned long builds = ctx->cache_stats.source_builds;
    ck_assert_int_eq(flashcl_get_sm90a_kernel(ctx, NULL, "sm90a_check.cl", "sm90a_check", "", &again),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_eq(again, k);
    ck_assert_uint_eq(ctx->cache_stats.source_builds, builds);
    const int disk = ctx->cache_stats.disk_enabled;
    if (disk) ck_assert_uint_eq(ctx->cache_stats.disk_writes, 1);
    /* Build options reach both builds (the attention kernels' -D defines will): another entry, the same result. */
    cl_kernel with_options = NULL;
    ck_assert_msg(flashcl_get_sm90a_kernel(ctx, NULL, "sm90a_check.cl", "sm90a_check", "-DFLASHCL_UNUSED=1",
                                           &with_options) == FLASHCL_SUCCESS,
                  "%s\n%s", flashcl_last_error(ctx), flashcl_last_build_log(ctx));
    ck_assert_ptr_ne(with_options, k);
    out = run(ctx, with_options, 1, 128, 4);
    expect_all(out, 128 * 4, 32.0f);
    free(out);
    context_still_works(ctx);
    flashcl_context_free(ctx);
    /* A new context (a new process, as far as the cache knows) loads the rewritten program from disk. */
    ctx = context();
    ck_assert_int_eq(flashcl_get_sm90a_kernel(ctx, NULL, "sm90a_check.cl", "sm90a_check", "", &k), FLASHCL_SUCCESS);
    if (disk) {
        ck_assert_uint_eq(ctx->cache_stats.disk_hits, 1);
        ck_assert_uint_eq(ctx->cache_stats.source_builds, 0);
    }
    out = run(ctx, k, 3, 128, 4);
    expect_all(out, 3 * 128 * 4, 32.0f);
    free(out);
    flashcl_context_free(ctx);
}
END_TEST

static void dump(const char *name, const char *text, size_t length) {
    const char *to = getenv("FLASHCL_PTX_DUMP_DIR");
    if (!to) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", to, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, length, f), length);
    ck_assert_int_eq(fclose(f), 0);
}

/* The rewrite on the real thing: the PTX the driver returns for the marked kernel (as the library joins it after
 * common.cl) holds its four markers, substituted, and is rewritten. FLASHCL_PTX_DUMP_DIR=dir saves both texts
 * (docs/results/h100/ptx/ keeps them). Only where the driver gives sm_90 PTX. */
START_TEST(driver_ptx_rewrites) {
    flashcl_context *ctx = context();
    if (!is_h100(ctx)) {
        flashcl_context_free(ctx);
        return;
    }
    char *source = NULL;
    ck_assert_int_eq(flashcl_kernel_source(ctx, NULL, "sm90a_check.cl", &source), FLASHCL_SUCCESS);
    cl_int err;
    const char *sources[] = {source};
    cl_program program = clCreateProgramWithSource(ctx->context, 1, sources, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clBuildProgram(program, 1, &ctx->device, "", NULL, NULL), CL_SUCCESS);
    size_t size = 0;
    unsigned char *ptx = flashcl_program_binary(program, &size);
    ck_assert_ptr_nonnull(ptx);
    /* What the binary holds past the text's NUL (program_sm90a.c rewrites the text alone). */
    const size_t text = strnlen((const char *)ptx, size);
    size_t nonzero = 0;
    for (size_t i = text; i < size; ++i) nonzero += ptx[i] != 0;
    printf("driver binary: %zu bytes, text %zu, %zu non-NUL bytes after the text's NUL\n", size, text, nonzero);
    dump("driver_sm90.ptx", (const char *)ptx, text);
    flashcl_ptx_rewrite rewrite;
    const flashcl_ptx_result result =
        flashcl_ptx_rewrite_sm90a((const char *)ptx, text, FLASHCL_PTX_MARKERS_REQUIRED, &rewrite);
    ck_assert_msg(result == FLASHCL_PTX_OK, "%s: %s", flashcl_ptx_result_name(result), rewrite.reason);
    ck_assert_int_eq(rewrite.markers, 4);
    ck_assert_int_eq(rewrite.retargeted, 1);
    ck_assert_ptr_nonnull(strstr(rewrite.text, "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%f"));
    ck_assert_ptr_null(strstr(rewrite.text, FLASHCL_PTX_MARKER));
    dump("rewritten_sm90a.ptx", rewrite.text, rewrite.length);
    flashcl_ptx_rewrite_free(&rewrite);
    free(ptx);
    free(source);
    clReleaseProgram(program);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(source_without_marker_falls_back) {
    flashcl_context *ctx = context();
    expect_unavailable(ctx, "plain.cl", "plain", "its source has no \"// FLASHCL_SM90A \" marker");
    context_still_works(ctx);
    flashcl_context_free(ctx);
}
END_TEST

/* On an H100 the refusal comes from the rewrite (the preprocessor dropped the marker); elsewhere from the device. */
START_TEST(rewrite_refusal_falls_back) {
    flashcl_context *ctx = context();
    expect_unavailable(ctx, "sm90a_dropped.cl", "sm90a_dropped",
                       is_h100(ctx) ? "the PTX rewrite refused the driver's PTX (FLASHCL_PTX_NO_MARKERS: no "
                                    : "the device is not");
    context_still_works(ctx);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(failed_rebuild_falls_back) {
    flashcl_context *ctx = context();
    /* The driver may refuse the PTX at clCreateProgramWithBinary or at clBuildProgram; either says so. */
    expect_unavailable(ctx, "sm90a_bogus.cl", "sm90a_bogus", is_h100(ctx) ? "rewritten PTX" : "the device is not");
    if (strstr(flashcl_last_error(ctx), "the build of the rewritten PTX failed")) /* the driver's words follow */
        ck_assert_uint_gt(strlen(strchr(flashcl_last_build_log(ctx), '\n')), 1);
    context_still_works(ctx);
    flashcl_context_free(ctx);
}
END_TEST

/* The static local memory: the reported size except on NVIDIA, where a kernel with a static array of exactly
 * the answer builds and runs right; the context-free query agrees. */
START_TEST(static_local_memory) {
    flashcl_context *ctx = context();
    flashcl_device_limits limits, queried;
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_query_device_limits(ctx->device, &queried), FLASHCL_SUCCESS);
    ck_assert_uint_eq(queried.static_local_mem_bytes, limits.static_local_mem_bytes);
    ck_assert_uint_ge(limits.static_local_mem_bytes, limits.local_mem_bytes);
    /* A caller built against version 1 of the struct (before the field) is served up to its size. */
    flashcl_device_limits old;
    memset(&old, 0x5a, sizeof old);
    const size_t version1 = offsetof(flashcl_device_limits, static_local_mem_bytes);
    ck_assert_int_eq(flashcl_context_limits_sized(ctx, &old, version1), FLASHCL_SUCCESS);
    ck_assert_uint_eq(old.struct_size, version1);
    ck_assert_uint_eq(old.local_mem_bytes, limits.local_mem_bytes);
    ck_assert_uint_eq(old.static_local_mem_bytes, 0x5a5a5a5a5a5a5a5aull);
    if (ctx->caps.vendor != FLASHCL_VENDOR_NVIDIA) {
        ck_assert_uint_eq(limits.static_local_mem_bytes, limits.local_mem_bytes);
        flashcl_context_free(ctx);
        return;
    }
    const size_t floats = limits.static_local_mem_bytes / sizeof(float);
    char text[640];
    snprintf(text, sizeof text,
             "__kernel void fill(__global float *out) {\n"
             "    __local float s[%zu];\n"
             "    for (int i = get_local_id(0); i < %zu; i += get_local_size(0)) s[i] = (float)i;\n"
             "    barrier(CLK_LOCAL_MEM_FENCE);\n"
             "    out[get_global_id(0)] = s[%zu - 1 - get_local_id(0)];\n"
             "}\n",
             floats, floats, floats);
    write_text("fill.cl", text);
    cl_kernel fill;
    ck_assert_msg(flashcl_get_kernel(ctx, "fill.cl", "fill", "", &fill) == FLASHCL_SUCCESS, "%s\n%s",
                  flashcl_last_error(ctx), flashcl_last_build_log(ctx));
    float *out = run(ctx, fill, 4, 256, 1);
    for (size_t i = 0; i < 4 * 256; ++i) ck_assert_float_eq(out[i], (float)(floats - 1 - i % 256));
    free(out);
    printf("static local memory: %zu bytes (reported %zu)\n", limits.static_local_mem_bytes, limits.local_mem_bytes);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *sm90a_suite(void) {
    Suite *s = suite_create("ptx_sm90a");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, marked_kernel_runs_or_falls_back);
    tcase_add_test(tc, driver_ptx_rewrites);
    tcase_add_test(tc, source_without_marker_falls_back);
    tcase_add_test(tc, rewrite_refusal_falls_back);
    tcase_add_test(tc, failed_rebuild_falls_back);
    tcase_add_test(tc, static_local_memory);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(sm90a_suite());
    /* Cases here set environment variables: each runs in a child of its own, also where the tests' environment
     * turns Check's forking off (CK_FORK=no, top-level CMakeLists.txt), so none leaks into the next case. */
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

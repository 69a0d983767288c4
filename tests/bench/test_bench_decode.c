/* test_bench_decode.c: `flashcl bench --decode` run as a child process on tiny caches: its exit status, table,
 * JSON and CSV records (kv_gbps, copy_gbps, pct_of_copy and the kernel that ran), and its refusals. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_records.h"
#include "run_program.h"

static const char *g_workdir;
static char **g_command; /* the bench command: program and leading arguments, NULL-terminated */

static void work_path(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", g_workdir, name); }

static int run_bench(const char *prefix, char *const *args) {
    char output_prefix[1024];
    work_path(output_prefix, sizeof output_prefix, prefix);
    return run_program(g_command, args, output_prefix, NULL);
}

static double number(const json_record *r, const char *name) {
    const json_field *f = json_find(r, name);
    ck_assert_msg(f != NULL && f->type == JSON_NUMBER, "field %s missing or not a number", name);
    return f->number;
}

static const char *text(const json_record *r, const char *name) {
    const json_field *f = json_find(r, name);
    ck_assert_msg(f != NULL && f->type == JSON_STRING, "field %s missing or not a string", name);
    return f->text;
}

/* Two cache lengths, GQA 4 -> 2, half storage, one and four query rows (timed back to back), and a paged cache:
 * the decode kernel ran, every number is consistent. Tensor cores off, so that the record names the same kernel
 * and no matrix-unit backend on every device (run by hand on a GPU, auto would pick the matrix-unit decode). */
START_TEST(records_are_consistent) {
    char json[1024], csv[1024];
    work_path(json, sizeof json, "decode.json");
    work_path(csv, sizeof csv, "decode.csv");
    remove(json);
    remove(csv);
    char *args[] = {"--decode", "--cache-lens", "100,700", "--batch", "2", "--heads", "4", "--heads-kv", "2",
                    "--head-dim", "64", "--query-len", (char *)(_i == 1 ? "4" : "1"), "--repeat", "2", "--warmup",
                    "1", "--json", json, "--csv", csv, "--page-size", (char *)(_i == 2 ? "16" : "0"), "--tensor-cores", "off",
                    (char *)(_i == 1 ? "--back-to-back" : NULL), NULL};
    ck_assert_int_eq(run_bench("decode", args), 0);
    json_record *records = NULL;
    char error[256];
    const int count = json_read_records(json, &records, error, sizeof error);
    ck_assert_msg(count == 2, "%s: %d records (%s)", json, count, error);
    const int lens[] = {100, 700};
    for (int i = 0; i < 2; ++i) {
        const json_record *r = &records[i];
        ck_assert_int_eq((int)number(r, "cache_len"), lens[i]);
        ck_assert_int_eq((int)number(r, "batch"), 2);
        ck_assert_int_eq((int)number(r, "heads_q"), 4);
        ck_assert_int_eq((int)number(r, "heads_kv"), 2);
        ck_assert_int_eq((int)number(r, "head_dim"), 64);
        ck_assert_int_eq((int)number(r, "query_len"), _i == 1 ? 4 : 1);
        ck_assert_int_eq((int)number(r, "page_size"), _i == 2 ? 16 : 0);
        ck_assert_str_eq(text(r, "dtype"), "f16");
        ck_assert_str_eq(text(r, "kernel"), "decode");
        ck_assert_str_eq(text(r, "backend"), "-"); /* tensor cores off */
        ck_assert_str_eq(text(r, "timing"), _i == 1 ? "back_to_back" : "per_call");
        ck_assert_int_ge((int)number(r, "kv_splits"), 1);
        const double ms = number(r, "ms"), kv = number(r, "kv_gbps"), copy = number(r, "copy_gbps");
        ck_assert(ms > 0.0 && kv > 0.0 && copy > 0.0);
        /* GB/s of K and V read once: 2 x B x N x Hkv x d x 2 bytes over the median time. */
        const double bytes = 2.0 * 2 * lens[i] * 2 * 64 * 2;
        ck_assert_msg(fabs(kv - bytes / (ms * 1e-3) / 1e9) <= 1e-4 * kv, "kv_gbps %g, ms %g", kv, ms);
        ck_assert_msg(fabs(number(r, "pct_of_copy") - 100.0 * kv / copy) <= 1e-4 * (100.0 * kv / copy),
                      "pct_of_copy");
        ck_assert_int_eq((int)number(r, "bias_bytes"), 0); /* no --bias */
    }
    free(records);
    char *table = read_text_file(csv);
    ck_assert_ptr_nonnull(
        strstr(table, "cache_len,page_size,dtype,kernel,backend,timing,kv_splits,ms,kv_gbps,copy_gbps,pct_of_copy,ok,"
                      "bias_bytes\n"));
    ck_assert_ptr_nonnull(strstr(table, _i == 2   ? ",700,16,f16,decode,-,per_call,"
                                        : _i == 1 ? ",700,0,f16,decode,-,back_to_back,"
                                                  : ",700,0,f16,decode,-,per_call,"));
    free(table);
}
END_TEST

/* --bias full and shared on a contiguous cache, and full on a paged one with four query rows: the decode kernel
 * ran, and bias_bytes is the view's size, Sq x S elements per plane, S the call's key positions (N contiguous,
 * whole pages paged: 100 rows in 16-row pages are 7 pages, 112 positions). Shapes of records_are_consistent. */
START_TEST(bias_bytes_recorded) {
    char json[1024], csv[1024];
    work_path(json, sizeof json, "bias.json");
    work_path(csv, sizeof csv, "bias.csv");
    remove(json);
    remove(csv);
    const int paged = _i == 2, full = _i != 1, query_len = paged ? 4 : 1;
    char *args[] = {"--decode", "--cache-lens", "64,100", "--batch", "2", "--heads", "4", "--heads-kv", "2",
                    "--head-dim", "64", "--query-len", (char *)(paged ? "4" : "1"), "--repeat", "1", "--warmup", "0",
                    "--bias", (char *)(full ? "full" : "shared"), "--page-size", (char *)(paged ? "16" : "0"),
                    "--json", json, "--csv", csv, NULL};
    ck_assert_int_eq(run_bench("bias", args), 0);
    json_record *records = NULL;
    char error[256];
    ck_assert_msg(json_read_records(json, &records, error, sizeof error) == 2, "%s: %s", json, error);
    const int keys[] = {64, paged ? 112 : 100};
    char expected[2][32];
    for (int i = 0; i < 2; ++i) {
        const json_record *r = &records[i];
        ck_assert_str_eq(text(r, "kernel"), "decode");
        /* B x Hq planes (full) or one (shared) of Sq x S half-precision elements. */
        const int bytes = (full ? 2 * 4 : 1) * query_len * keys[i] * 2;
        ck_assert_int_eq((int)number(r, "bias_bytes"), bytes);
        snprintf(expected[i], sizeof expected[i], ",1,%d\n", bytes); /* ok, then bias_bytes: CSV's last column */
    }
    free(records);
    char *table = read_text_file(csv);
    for (int i = 0; i < 2; ++i) ck_assert_msg(strstr(table, expected[i]) != NULL, "CSV lacks %s", expected[i]);
    free(table);
    char out[1024];
    work_path(out, sizeof out, "bias.out");
    char *printed = read_text_file(out);
    ck_assert_ptr_nonnull(strstr(printed, full ? "additive bias: (B, Hq, Sq, S)" : "additive bias: (1, 1, Sq, S)"));
    ck_assert_ptr_nonnull(strstr(printed, "bias bytes"));
    free(printed);
}
END_TEST

/* --no-decode-kernel runs the tiled kernel; --splits 1 forbids the split. */
START_TEST(tiled_kernel_for_comparison) {
    char json[1024];
    work_path(json, sizeof json, "tiled.json");
    remove(json);
    char *args[] = {"--decode",     "--cache-lens", "300", "--heads", "2", "--heads-kv", "1",  "--head-dim",
                    "32",           "--dtype",      "f32", "--tensor-cores", "off", "--no-decode-kernel",
                    "--splits",     "1",            "--repeat", "1", "--warmup", "0", "--json", json, NULL};
    ck_assert_int_eq(run_bench("tiled", args), 0);
    json_record *records = NULL;
    char error[256];
    ck_assert_int_eq(json_read_records(json, &records, error, sizeof error), 1);
    ck_assert_str_eq(text(&records[0], "kernel"), "portable");
    ck_assert_int_eq((int)number(&records[0], "kv_splits"), 1);
    free(records);
}
END_TEST

/* Bad options: exit status 2 and a reason. */
START_TEST(refusals) {
    char *uneven[] = {"--decode", "--heads", "6", "--heads-kv", "4", NULL};
    ck_assert_int_eq(run_bench("uneven", uneven), 2);
    char *unknown[] = {"--decode", "--bogus", "16", NULL};
    ck_assert_int_eq(run_bench("unknown", unknown), 2);
    char *lens[] = {"--decode", "--cache-lens", "10,x", NULL};
    ck_assert_int_eq(run_bench("lens", lens), 2);
    char *bias[] = {"--decode", "--bias", "nonsense", NULL};
    ck_assert_int_eq(run_bench("bias_value", bias), 2);
    char work[1024];
    work_path(work, sizeof work, "bias_value.err");
    char *reason = read_text_file(work);
    ck_assert_ptr_nonnull(strstr(reason, "bad value for --bias"));
    free(reason);
    char *help[] = {"--decode", "--help", NULL};
    ck_assert_int_eq(run_bench("help", help), 0);
}
END_TEST

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s WORKDIR BENCH-PROGRAM [LEADING-ARGS...]\n", argv[0]);
        return 2;
    }
    g_workdir = argv[1];
    g_command = argv + 2;
    Suite *s = suite_create("bench_decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, records_are_consistent, 0, 3);
    tcase_add_loop_test(tc, bias_bytes_recorded, 0, 3);
    tcase_add_test(tc, tiled_kernel_for_comparison);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? 1 : 0;
}

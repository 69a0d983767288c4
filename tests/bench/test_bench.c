/* test_bench.c: runs `flashcl bench` on tiny sweeps and checks its exit status, JSON, CSV, table and plot. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"
#include "json_records.h"
#include "run_program.h"

static const char *g_workdir;
static char **g_command; /* the bench command: program and leading arguments, NULL-terminated */

static const char *const FIELDS[] = {"impl", "direction", "batch", "heads", "seqlen", "head_dim", "causal", "dtype",
                                     "median_ms", "tflops", "extra_device_bytes", "predicted_hbm_bytes",
                                     "max_abs_err", "dropout", "block_density", "status", "device",
                                     "varlen_ms", "varlen_tflops", "varlen_speedup", "varlen_flops", "padded_flops",
                                     "varlen_tokens", "kernel", "softcap", "alibi_max_bias", "bias_bytes",
                                     "backend", "forward_backend"};
/* The --varlen fields: numbers on flash rows of a --varlen run, null elsewhere. */
static const char *const VARLEN_FIELDS[] = {"varlen_ms",    "varlen_tflops", "varlen_speedup",
                                            "varlen_flops", "padded_flops",  "varlen_tokens"};
enum { VARLEN_FIELD_COUNT = sizeof VARLEN_FIELDS / sizeof VARLEN_FIELDS[0], FIRST_VARLEN_COLUMN = 17 };
enum { FIELD_COUNT = sizeof FIELDS / sizeof FIELDS[0] };
/* The CSV's kernel column, before softcap, alibi_max_bias and bias_bytes, then the two backend columns (the JSON,
 * read by name, has kernel and the backends before status). */
enum { KERNEL_COLUMN = FIELD_COUNT - 6, BACKEND_COLUMN = FIELD_COUNT - 2 };

static void work_path(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", g_workdir, name); }

/* Runs the bench with args; prefix names the captured output files. */
static int run_bench(const char *prefix, char *const *args, const char *path_override) {
    char output_prefix[1024];
    work_path(output_prefix, sizeof output_prefix, prefix);
    return run_program(g_command, args, output_prefix, path_override);
}

static char *captured(const char *prefix, const char *stream) {
    char path[1024], name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, stream);
    work_path(path, sizeof path, name);
    return read_text_file(path);
}

static int read_records(const char *name, json_record **records) {
    char path[1024], error[256];
    work_path(path, sizeof path, name);
    const int count = json_read_records(path, records, error, sizeof error);
    ck_assert_msg(count >= 0, "%s: %s", path, error);
    return count;
}

static const json_field *field(const json_record *r, const char *name) {
    const json_field *f = json_find(r, name);
    ck_assert_msg(f != NULL, "record lacks field %s", name);
    return f;
}

static double number(const json_record *r, const char *name) {
    const json_field *f = field(r, name);
    ck_assert_msg(f->type == JSON_NUMBER, "field %s is not a number", name);
    return f->number;
}

static int is_null(const json_record *r, const char *name) { return field(r, name)->type == JSON_NULL; }

static const char *text(const json_record *r, const char *name) {
    const json_field *f = field(r, name);
    ck_assert_msg(f->type == JSON_STRING, "field %s is not a string", name);
    return f->text;
}

/* Every field present once, of its type (numbers may be null). */
static void check_schema(const json_record *r) {
    ck_assert_int_eq(r->field_count, FIELD_COUNT);
    for (int i = 0; i < FIELD_COUNT; ++i) field(r, FIELDS[i]);
    text(r, "impl"), text(r, "direction"), text(r, "dtype"), text(r, "status"), text(r, "device");
    ck_assert(strlen(text(r, "device")) > 0);
    ck_assert_int_eq(field(r, "causal")->type, JSON_BOOL);
    number(r, "batch"), number(r, "heads"), number(r, "seqlen"), number(r, "head_dim");
    number(r, "dropout"), number(r, "block_density"), number(r, "softcap"), number(r, "alibi_max_bias"), number(r, "bias_bytes");
    const char *kernel = text(r, "kernel");
    ck_assert_msg(strcmp(kernel, "portable") == 0 || strcmp(kernel, "tensor-core") == 0 ||
                      strcmp(kernel, "tensor-core-emulated") == 0 || strcmp(kernel, "standard") == 0,
                  "kernel '%s'", kernel);
    ck_assert_msg(strcmp(text(r, "impl"), "standard") != 0 || strcmp(kernel, "standard") == 0,
                  "a standard row says kernel '%s'", kernel);
    /* A backend exactly where the kernel has one (a tensor-core kernel's matrix unit), "-" elsewhere. */
    const char *backend = text(r, "backend");
    ck_assert_msg((strncmp(kernel, "tensor-core", 11) == 0) == (strcmp(backend, "-") != 0), "kernel '%s' backend '%s'",
                  kernel, backend);
    ck_assert(strlen(text(r, "forward_backend")) > 0);
    const char *measured[] = {"median_ms", "tflops", "extra_device_bytes", "predicted_hbm_bytes", "max_abs_err"};
    for (int i = 0; i < 5; ++i) {
        const json_type type = field(r, measured[i])->type;
        ck_assert_msg(type == JSON_NUMBER || type == JSON_NULL, "%s is neither number nor null", measured[i]);
    }
    for (int i = 0; i < VARLEN_FIELD_COUNT; ++i) {
        const json_type type = field(r, VARLEN_FIELDS[i])->type;
        ck_assert_msg(type == JSON_NUMBER || type == JSON_NULL, "%s is neither number nor null", VARLEN_FIELDS[i]);
    }
}

/* A record of a run without --varlen: no varlen numbers. */
static void check_no_varlen(const json_record *r) {
    for (int i = 0; i < VARLEN_FIELD_COUNT; ++i)
        ck_assert_msg(is_null(r, VARLEN_FIELDS[i]), "%s should be null without --varlen", VARLEN_FIELDS[i]);
}

static const json_record *find(const json_record *records, int count, int seqlen, const char *impl,
                               const char *direction) {
    const json_record *found = NULL;
    for (int i = 0; i < count; ++i)
        if (number(&records[i], "seqlen") == seqlen && strcmp(text(&records[i], "impl"), impl) == 0 &&
            strcmp(text(&records[i], "direction"), direction) == 0) {
            ck_assert_msg(!found, "two records for N=%d %s %s", seqlen, impl, direction);
            found = &records[i];
        }
    ck_assert_msg(found != NULL, "no record for N=%d %s %s", seqlen, impl, direction);
    return found;
}

static double scores_bytes(const json_record *r) {
    const double n = number(r, "seqlen");
    return number(r, "batch") * number(r, "heads") * n * n * 4.0;
}

/* A row that ran: its time and the FLOP rate the protocol's formula gives. */
static void check_measured(const json_record *r) {
    ck_assert_str_eq(text(r, "status"), "ok");
    const double ms = number(r, "median_ms");
    ck_assert(ms > 0);
    const double n = number(r, "seqlen");
    double flops = 4.0 * number(r, "batch") * number(r, "heads") * n * n * number(r, "head_dim");
    if (field(r, "causal")->number) flops *= 0.5;
    if (strcmp(text(r, "direction"), "fwd+bwd") == 0) flops *= 3.5;
    const double expected = flops / (ms * 1e-3) / 1e12;
    ck_assert_msg(fabs(number(r, "tflops") - expected) <= 1e-5 * expected, "tflops %g, formula gives %g",
                  number(r, "tflops"), expected);
    ck_assert(number(r, "extra_device_bytes") >= 0);
    ck_assert(number(r, "predicted_hbm_bytes") >= 0);
}

/* A row that did not run: every number null. */
static void check_not_measured(const json_record *r, const char *status) {
    ck_assert_str_eq(text(r, "status"), status);
    const char *measured[] = {"median_ms", "tflops", "extra_device_bytes", "predicted_hbm_bytes", "max_abs_err"};
    for (int i = 0; i < 5; ++i) ck_assert_msg(is_null(r, measured[i]), "%s should be null", measured[i]);
}

/* Splits one CSV line into fields (quoted fields may hold commas). */
static int csv_fields(const char *line, char fields[][128], int max) {
    int count = 0;
    size_t n = 0;
    int quoted = 0;
    fields[0][0] = '\0';
    for (const char *p = line; *p && *p != '\n'; ++p) {
        if (*p == '"') {
            if (quoted && p[1] == '"') {
                if (n < 127) fields[count][n++] = '"';
                ++p;
            } else {
                quoted = !quoted;
            }
        } else if (*p == ',' && !quoted) {
            fields[count][n] = '\0';
            if (++count == max) return -1;
            n = 0;
        } else if (n < 127) {
            fields[count][n++] = *p;
        }
    }
    fields[count][n] = '\0';
    return count + 1;
}

static void check_csv_matches(const char *name, const json_record *records, int count) {
    char path[1024];
    work_path(path, sizeof path, name);
    char *csv = read_text_file(path);
    const char *header = "impl,direction,batch,heads,seqlen,head_dim,causal,dtype,median_ms,tflops,"
                         "extra_device_bytes,predicted_hbm_bytes,max_abs_err,dropout,block_density,status,device,"
                         "varlen_ms,varlen_tflops,varlen_speedup,varlen_flops,padded_flops,varlen_tokens,kernel,softcap,"
                         "alibi_max_bias,bias_bytes,backend,forward_backend\n";
    ck_assert_msg(strncmp(csv, header, strlen(header)) == 0, "CSV header: %.200s", csv);
    const char *line = csv + strlen(header);
    int rows = 0;
    static char fields[FIELD_COUNT + 1][128];
    for (; *line; ++rows) {
        ck_assert_int_lt(rows, count);
        ck_assert_int_eq(csv_fields(line, fields, FIELD_COUNT + 1), FIELD_COUNT);
        const json_record *r = &records[rows];
        ck_assert_str_eq(fields[0], text(r, "impl"));
        ck_assert_str_eq(fields[1], text(r, "direction"));
        ck_assert_int_eq(atoi(fields[4]), (int)number(r, "seqlen"));
        ck_assert_str_eq(fields[15], text(r, "status"));
        ck_assert_str_eq(fields[16], text(r, "device"));
        /* Empty in CSV exactly where JSON has null. */
        for (int k = 8; k <= 12; ++k) ck_assert_int_eq(fields[k][0] == '\0', is_null(r, FIELDS[k]));
        for (int k = FIRST_VARLEN_COLUMN; k < FIRST_VARLEN_COLUMN + VARLEN_FIELD_COUNT; ++k) {
            ck_assert_str_eq(FIELDS[k], VARLEN_FIELDS[k - FIRST_VARLEN_COLUMN]);
            ck_assert_int_eq(fields[k][0] == '\0', is_null(r, FIELDS[k]));
            if (fields[k][0]) ck_assert(fabs(atof(fields[k]) - number(r, FIELDS[k])) <= 1e-5 * fabs(number(r, FIELDS[k])));
        }
        ck_assert_str_eq(FIELDS[KERNEL_COLUMN], "kernel");
        ck_assert_str_eq(fields[KERNEL_COLUMN], text(r, "kernel"));
        for (int k = KERNEL_COLUMN + 1; k < BACKEND_COLUMN; ++k)
            ck_assert(fabs(atof(fields[k]) - number(r, FIELDS[k])) <= 1e-6 * fabs(number(r, FIELDS[k])));
        for (int k = BACKEND_COLUMN; k < FIELD_COUNT; ++k) ck_assert_str_eq(fields[k], text(r, FIELDS[k]));
        const char *next = strchr(line, '\n');
        line = next ? next + 1 : line + strlen(line);
    }
    ck_assert_int_eq(rows, count);
    free(csv);
}

START_TEST(tiny_sweep_reports_every_field) {
    char json[1024], csv[1024];
    work_path(json, sizeof json, "sweep.json");
    work_path(csv, sizeof csv, "sweep.csv");
    char *args[] = {"--seqlens", "64,128", "--batch", "1", "--heads", "2", "--head-dim", "32", "--repeat", "2",
                    "--backward", "--json", json, "--csv", csv, NULL};
    const int rc = run_bench("sweep", args, NULL);
    char *err = captured("sweep", "err");
    ck_assert_msg(rc == 0, "exit status %d; stderr:\n%s", rc, err);
    free(err);

    json_record *records;
    const int count = read_records("sweep.json", &records);
    ck_assert_int_eq(count, 8);
    for (int i = 0; i < count; ++i) {
        check_schema(&records[i]);
        check_no_varlen(&records[i]);
        ck_assert_str_eq(text(&records[i], "device"), text(&records[0], "device"));
        ck_assert_int_eq((int)number(&records[i], "batch"), 1);
        ck_assert_int_eq((int)number(&records[i], "heads"), 2);
        ck_assert_int_eq((int)number(&records[i], "head_dim"), 32);
        ck_assert_int_eq((int)field(&records[i], "causal")->number, 0);
        ck_assert_str_eq(text(&records[i], "dtype"), "f32");
        /* float32: always the portable kernel */
        ck_assert_str_eq(text(&records[i], "kernel"), strcmp(text(&records[i], "impl"), "flash") == 0 ? "portable" : "standard");
        ck_assert_str_eq(text(&records[i], "backend"), "-");
    }
    const int seqlens[2] = {64, 128};
    for (int s = 0; s < 2; ++s) {
        const json_record *flash_fwd = find(records, count, seqlens[s], "flash", "fwd");
        const json_record *flash_fb = find(records, count, seqlens[s], "flash", "fwd+bwd");
        const json_record *std_fwd = find(records, count, seqlens[s], "standard", "fwd");
        const json_record *std_fb = find(records, count, seqlens[s], "standard", "fwd+bwd");
        check_measured(flash_fwd);
        check_measured(flash_fb);
        /* No scratch, or (a device with many compute units splits a call this small: split-KV) whole
         * partials: head_dim + 2 floats per split and row, never the N x N scores. */
        const double partial = number(flash_fwd, "batch") * number(flash_fwd, "heads") * seqlens[s] * (32 + 2) * 4.0;
        const double fwd_extra = number(flash_fwd, "extra_device_bytes");
        ck_assert_msg(fmod(fwd_extra, partial) == 0.0 && fwd_extra <= 256 * partial, "flash forward scratch %g",
                      fwd_extra);
        /* O(N) scratch for the backward, never the N x N scores. */
        ck_assert(number(flash_fb, "extra_device_bytes") < scores_bytes(flash_fb));
        check_measured(std_fwd);
        check_measured(std_fb);
        ck_assert(number(std_fwd, "extra_device_bytes") == scores_bytes(std_fwd));
        ck_assert(number(std_fb, "extra_device_bytes") >= scores_bytes(std_fb));
        ck_assert(is_null(std_fwd, "max_abs_err") && is_null(std_fb, "max_abs_err"));
        /* Inputs in [-1, 1]: outputs well under 1, so the bench's 1e-4 is absolute here. */
        ck_assert(number(flash_fwd, "max_abs_err") <= 1e-4);
        ck_assert(number(flash_fb, "max_abs_err") >= 0);
    }
    check_csv_matches("sweep.csv", records, count);
    char *out = captured("sweep", "out");
    ck_assert_msg(strstr(out, "TFLOP/s") && strstr(out, "forward+backward"), "table:\n%s", out);
    free(out);
    free(records);
}
END_TEST

START_TEST(memory_budget_makes_standard_out_of_memory) {
    char json[1024];
    work_path(json, sizeof json, "budget.json");
    char *args[] = {"--seqlens", "64,128", "--batch", "1", "--heads", "2", "--head-dim", "32", "--repeat", "2",
                    "--causal", "--memory-budget", "1", "--json", json, NULL};
    const int rc = run_bench("budget", args, NULL);
    char *err = captured("budget", "err");
    ck_assert_msg(rc == 0, "exit status %d; stderr:\n%s", rc, err);
    free(err);
    json_record *records;
    const int count = read_records("budget.json", &records);
    ck_assert_int_eq(count, 4);
    for (int i = 0; i < count; ++i) check_schema(&records[i]);
    /* The sweep goes on past an out-of-memory row. */
    for (int n = 64; n <= 128; n *= 2) {
        const json_record *flash = find(records, count, n, "flash", "fwd");
        ck_assert_int_eq((int)field(flash, "causal")->number, 1);
        check_measured(flash); /* causal: half the FLOPs */
        ck_assert(number(flash, "extra_device_bytes") == 0);
        ck_assert(is_null(flash, "max_abs_err"));
        check_not_measured(find(records, count, n, "standard", "fwd"),
                           "out of device memory");
    }
    free(records);
}
END_TEST

START_TEST(budget_between_sizes_checks_the_small_one) {
    char json[1024];
    work_path(json, sizeof json, "budget40k.json");
    /* N=64 needs 32 KiB of scores, N=128 needs 128 KiB. */
    char *args[] = {"--seqlens", "64,128", "--batch", "1", "--heads", "2", "--head-dim", "32", "--repeat", "1",
                    "--memory-budget", "40K", "--json", json, NULL};
    const int rc = run_bench("budget40k", args, NULL);
    char *err = captured("budget40k", "err");
    ck_assert_msg(rc == 0, "exit status %d; stderr:\n%s", rc, err);
    free(err);
    json_record *records;
    const int count = read_records("budget40k.json", &records);
    ck_assert_int_eq(count, 4);
    check_measured(find(records, count, 64, "standard", "fwd"));
    ck_assert(number(find(records, count, 64, "flash", "fwd"), "max_abs_err") <= 1e-4);
    check_not_measured(find(records, count, 128, "standard", "fwd"), "out of device memory");
    check_measured(find(records, count, 128, "flash", "fwd"));
    ck_assert(is_null(find(records, count, 128, "flash", "fwd"), "max_abs_err"));
    free(records);
}
END_TEST

/* The standard implementation is float32 only: half types are timed for flash alone. */
START_TEST(half_types_run) {
    const char *names[2] = {"f16", "bf16"};
    for (int t = 0; t < 2; ++t) {
        char json[1024], file[64];
        snprintf(file, sizeof file, "%s.json", names[t]);
        work_path(json, sizeof json, file);
        char *args[] = {"--seqlens", "64", "--batch", "1", "--heads", "2", "--head-dim", "32", "--repeat", "1",
                        "--dtype", (char *)names[t], "--impl", "flash", "--backward", "--json", json, NULL};
        const int rc = run_bench(names[t], args, NULL);
        char *err = captured(names[t], "err");
        ck_assert_msg(rc == 0, "%s: exit status %d; stderr:\n%s", names[t], rc, err);
        free(err);
        json_record *records;
        const int count = read_records(file, &records);
        ck_assert_int_eq(count, 2);
        for (int i = 0; i < count; ++i) {
            check_schema(&records[i]);
            check_measured(&records[i]);
            ck_assert_str_eq(text(&records[i], "dtype"), names[t]);
        }
        free(records);
    }
}
END_TEST

/* The float32-only standard implementation asked for f16 by the default
 * --impl flash,standard: like running out of memory, its rows say so
 * ("unsupported configuration"), flash is timed alone, and the run succeeds. */
START_TEST(standard_unsupported_dtype_is_a_marked_row) {
    char json[1024];
    work_path(json, sizeof json, "f16both.json");
    char *args[] = {"--seqlens", "32,64", "--batch", "1", "--heads", "1", "--head-dim", "16", "--repeat", "1",
                    "--dtype", "f16", "--json", json, NULL};
    const int rc = run_bench("f16both", args, NULL);
    char *err = captured("f16both", "err");
    ck_assert_msg(rc == 0 && strstr(err, "unsupported configuration"), "exit status %d; stderr:\n%s", rc, err);
    free(err);
    json_record *records;
    const int count = read_records("f16both.json", &records);
    ck_assert_int_eq(count, 4);
    for (int n = 32; n <= 64; n *= 2) {
        check_measured(find(records, count, n, "flash", "fwd"));
        check_not_measured(find(records, count, n, "standard", "fwd"), "unsupported configuration");
    }
    char *out = captured("f16both", "out");
    ck_assert_msg(strstr(out, "unsupported configuration") != NULL, "table:\n%s", out);
    free(out);
    free(records);
}
END_TEST

START_TEST(bad_options_exit_2) {
    char *cases[][7] = {{"--bogus", NULL},         {"--seqlens", "64,x", NULL}, {"--dtype", "f64", NULL},
                        {"--impl", "flash,flash", NULL}, {"--repeat", "0", NULL},   {"--plan", "1,2,3", NULL},
                        {"--head-dim", NULL},      {"--causal=1", NULL},        {"stray", NULL},
                        {"--block-density", "0.5", NULL} /* needs --impl flash */, {"--dropout", "1", NULL},
                        {"--impl", "flash", "--block-density", "0", NULL},
                        {"--impl", "flash", "--dropout", "0.99999999", NULL} /* 1.0 in float */,
                        {"--tensor-cores", "", NULL} /* 'bogus': tensor_cores_recorded */,
                        {"--softcap", "2", NULL} /* needs --impl flash */,
                        {"--impl", "flash", "--softcap", "0", NULL}, {"--impl", "flash", "--softcap", "-1", NULL},
                        {"--impl", "flash", "--alibi-max-bias", "nan", NULL},
                        {"--impl", "flash", "--alibi-max-bias", "1e39", NULL} /* inf in float */,
                        {"--bias", "full", NULL} /* needs --impl flash */, {"--impl", "flash", "--bias", "half", NULL},
                        {"--impl", "flash", "--bias", "full", "--varlen", "0.5,1", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const int rc = run_bench("bad", cases[i], NULL);
        ck_assert_msg(rc == 2, "%s: exit status %d", cases[i][0], rc);
        char *err = captured("bad", "err");
        ck_assert_msg(strstr(err, "usage: flashcl bench") != NULL, "%s: stderr:\n%s", cases[i][0], err);
        free(err);
    }
}
END_TEST

/* Block-sparse and dropout runs (flash only): they run, and their records
 * carry the density and the probability. */
START_TEST(block_density_and_dropout_recorded) {
    char json[1024];
    work_path(json, sizeof json, "sparse.json");
    char *args[] = {"--seqlens", "96,130", "--batch", "1", "--heads", "2", "--head-dim", "16", "--repeat", "1",
                    "--warmup", "0", "--impl", "flash", "--block-density", "0.5", "--block-size", "32",
                    "--dropout", "0.25", "--backward", "--json", json, NULL};
    const int rc = run_bench("sparse", args, NULL);
    char *err = captured("sparse", "err");
    ck_assert_msg(rc == 0, "exit %d, stderr:\n%s", rc, err);
    free(err);
    json_record *records = NULL;
    const int count = read_records("sparse.json", &records);
    ck_assert_int_eq(count, 4);
    for (int i = 0; i < count; ++i) {
        check_schema(&records[i]);
        ck_assert_str_eq(text(&records[i], "status"), "ok");
        ck_assert(fabs(number(&records[i], "block_density") - 0.5) < 1e-12);
        ck_assert(fabs(number(&records[i], "dropout") - 0.25) < 1e-6);
    }
    free(records);
}
END_TEST

/* Score-modifier and bias runs (flash only): they run, the table says which, and the records carry them. */
START_TEST(score_mods_recorded) {
    char json[1024], csv[1024];
    work_path(json, sizeof json, "mods.json");
    work_path(csv, sizeof csv, "mods.csv");
    char *args[] = {"--seqlens", "80", "--batch", "1", "--heads", "2", "--head-dim", "16", "--repeat", "1",
                    "--warmup", "0", "--impl", "flash", "--softcap", "5", "--alibi-max-bias", "8", "--bias", "full",
                    "--backward", "--json", json, "--csv", csv, NULL};
    const int rc = run_bench("mods", args, NULL);
    char *err = captured("mods", "err");
    char *out = captured("mods", "out");
    ck_assert_msg(rc == 0, "exit %d, stderr:\n%s", rc, err);
    ck_assert_msg(strstr(out, "score modifiers: softcap 5, ALiBi max_bias 8") != NULL, "stdout:\n%s", out);
    ck_assert_msg(strstr(out, "additive bias: (B, H, N, N)") != NULL, "stdout:\n%s", out);
    free(err);
    free(out);
    json_record *records = NULL;
    const int count = read_records("mods.json", &records);
    ck_assert_int_eq(count, 2);
    for (int i = 0; i < count; ++i) {
        check_schema(&records[i]);
        ck_assert_str_eq(text(&records[i], "status"), "ok");
        ck_assert(fabs(number(&records[i], "softcap") - 5.0) < 1e-12);
        ck_assert(fabs(number(&records[i], "alibi_max_bias") - 8.0) < 1e-12);
        /* B 1, H 2, 80 x 80 floats */
        ck_assert(fabs(number(&records[i], "bias_bytes") - 1 * 2 * 80 * 80 * 4.0) < 0.5);
    }
    check_csv_matches("mods.csv", records, count);
    free(records);
}
END_TEST

/* The FLOPs of the padded row by the protocol's formula. */
static double padded_flops_formula(const json_record *r) {
    const double n = number(r, "seqlen");
    double flops = 4.0 * number(r, "batch") * number(r, "heads") * n * n * number(r, "head_dim");
    if (field(r, "causal")->number) flops *= 0.5;
    if (strcmp(text(r, "direction"), "fwd+bwd") == 0) flops *= 3.5;
    return flops;
}

/* The JSON holds 6 significant digits (a relative rounding of up to 5e-6 per number): a ratio of two
 * printed numbers against the printed ratio can differ by three roundings, 1.5e-5 (seen: 1.04969 against
 * 1.04968 on rusticl). 3e-5 leaves room and still catches a wrong formula. */
static int close_to(double a, double b) { return fabs(a - b) <= 3e-5 * fabs(b); }

/* A flash row of a --varlen run: both times, their ratio, the FLOPs and tokens consistent. */
static void check_varlen_row(const json_record *r) {
    check_measured(r); /* the padded call, timed and counted as before */
    const double ms = number(r, "median_ms"), varlen_ms = number(r, "varlen_ms");
    ck_assert(varlen_ms > 0);
    ck_assert_msg(close_to(number(r, "varlen_speedup"), ms / varlen_ms), "varlen_speedup %g, times give %g",
                  number(r, "varlen_speedup"), ms / varlen_ms);
    const double padded = number(r, "padded_flops"), needed = number(r, "varlen_flops");
    ck_assert_msg(close_to(padded, padded_flops_formula(r)), "padded_flops %g, formula %g", padded,
                  padded_flops_formula(r));
    ck_assert_msg(needed > 0 && needed <= padded, "varlen_flops %g, padded_flops %g", needed, padded);
    ck_assert(close_to(number(r, "varlen_tflops"), needed / (varlen_ms * 1e-3) / 1e12));
    const double tokens = number(r, "varlen_tokens");
    ck_assert(tokens >= number(r, "batch") && tokens <= number(r, "batch") * number(r, "seqlen"));
}

/* Random lengths in [N/4, N]: every field present and consistent, the
 * forward and forward+backward rows of a size on the same batch, and the
 * lengths depending on the seed and N only. */
START_TEST(varlen_versus_padded_recorded) {
    char json[1024], csv[1024], json2[1024];
    work_path(json, sizeof json, "varlen.json");
    work_path(csv, sizeof csv, "varlen.csv");
    work_path(json2, sizeof json2, "varlen2.json");
    char *args[] = {"--seqlens", "64,100", "--batch", "3", "--heads", "2", "--head-dim", "16", "--repeat", "2",
                    "--warmup", "1", "--impl", "flash", "--varlen", "0.25,1", "--varlen-seed", "7", "--backward",
                    "--json", json, "--csv", csv, NULL};
    int rc = run_bench("varlen", args, NULL);
    char *err = captured("varlen", "err");
    ck_assert_msg(rc == 0, "exit %d, stderr:\n%s", rc, err);
    free(err);
    json_record *records = NULL;
    const int count = read_records("varlen.json", &records);
    ck_assert_int_eq(count, 4);
    for (int i = 0; i < count; ++i) {
        check_schema(&records[i]);
        check_varlen_row(&records[i]);
        const double n = number(&records[i], "seqlen");
        ck_assert(number(&records[i], "varlen_tokens") >= 3 * ceil(0.25 * n));
    }
    for (int n = 64; n <= 100; n += 36) {
        const json_record *fwd = find(records, count, n, "flash", "fwd"), *fb = find(records, count, n, "flash", "fwd+bwd");
        ck_assert(number(fwd, "varlen_tokens") == number(fb, "varlen_tokens"));
        ck_assert(close_to(number(fb, "varlen_flops"), 3.5 * number(fwd, "varlen_flops")));
    }
    check_csv_matches("varlen.csv", records, count);
    char *out = captured("varlen", "out");
    ck_assert_msg(strstr(out, "varlen vs padded, forward, flash") && strstr(out, "varlen vs padded, forward+backward"),
                  "table:\n%s", out);
    free(out);

    /* The same seed with other options: the same lengths. */
    char *again[] = {"--seqlens", "100", "--batch", "3", "--heads", "1", "--head-dim", "32", "--repeat", "1",
                     "--warmup", "0", "--impl", "flash", "--varlen", "0.25,1", "--varlen-seed", "7", "--json", json2,
                     NULL};
    rc = run_bench("varlen2", again, NULL);
    ck_assert_int_eq(rc, 0);
    json_record *second = NULL;
    ck_assert_int_eq(read_records("varlen2.json", &second), 1);
    ck_assert(number(&second[0], "varlen_tokens") == number(find(records, count, 100, "flash", "fwd"), "varlen_tokens"));
    free(second);
    free(records);
}
END_TEST

/* Fixed lengths give exact FLOP counts: all at N (the packed batch needs
 * what the padded one does) and all at N/2 (a quarter), with causal, a
 * block mask and dropout on both calls (varlen combined with each). */
START_TEST(varlen_fixed_lengths_exact) {
    const struct {
        const char *range, *name;
        double tokens_per_sequence, flops_fraction;
    } cases[] = {{"1,1", "varlen_full", 64, 1.0}, {"0.5,0.5", "varlen_half", 32, 0.25}};
    for (int c = 0; c < 2; ++c) {
        char json[1024], file[64];
        snprintf(file, sizeof file, "%s.json", cases[c].name);
        work_path(json, sizeof json, file);
        char *args[] = {"--seqlens", "64", "--batch", "3", "--heads", "2", "--head-dim", "16", "--repeat", "1",
                        "--warmup", "0", "--impl", "flash", "--causal", "--block-density", "0.5", "--block-size",
                        "16", "--dropout", "0.1", "--varlen", (char *)cases[c].range, "--backward", "--json", json,
                        NULL};
        const int rc = run_bench(cases[c].name, args, NULL);
        char *err = captured(cases[c].name, "err");
        ck_assert_msg(rc == 0, "%s: exit %d, stderr:\n%s", cases[c].range, rc, err);
        free(err);
        json_record *records = NULL;
        const int count = read_records(file, &records);
        ck_assert_int_eq(count, 2);
        for (int i = 0; i < count; ++i) {
            check_schema(&records[i]);
            check_varlen_row(&records[i]);
            ck_assert(number(&records[i], "varlen_tokens") == 3 * cases[c].tokens_per_sequence);
            ck_assert_msg(close_to(number(&records[i], "varlen_flops"),
                                   cases[c].flops_fraction * number(&records[i], "padded_flops")),
                          "%s: varlen_flops %g, padded_flops %g", cases[c].range, number(&records[i], "varlen_flops"),
                          number(&records[i], "padded_flops"));
        }
        free(records);
    }
}
END_TEST

/* One tiny f16 flash run with --tensor-cores mode (d=32: the kernel takes
 * it, and a cold POCL build of its emulation takes about 30 s, a third of
 * d=64's; N=100 leaves a partial key block). Returns the record count; the
 * records, JSON and CSV agree. */
static int run_tensor_cores(const char *mode, json_record **records) {
    char json[1024], csv[1024], prefix[32], file[64], csv_file[64];
    snprintf(prefix, sizeof prefix, "tc_%s", mode);
    snprintf(file, sizeof file, "%s.json", prefix);
    snprintf(csv_file, sizeof csv_file, "%s.csv", prefix);
    work_path(json, sizeof json, file);
    work_path(csv, sizeof csv, csv_file);
    char *args[] = {"--seqlens", "100", "--batch", "1", "--heads", "2", "--head-dim", "32", "--dtype", "f16",
                    "--impl", "flash", "--tensor-cores", (char *)mode, "--repeat", "1", "--warmup", "0",
                    "--backward", "--json", json, "--csv", csv, NULL};
    const int rc = run_bench(prefix, args, NULL);
    char *err = captured(prefix, "err");
    ck_assert_msg(rc == 0, "--tensor-cores %s: exit %d, stderr:\n%s", mode, rc, err);
    free(err);
    const int count = read_records(file, records);
    ck_assert_int_eq(count, 2);
    for (int i = 0; i < count; ++i) {
        check_schema(&(*records)[i]);
        check_measured(&(*records)[i]);
    }
    check_csv_matches(csv_file, *records, count);
    return count;
}

/* emulate: both rows (fwd+bwd included: its forward) record the emulated
 * kernel and the table names it; off: the portable kernel. */
START_TEST(tensor_cores_recorded) {
    json_record *records = NULL;
    int count = run_tensor_cores("emulate", &records);
    for (int i = 0; i < count; ++i) {
        ck_assert_str_eq(text(&records[i], "kernel"), "tensor-core-emulated");
        ck_assert_str_eq(text(&records[i], "backend"), "emulated");
        ck_assert_str_eq(text(&records[i], "forward_backend"), "emulated");
    }
    free(records);
    char *out = captured("tc_emulate", "out");
    ck_assert_msg(strstr(out, "   100     1  flash/tensor-core-emulated ") && strstr(out, "impl/kernel: flash rows"),
                  "table:\n%s", out);
    free(out);

    count = run_tensor_cores("off", &records);
    for (int i = 0; i < count; ++i) {
        ck_assert_str_eq(text(&records[i], "kernel"), "portable");
        ck_assert_str_eq(text(&records[i], "backend"), "-");
        ck_assert_str_eq(text(&records[i], "forward_backend"), "-");
    }
    free(records);
    out = captured("tc_off", "out");
    ck_assert_msg(strstr(out, "   100     1  flash/portable ") && !strstr(out, "flash/tensor-core"), "table:\n%s", out);
    free(out);

    char *bad[] = {"--tensor-cores", "bogus", NULL};
    ck_assert_int_eq(run_bench("tc_bad", bad, NULL), 2);
    char *err = captured("tc_bad", "err");
    ck_assert_msg(strstr(err, "bad value 'bogus' for --tensor-cores"), "stderr:\n%s", err);
    free(err);
}
END_TEST

/* Bad --varlen values: exit 2 with a message naming the option. */
START_TEST(varlen_bad_values_exit_2) {
    char *cases[][6] = {{"--varlen", "0,1", NULL},
                        {"--varlen", "0.5", NULL},
                        {"--varlen", "0.8,0.5", NULL},
                        {"--varlen", "0.5,1.5", NULL},
                        {"--varlen", "a,b", NULL},
                        {"--varlen", "0.5,1,", NULL},
                        {"--varlen", "0.5,1", "--varlen-seed", "x", NULL},
                        {"--varlen", "0.5,1", "--varlen-seed", "-1", NULL},
                        {"--varlen-seed", "3", NULL},
                        {"--varlen", "0.5,1", "--impl", "standard", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const int rc = run_bench("varlen_bad", cases[i], NULL);
        char *err = captured("varlen_bad", "err");
        ck_assert_msg(rc == 2, "%s %s: exit status %d", cases[i][0], cases[i][1], rc);
        ck_assert_msg(strstr(err, "flashcl bench: ") && strstr(err, "--varlen"), "%s %s: stderr:\n%s", cases[i][0],
                      cases[i][1], err);
        free(err);
    }
}
END_TEST

START_TEST(help_exits_0) {
    char *args[] = {"--help", NULL};
    ck_assert_int_eq(run_bench("help", args, NULL), 0);
    char *out = captured("help", "out");
    ck_assert(strstr(out, "usage: flashcl bench") && strstr(out, "--memory-budget") && strstr(out, "--plot") &&
              strstr(out, "--varlen LO,HI") && strstr(out, "--varlen-seed") &&
              strstr(out, "--tensor-cores auto|off|emulate"));
    free(out);
}
END_TEST

START_TEST(forced_plan_is_used) {
    char json[1024];
    work_path(json, sizeof json, "plan.json");
    /* Small enough for every device (32 KiB of local memory); N=100 leaves a partial block. */
    char *args[] = {"--seqlens", "100", "--batch", "1", "--heads", "2", "--head-dim", "64", "--repeat", "1",
                    "--plan", "16,16,4,4", "--json", json, NULL};
    const int rc = run_bench("plan_ok", args, NULL);
    char *err = captured("plan_ok", "err");
    ck_assert_msg(rc == 0, "exit status %d; stderr:\n%s", rc, err);
    free(err);
    json_record *records;
    const int count = read_records("plan.json", &records);
    ck_assert_int_eq(count, 2);
    const json_record *flash = find(records, count, 100, "flash", "fwd");
    check_measured(flash);
    ck_assert(number(flash, "max_abs_err") <= 1e-4);
    free(records);
}
END_TEST

START_TEST(impossible_plan_fails) {
    char *args[] = {"--seqlens", "64", "--batch", "1", "--heads", "1", "--head-dim", "32", "--impl", "flash",
                    "--plan", "65536,65536,1,1", NULL};
    const int rc = run_bench("plan", args, NULL);
    char *err = captured("plan", "err");
    ck_assert_msg(rc == 1 && strstr(err, "--plan"), "exit status %d; stderr:\n%s", rc, err);
    free(err);
}
END_TEST

static void check_png(const char *name) {
    char path[1024];
    work_path(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s was not written", path);
    unsigned char head[8] = {0};
    const size_t got = fread(head, 1, 8, f);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ck_assert(got == 8 && memcmp(head, signature, 8) == 0);
    ck_assert_int_gt(size, 2000);
}

START_TEST(plot_is_drawn) {
    char png[1024];
    work_path(png, sizeof png, "plot.png");
    remove(png);
    char *args[] = {"--seqlens", "32,64", "--batch", "1", "--heads", "1", "--head-dim", "16", "--repeat", "1",
                    "--warmup", "1", "--backward", "--plot", png, NULL};
    const int rc = run_bench("plot", args, NULL);
    char *err = captured("plot", "err");
    ck_assert_msg(rc == 0, "exit status %d; stderr:\n%s", rc, err);
    ck_assert_msg(strstr(err, "gnuplot") == NULL, "stderr:\n%s", err);
    free(err);
    check_png("plot.png");
}
END_TEST

START_TEST(plot_without_gnuplot_fails_after_json) {
    char json[1024], png[1024];
    work_path(json, sizeof json, "nognuplot.json");
    work_path(png, sizeof png, "nognuplot.png");
    char *args[] = {"--seqlens", "32", "--batch", "1", "--heads", "1", "--head-dim", "16", "--repeat", "1",
                    "--impl", "flash", "--json", json, "--plot", png, NULL};
    /* A PATH holding no gnuplot: the work folder. */
    const int rc = run_bench("nognuplot", args, g_workdir);
    char *err = captured("nognuplot", "err");
    ck_assert_msg(rc == 1 && strstr(err, "gnuplot not found"), "exit status %d; stderr:\n%s", rc, err);
    free(err);
    json_record *records;
    ck_assert_int_eq(read_records("nognuplot.json", &records), 1);
    check_measured(&records[0]);
    free(records);
}
END_TEST

static Suite *bench_suite(void) {
    Suite *suite = suite_create("bench");
    TCase *tc = tcase_create("bench");
    /* Cold kernel builds (flash and CLBlast) on a CPU device take a while. */
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, tiny_sweep_reports_every_field);
    tcase_add_test(tc, memory_budget_makes_standard_out_of_memory);
    tcase_add_test(tc, budget_between_sizes_checks_the_small_one);
    tcase_add_test(tc, half_types_run);
    tcase_add_test(tc, standard_unsupported_dtype_is_a_marked_row);
    tcase_add_test(tc, forced_plan_is_used);
    tcase_add_test(tc, bad_options_exit_2);
    tcase_add_test(tc, help_exits_0);
    tcase_add_test(tc, block_density_and_dropout_recorded);
    tcase_add_test(tc, score_mods_recorded);
    tcase_add_test(tc, varlen_versus_padded_recorded);
    tcase_add_test(tc, varlen_fixed_lengths_exact);
    tcase_add_test(tc, varlen_bad_values_exit_2);
    tcase_add_test(tc, tensor_cores_recorded);
    tcase_add_test(tc, impossible_plan_fails);
    tcase_add_test(tc, plot_is_drawn);
    tcase_add_test(tc, plot_without_gnuplot_fails_after_json);
    suite_add_tcase(suite, tc);
    return suite;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s WORKDIR BENCH-PROGRAM [LEADING-ARGS...]\n", argv[0]);
        return 2;
    }
    g_workdir = argv[1];
    g_command = argv + 2;
    SRunner *runner = srunner_create(bench_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? 1 : 0;
}

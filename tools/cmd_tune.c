/* cmd_tune.c: `flashcl tune` -- searches the tile plans of one pass on the current device, checks and times each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_buffers.h"
#include "bench_record.h"
#include "bench_run.h"
#include "cli_util.h"
#include "commands.h"
#include "dtype_option.h"

/* The candidate grid: powers of two for both block sizes and both thread
 * counts. flashcl_plan_check decides which of them the device can run;
 * work-groups below one warp/wavefront are left out as never competitive. */
static const int BLOCKS[] = {8, 16, 32, 64, 128};
static const int THREADS[] = {1, 2, 4, 8, 16, 32};
#define MIN_WORK_GROUP 32
#define MAX_CANDIDATES 1024

typedef struct tune_options {
    flashcl_pass pass;
    int head_dim, seqlen, batch, heads, causal;
    flashcl_dtype dtype;
    int repeat, warmup, top;
    const char *device;
    const char *json_path;
    const char *plan_list; /* --plans: "BQ,BK,TQ,TK:..." instead of the grid */
} tune_options;

typedef struct tune_result {
    flashcl_plan plan;
    double median_ms;
    double max_abs_err;
    int ok;            /* ran and agreed with the default plan */
    char status[192]; /* "ok" or why not */
} tune_result;

static void print_help(FILE *out) {
    fprintf(out,
            "usage: flashcl tune [options]\n\n"
            "Searches the tile plans of one pass on the chosen device. Every plan of the\n"
            "grid block_q, block_k in {8..128} x threads_q, threads_k in {1..32} that passes\n"
            "the planner's checks (local memory, work-group size, register budget) is built,\n"
            "run on random inputs, compared with the default plan's result, and timed\n"
            "(median of R runs after a warm-up, wall clock around clFinish). Prints the\n"
            "ranking and the fastest plan as a line for src/tuned_plans.c.\n\n"
            "  --pass forward|backward  which kernels to tune (default forward); backward\n"
            "                           plans are timed as forward+backward (same forward plan)\n"
            "  --head-dim D             head dimension (default 64)\n"
            "  --seqlen N               sequence length (default 2048)\n"
            "  --batch B                batch (default 4)\n"
            "  --heads H                heads (default 16)\n"
            "  --causal                 causal mask\n"
            "  --dtype f32|f16|bf16     storage type (default f32)\n"
            "  --repeat R               timed runs per plan (default 5)\n"
            "  --warmup W               untimed runs per plan, kernel build included (default 1)\n"
            "  --top K                  rows of the ranking to print (default 10, 0 = all)\n"
            "  --device SPEC            device index or name substring\n"
            "  --plans LIST             only these plans, BQ,BK,TQ,TK separated by ':'\n"
            "  --json FILE              write every plan's result as a JSON list\n"
            "  --help                   this text\n\n"
            "A plan is accepted when max|plan - default| <= tol * max(1, max|default|), with\n"
            "tol = 1e-4 (f32), 4e-3 (f16), 3e-2 (bf16), on O (forward) or dQ, dK, dV\n"
            "(backward). Exit status: 0 every plan agreed, 1 a plan disagreed or nothing\n"
            "could run, 2 bad options.\n");
}

/* Every item of a --plans list is BQ,BK,TQ,TK: checked while parsing, so a typo is a usage error at once, not
 * after the default plan has been built and run (27 s on POCL at the default sizes). */
static int plan_list_syntax(const char *list) {
    char *copy = strdup(list);
    if (!copy) return -1;
    int result = 0, items = 0;
    for (char *save = NULL, *item = strtok_r(copy, ":", &save); item; item = strtok_r(NULL, ":", &save), ++items) {
        flashcl_plan p;
        if (cli_parse_plan(item, &p) != 0) {
            fprintf(stderr, "flashcl tune: --plans: '%s' is not BQ,BK,TQ,TK\n", item);
            result = -1;
            break;
        }
    }
    if (result == 0 && items == 0) {
        fprintf(stderr, "flashcl tune: --plans lists no plan\n");
        result = -1;
    }
    free(copy);
    return result;
}

static int parse_options(int argc, char **argv, tune_options *o) {
    *o = (tune_options){FLASHCL_PASS_FORWARD, 64, 2048, 4, 16, 0, FLASHCL_DTYPE_F32, 5, 1, 10, NULL, NULL, NULL};
    for (int i = 1; i < argc; ++i) {
        const char *value = NULL;
        int got;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--causal") == 0) {
            o->causal = 1;
            continue;
        }
#define INT_OPTION(flag, field, lo, hi)                                                                    \
    if ((got = cli_option_value(argc, argv, &i, flag, &value)) != 0) {                                     \
        if (got < 0 || cli_parse_int(value, lo, hi, &o->field) != 0) {                                     \
            fprintf(stderr, "flashcl tune: %s needs an integer in [%d, %d]\n", flag, (int)(lo), (int)(hi)); \
            return -1;                                                                                     \
        }                                                                                                  \
        continue;                                                                                          \
    }
        INT_OPTION("--head-dim", head_dim, 1, FLASHCL_MAX_HEAD_DIM)
        INT_OPTION("--seqlen", seqlen, 1, 1 << 20)
        INT_OPTION("--batch", batch, 1, 1 << 16)
        INT_OPTION("--heads", heads, 1, 1 << 12)
        INT_OPTION("--repeat", repeat, 1, 1000)
        INT_OPTION("--warmup", warmup, 0, 100)
        INT_OPTION("--top", top, 0, MAX_CANDIDATES)
#undef INT_OPTION
        if ((got = cli_option_value(argc, argv, &i, "--pass", &value)) != 0) {
            if (got > 0 && strcmp(value, "forward") == 0) o->pass = FLASHCL_PASS_FORWARD;
            else if (got > 0 && strcmp(value, "backward") == 0) o->pass = FLASHCL_PASS_BACKWARD;
            else {
                fprintf(stderr, "flashcl tune: --pass takes forward or backward\n");
                return -1;
            }
            continue;
        }
        if ((got = cli_option_value(argc, argv, &i, "--dtype", &value)) != 0) {
            if (got < 0 || cli_dtype_parse(value, &o->dtype) != 0) {
                fprintf(stderr, "flashcl tune: --dtype takes f32, f16 or bf16\n");
                return -1;
            }
            continue;
        }
        if ((got = cli_option_value(argc, argv, &i, "--device", &o->device)) != 0) {
            if (got < 0) return -1;
            continue;
        }
        if ((got = cli_option_value(argc, argv, &i, "--plans", &o->plan_list)) != 0) {
            if (got < 0 || plan_list_syntax(o->plan_list) != 0) return -1;
            continue;
        }
        if ((got = cli_option_value(argc, argv, &i, "--json", &o->json_path)) != 0) {
            if (got < 0) return -1;
            continue;
        }
        fprintf(stderr, "flashcl tune: unknown option '%s' (see flashcl tune --help)\n", argv[i]);
        return -1;
    }
    return 0;
}

/* The plans of --plans (their syntax checked by parse_options), each checked against the device before anything
 * runs: one that does not fit is an error naming the reason, not a silently shorter list. */
static int listed_plans(const flashcl_device_limits *limits, const tune_options *o, flashcl_plan *out,
                        size_t *count) {
    *count = 0;
    char *copy = strdup(o->plan_list);
    if (!copy) return -1;
    int result = 0;
    for (char *save = NULL, *item = strtok_r(copy, ":", &save); item; item = strtok_r(NULL, ":", &save)) {
        flashcl_plan p;
        char reason[160] = "";
        if (cli_parse_plan(item, &p) != 0) { /* parse_options checked every item */
            result = -1;
            break;
        }
        if (flashcl_plan_check(limits, o->pass, o->head_dim, o->dtype, &p, reason, sizeof reason) != FLASHCL_SUCCESS) {
            fprintf(stderr, "flashcl tune: --plans: %s does not fit this device: %s\n", item, reason);
            result = -1;
            break;
        }
        if (*count == MAX_CANDIDATES) break;
        out[(*count)++] = p;
    }
    free(copy);
    return result;
}

/* Every grid plan the device can run, in grid order. */
static size_t candidate_plans(const flashcl_device_limits *limits, const tune_options *o, flashcl_plan *out) {
    size_t count = 0;
    for (size_t a = 0; a < sizeof BLOCKS / sizeof BLOCKS[0]; ++a)
        for (size_t b = 0; b < sizeof BLOCKS / sizeof BLOCKS[0]; ++b)
            for (size_t c = 0; c < sizeof THREADS / sizeof THREADS[0]; ++c)
                for (size_t d = 0; d < sizeof THREADS / sizeof THREADS[0]; ++d) {
                    flashcl_plan p = {BLOCKS[a], BLOCKS[b], THREADS[c], THREADS[d], 0, 0};
                    if (p.threads_q * p.threads_k < MIN_WORK_GROUP) continue;
                    if (flashcl_plan_check(limits, o->pass, o->head_dim, o->dtype, &p, NULL, 0) != FLASHCL_SUCCESS)
                        continue;
                    if (count < MAX_CANDIDATES) out[count++] = p;
                }
    return count;
}

static int same_plan(const flashcl_plan *a, const flashcl_plan *b) {
    return a->block_q == b->block_q && a->block_k == b->block_k && a->threads_q == b->threads_q &&
           a->threads_k == b->threads_k;
}

static double tolerance(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F16 ? 4e-3 : dtype == FLASHCL_DTYPE_BF16 ? 3e-2 : 1e-4;
}

/* max|x - ref| and whether it is within tolerance of ref's scale. */
static int agrees(const float *x, const float *ref, size_t count, flashcl_dtype dtype, double *max_abs_err) {
    double err = 0.0, scale = 1.0;
    for (size_t i = 0; i < count; ++i) {
        const double diff = fabs((double)x[i] - (double)ref[i]);
        if (!(diff <= err)) err = diff; /* NaN propagates */
        if (fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
    }
    *max_abs_err = err;
    return err <= tolerance(dtype) * scale;
}

typedef struct tune_session {
    flashcl_context *ctx;
    const tune_options *options;
    flashcl_attention_desc desc;
    bench_buffers buffers;
    float *reference; /* outputs of the default plan */
    size_t reference_count;
} tune_session;

static bench_timing_request timing_request(const tune_session *s) {
    return (bench_timing_request){s->ctx, &s->desc, &s->buffers, FLASHCL_IMPL_FLASH,
                                  s->options->pass == FLASHCL_PASS_FORWARD ? BENCH_DIR_FORWARD
                                                                           : BENCH_DIR_FORWARD_BACKWARD,
                                  s->options->warmup, s->options->repeat, NULL};
}

static void try_plan(tune_session *s, const flashcl_plan *plan, tune_result *r) {
    *r = (tune_result){*plan, NAN, NAN, 0, ""};
    flashcl_status status = flashcl_context_force_plan(s->ctx, s->options->pass, plan);
    const bench_timing_request request = timing_request(s);
    float *out = NULL;
    size_t count = 0;
    if (status == FLASHCL_SUCCESS) status = bench_capture(&request, &out, &count);
    if (status != FLASHCL_SUCCESS) {
        snprintf(r->status, sizeof r->status, "failed: %s", flashcl_status_string(status));
        return;
    }
    const int same = count == s->reference_count &&
                     agrees(out, s->reference, count, s->options->dtype, &r->max_abs_err);
    free(out);
    if (!same) {
        snprintf(r->status, sizeof r->status, "WRONG: differs from the default plan by %.3g", r->max_abs_err);
        return;
    }
    bench_record record;
    memset(&record, 0, sizeof record);
    status = bench_time(&request, &record);
    if (status != FLASHCL_SUCCESS || !record.ok) {
        snprintf(r->status, sizeof r->status, "failed: %s", record.status);
        return;
    }
    r->median_ms = record.median_ms;
    r->ok = 1;
    snprintf(r->status, sizeof r->status, "ok");
}

static int by_time(const void *a, const void *b) {
    const tune_result *x = a, *y = b;
    if (x->ok != y->ok) return y->ok - x->ok;
    if (!x->ok) return 0;
    return (x->median_ms > y->median_ms) - (x->median_ms < y->median_ms);
}

static int write_json(const char *path, const tune_options *o, const char *device, const tune_result *results,
                      size_t count) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flashcl tune: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "[\n");
    for (size_t i = 0; i < count; ++i) {
        const tune_result *r = &results[i];
        fprintf(f,
                "  {\"device\": \"%s\", \"pass\": \"%s\", \"head_dim\": %d, \"seqlen\": %d, \"batch\": %d, "
                "\"heads\": %d, \"causal\": %d, \"dtype\": \"%s\", \"block_q\": %d, \"block_k\": %d, "
                "\"threads_q\": %d, \"threads_k\": %d, \"local_mem_bytes\": %zu, ",
                device, o->pass == FLASHCL_PASS_FORWARD ? "forward" : "backward", o->head_dim, o->seqlen, o->batch,
                o->heads, o->causal, cli_dtype_word(o->dtype), r->plan.block_q, r->plan.block_k,
                r->plan.threads_q, r->plan.threads_k, r->plan.local_mem_bytes);
        if (r->ok) fprintf(f, "\"median_ms\": %.6g, ", r->median_ms);
        else fprintf(f, "\"median_ms\": null, ");
        if (isfinite(r->max_abs_err)) fprintf(f, "\"max_abs_err\": %.6g, ", r->max_abs_err);
        else fprintf(f, "\"max_abs_err\": null, ");
        fprintf(f, "\"ok\": %s, \"status\": \"%s\"}%s\n", r->ok ? "true" : "false", r->status,
                i + 1 < count ? "," : "");
    }
    fprintf(f, "]\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs the default plan for the reference outputs; returns its plan. */
static flashcl_status default_reference(tune_session *s, flashcl_plan *plan) {
    flashcl_status status = flashcl_context_plan(s->ctx, s->options->pass, &s->desc, plan);
    if (status != FLASHCL_SUCCESS) return status;
    const bench_timing_request request = timing_request(s);
    return bench_capture(&request, &s->reference, &s->reference_count);
}

static void print_ranking(const tune_options *o, const tune_result *results, size_t count, const flashcl_plan *def,
                          double default_ms) {
    const double flops = 4.0 * o->batch * o->heads * (double)o->seqlen * o->seqlen * o->head_dim *
                         (o->causal ? 0.5 : 1.0) * (o->pass == FLASHCL_PASS_BACKWARD ? 3.5 : 1.0);
    printf("%4s  %-14s %10s %10s %9s %10s  %s\n", "rank", "plan", "work-group", "local B", "ms", "TFLOP/s",
           "status");
    const size_t shown = (o->top == 0 || (size_t)o->top > count) ? count : (size_t)o->top;
    for (size_t i = 0; i < count; ++i) {
        const tune_result *r = &results[i];
        /* Wrong plans are always shown: they are kernel bugs. */
        if (i >= shown && r->ok) continue;
        char plan[48];
        snprintf(plan, sizeof plan, "%d,%d,%d,%d", r->plan.block_q, r->plan.block_k, r->plan.threads_q,
                 r->plan.threads_k);
        const int is_default = same_plan(&r->plan, def);
        printf("%4zu  %-14s %10zu %10zu %9.3f %10.3f  %s%s\n", i + 1, plan, r->plan.work_group_size,
               r->plan.local_mem_bytes, r->median_ms, r->ok ? flops / (r->median_ms * 1e9) : NAN, r->status,
               is_default ? " (default)" : "");
    }
    if (count > 0 && results[0].ok) {
        const flashcl_plan *b = &results[0].plan;
        printf("\nfastest: %d,%d,%d,%d  %.3f ms (default plan %d,%d,%d,%d: %.3f ms, %.2fx)\n", b->block_q,
               b->block_k, b->threads_q, b->threads_k, results[0].median_ms, def->block_q, def->block_k,
               def->threads_q, def->threads_k, default_ms, default_ms / results[0].median_ms);
        printf("src/tuned_plans.c entry: {{\"<device substring>\", NULL}, %s, FLASHCL_DTYPE_%s, %d, "
               "{%d, %d, %d, %d, 0, 0}},\n",
               o->pass == FLASHCL_PASS_FORWARD ? "FLASHCL_PASS_FORWARD" : "FLASHCL_PASS_BACKWARD",
               o->dtype == FLASHCL_DTYPE_F32 ? "F32" : o->dtype == FLASHCL_DTYPE_F16 ? "F16" : "BF16", o->head_dim,
               b->block_q, b->block_k, b->threads_q, b->threads_k);
    }
}

int flashcl_cmd_tune(int argc, char **argv) {
    tune_options o;
    const int parsed = parse_options(argc, argv, &o);
    if (parsed != 0) return parsed > 0 ? FLASHCL_EXIT_OK : FLASHCL_EXIT_USAGE;

    flashcl_context_options copts;
    flashcl_context_options_init(&copts);
    copts.device = o.device;
    tune_session s;
    memset(&s, 0, sizeof s);
    s.options = &o;
    flashcl_status status = flashcl_context_create(&s.ctx, &copts);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("tune", "creating the context", NULL, status);
        return FLASHCL_EXIT_FAILURE;
    }
    /* tune ranks the portable kernels' tiles (a forced plan runs them): the
     * default it compares against must be their plan too, not the
     * tensor-core kernel's. */
    flashcl_context_set_tensor_cores(s.ctx, FLASHCL_TENSOR_CORES_OFF);
    flashcl_attention_desc_init(&s.desc, o.batch, o.heads, o.seqlen, o.seqlen, o.head_dim);
    s.desc.causal = o.causal;
    s.desc.dtype = o.dtype;

    int exit_code = FLASHCL_EXIT_FAILURE;
    flashcl_plan *plans = malloc(MAX_CANDIDATES * sizeof *plans);
    tune_result *results = malloc(MAX_CANDIDATES * sizeof *results);
    char message[256] = "";
    char device[256];
    cli_describe_device(flashcl_context_device(s.ctx), device, sizeof device);
    flashcl_device_limits limits;
    flashcl_plan def;
    size_t count = 0;
    if (!plans || !results) {
        fprintf(stderr, "flashcl tune: out of host memory\n");
    } else if ((status = flashcl_context_limits(s.ctx, &limits)) != FLASHCL_SUCCESS) {
        cli_report_library_error("tune", "reading the device limits", s.ctx, status);
    } else if (o.plan_list && listed_plans(&limits, &o, plans, &count) != 0) {
        /* said why; checked before the inputs are made and the default plan runs */
    } else if ((status = bench_buffers_create(s.ctx, &s.desc, o.pass == FLASHCL_PASS_BACKWARD, 0.0, 12345u,
                                              &s.buffers, message, sizeof message)) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl tune: allocating the inputs: %s\n", message);
    } else if ((status = default_reference(&s, &def)) != FLASHCL_SUCCESS) {
        cli_report_library_error("tune", "running the default plan", s.ctx, status);
    } else {
        if (!o.plan_list) count = candidate_plans(&limits, &o, plans);
        /* The default plan is always timed, so the ranking says what tuning gains. */
        int listed = 0;
        for (size_t i = 0; i < count; ++i) listed |= same_plan(&plans[i], &def);
        if (!listed && count < MAX_CANDIDATES) plans[count++] = def;
        printf("tune %s: d=%d, N=%d, B=%d, H=%d, %s, %s, median of %d runs; device: %s\n",
               o.pass == FLASHCL_PASS_FORWARD ? "forward" : "backward (timed as forward+backward)", o.head_dim,
               o.seqlen, o.batch, o.heads, o.causal ? "causal" : "not causal", cli_dtype_word(o.dtype), o.repeat,
               device);
        size_t wrong = 0, ran = 0;
        double default_ms = NAN;
        for (size_t i = 0; i < count; ++i) {
            fprintf(stderr, "flashcl tune: plan %zu/%zu: %d,%d,%d,%d\n", i + 1, count, plans[i].block_q,
                    plans[i].block_k, plans[i].threads_q, plans[i].threads_k);
            try_plan(&s, &plans[i], &results[i]);
            wrong += strncmp(results[i].status, "WRONG", 5) == 0;
            ran += results[i].ok;
            if (results[i].ok && same_plan(&plans[i], &def)) default_ms = results[i].median_ms;
        }
        qsort(results, count, sizeof *results, by_time);
        print_ranking(&o, results, count, &def, default_ms);
        printf("%zu plans tried, %zu ran and agreed, %zu disagreed with the default plan\n", count, ran, wrong);
        if (o.json_path && write_json(o.json_path, &o, device, results, count) != 0) wrong = 1;
        exit_code = (wrong == 0 && ran > 0) ? FLASHCL_EXIT_OK : FLASHCL_EXIT_FAILURE;
    }
    free(s.reference);
    bench_buffers_release(&s.buffers);
    free(plans);
    free(results);
    flashcl_context_free(s.ctx);
    return exit_code;
}

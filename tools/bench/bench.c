/* bench.c: `flashcl bench`: the sweep over sequence lengths, implementations and directions, and the exit status. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_buffers.h"
#include "bench_decode.h"
#include "bench_options.h"
#include "bench_record.h"
#include "bench_report.h"
#include "bench_run.h"
#include "bench_varlen.h"

/* Allowed max|flash - standard| relative to max(1, max|standard|). Both
 * compute in float from the same rounded inputs, so f32 outputs differ by
 * summation order only; f16 and bf16 outputs by about one rounding of the
 * storage type (2^-11 and 2^-8 relative), given a few units of margin. */
static double check_tolerance(flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16: return 4e-3;
    case FLASHCL_DTYPE_BF16: return 3e-2;
    default: return 1e-4;
    }
}

typedef struct sweep_state {
    flashcl_context *ctx;
    const bench_options *options;
    bench_record_list records;
    int failed; /* a measurement that should have run did not, or a check failed */
    double bias_bytes; /* the current size's --bias tensor, bytes (0: none) */
} sweep_state;

static void push(sweep_state *s, const bench_record *record) {
    if (!bench_records_push(&s->records, record)) {
        fprintf(stderr, "flashcl bench: out of host memory for the results\n");
        s->failed = 1;
    }
}

/* Flash and standard ran on the same inputs: compare and note the result on the flash record. */
static void compare_outputs(const float *flash, const float *standard, size_t count, bench_record *flash_record,
                            int *failed) {
    double max_diff = 0.0, max_reference = 0.0;
    int nan_seen = 0;
    for (size_t i = 0; i < count; ++i) {
        const double diff = fabs((double)flash[i] - (double)standard[i]);
        if (isnan(diff)) nan_seen = 1;
        else if (diff > max_diff) max_diff = diff;
        if (fabs((double)standard[i]) > max_reference) max_reference = fabs((double)standard[i]);
    }
    const double tolerance = check_tolerance(flash_record->dtype) * (max_reference > 1.0 ? max_reference : 1.0);
    flash_record->max_abs_err = nan_seen ? NAN : max_diff;
    if (nan_seen || max_diff > tolerance) {
        flash_record->check_failed = 1;
        snprintf(flash_record->status, sizeof flash_record->status, "check failed");
        fprintf(stderr, "flashcl bench: N=%d %s: flash and standard differ: max abs difference %s%.3g > %.3g\n",
                flash_record->seqlen, bench_direction_name(flash_record->direction), nan_seen ? "NaN, " : "",
                max_diff, tolerance);
        *failed = 1;
    }
}

/* Rows for a size whose own tensors could not be allocated. */
/* --softcap and --alibi-max-bias into a call's extras (0: off, as the library reads it). */
static void score_mods(const bench_options *o, flashcl_attention_extras *extras) {
    extras->softcap = (float)o->softcap;
    extras->alibi_max_bias = (float)o->alibi_max_bias;
}

static int has_score_mods(const bench_options *o) { return o->softcap > 0.0 || o->alibi_max_bias > 0.0; }

static void record_skipped_size(sweep_state *s, const flashcl_attention_desc *desc, flashcl_status status) {
    const bench_options *o = s->options;
    for (int direction = 0; direction <= (o->backward ? 1 : 0); ++direction)
        for (int i = 0; i < o->impl_count; ++i) {
            bench_record r;
            memset(&r, 0, sizeof r);
            r.impl = o->impl_order[i];
            r.direction = (bench_direction)direction;
            r.batch = desc->batch;
            r.heads = desc->heads_q;
            r.seqlen = desc->seqlen_q;
            r.head_dim = desc->head_dim;
            r.causal = desc->causal;
            r.dtype = desc->dtype;
            r.dropout = desc->dropout_p;
            r.block_density = o->block_density;
            r.softcap = o->softcap;
            r.alibi_max_bias = o->alibi_max_bias;
            bench_record_clear_measurements(&r);
            r.out_of_memory = status == FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
            snprintf(r.status, sizeof r.status, "%s", flashcl_status_string(status));
            push(s, &r);
        }
}

/* The packed run of one size (--varlen): the batch, its desc, the padded
 * buffers viewed packed, and its extras (the offsets, and with
 * --block-density a banded mask over the longest length, the mask being in
 * each sequence's own coordinates). */
typedef struct varlen_run {
    bench_varlen_batch batch;
    flashcl_attention_desc desc;
    bench_buffers views;
    flashcl_attention_extras extras;
    cl_mem mask;
} varlen_run;

/* Times the packed call and fills the varlen fields of the padded flash row. */
static void measure_varlen(sweep_state *s, const varlen_run *v, bench_direction direction, bench_record *flash_row) {
    const bench_options *o = s->options;
    bench_progress_begin("N=%d B=%d H=%d d=%d flash varlen (%d of %d tokens) %s", flash_row->seqlen, v->desc.batch,
                         v->desc.heads_q, v->desc.head_dim, v->batch.total, v->desc.batch * flash_row->seqlen,
                         bench_direction_name(direction));
    const bench_timing_request request = {s->ctx,   &v->desc,  &v->views, FLASHCL_IMPL_FLASH,
                                          direction, o->warmup, o->repeat, &v->extras};
    bench_record timed;
    if (bench_time(&request, &timed) != FLASHCL_SUCCESS) {
        /* bench_time's own message names the packed call's longest length as N. */
        fprintf(stderr, "flashcl bench: N=%d: the packed (varlen) call failed, longest sequence %d\n",
                flash_row->seqlen, v->batch.longest);
        s->failed = 1;
        /* timed.status holds a status string, far shorter than the field. */
        if (flash_row->ok) snprintf(flash_row->status, sizeof flash_row->status, "varlen: %.100s", timed.status);
    }
    bench_varlen_fill(flash_row, &timed, &v->batch);
}

static void measure_direction(sweep_state *s, const flashcl_attention_desc *desc, const bench_buffers *buffers,
                              const flashcl_attention_extras *extras, const varlen_run *varlen,
                              bench_direction direction) {
    const bench_options *o = s->options;
    const int compare = o->check && o->impl_count == 2;
    bench_record records[2];
    float *outputs[2] = {NULL, NULL};
    size_t counts[2] = {0, 0};
    for (int i = 0; i < o->impl_count; ++i) {
        const flashcl_impl impl = o->impl_order[i];
        bench_progress_begin("N=%d B=%d H=%d d=%d %s %s", desc->seqlen_q, desc->batch, desc->heads_q,
                             desc->head_dim, bench_impl_name(impl), bench_direction_name(direction));
        const bench_timing_request request = {s->ctx, desc, buffers, impl, direction, o->warmup, o->repeat, extras};
        bench_record *r = &records[impl];
        if (bench_time(&request, r) == FLASHCL_SUCCESS && compare &&
            bench_capture(&request, &outputs[impl], &counts[impl]) != FLASHCL_SUCCESS)
            s->failed = 1;
        /* The standard implementation running out of device memory is the
         * point of the comparison, not a failure; nor is a configuration it
         * does not have (it is float32 only, and --impl flash,standard is the
         * default, so --dtype f16 alone must not fail): its row says so and
         * flash is timed alone. */
        if (!r->ok && !(impl == FLASHCL_IMPL_STANDARD && (r->out_of_memory || r->unsupported))) s->failed = 1;
        r->block_density = extras ? o->block_density : 1.0;
        r->softcap = o->softcap;
        r->alibi_max_bias = o->alibi_max_bias;
        r->bias_bytes = s->bias_bytes;
    }
    if (varlen) measure_varlen(s, varlen, direction, &records[FLASHCL_IMPL_FLASH]);
    bench_progress_done();
    if (outputs[FLASHCL_IMPL_FLASH] && outputs[FLASHCL_IMPL_STANDARD])
        compare_outputs(outputs[FLASHCL_IMPL_FLASH], outputs[FLASHCL_IMPL_STANDARD], counts[FLASHCL_IMPL_FLASH],
                        &records[FLASHCL_IMPL_FLASH], &s->failed);
    for (int i = 0; i < o->impl_count; ++i) push(s, &records[o->impl_order[i]]);
    free(outputs[0]);
    free(outputs[1]);
}

/* A block mask shared by all heads in which query block i keeps the
 * round(density x blocks) key blocks i, i+1, ... (mod blocks): every row the
 * same amount of work, so time should fall in proportion to the density.
 * NULL if it cannot be made. */
static cl_mem banded_block_mask(flashcl_context *ctx, const bench_options *o, int seqlen,
                                flashcl_attention_extras *extras) {
    const size_t blocks = ((size_t)seqlen + (size_t)o->block_size - 1) / (size_t)o->block_size;
    size_t kept = (size_t)(o->block_density * (double)blocks + 0.5);
    if (kept < 1) kept = 1;
    unsigned char *host = malloc(blocks * blocks);
    if (!host) return NULL;
    for (size_t i = 0; i < blocks; ++i)
        for (size_t j = 0; j < blocks; ++j) host[i * blocks + j] = ((j + blocks - i) % blocks) < kept;
    cl_int err = CL_SUCCESS;
    cl_mem mask = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 blocks * blocks, host, &err);
    free(host);
    if (err != CL_SUCCESS) return NULL;
    flashcl_attention_extras_init(extras);
    extras->block_mask = mask;
    extras->block_size = o->block_size;
    return mask;
}

/* Prepares the packed run of the padded problem; 0 (with the reason on
 * stderr and the sweep marked failed) if it cannot be made. */
static int varlen_setup(sweep_state *s, const flashcl_attention_desc *padded, const bench_buffers *buffers,
                        varlen_run *v) {
    const bench_options *o = s->options;
    memset(v, 0, sizeof *v);
    char message[256];
    const flashcl_status status = bench_varlen_create(s->ctx, o, padded, &v->batch, message, sizeof message);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: N=%d varlen skipped: %s: %s\n", padded->seqlen_q,
                flashcl_status_string(status), message);
        s->failed = 1;
        return 0;
    }
    v->desc = bench_varlen_desc(padded, &v->batch);
    bench_varlen_views(buffers, &v->batch, padded->heads_q, padded->head_dim, &v->views);
    if (o->block_density < 1.0) {
        if (!(v->mask = banded_block_mask(s->ctx, o, v->batch.longest, &v->extras))) {
            fprintf(stderr, "flashcl bench: N=%d varlen skipped: cannot create its block mask\n", padded->seqlen_q);
            bench_varlen_release(&v->batch);
            s->failed = 1;
            return 0;
        }
    } else {
        flashcl_attention_extras_init(&v->extras);
    }
    score_mods(o, &v->extras);
    v->extras.cu_seqlens_q = v->extras.cu_seqlens_k = v->batch.cu_seqlens;
    /* The host copies spare each timed call the blocking read-back of the offsets. */
    v->extras.cu_seqlens_q_host = v->extras.cu_seqlens_k_host = v->batch.cu_host;
    return 1;
}

static void varlen_release(varlen_run *v) {
    if (v->mask) clReleaseMemObject(v->mask);
    bench_varlen_release(&v->batch);
}

static void measure_size(sweep_state *s, int seqlen) {
    const bench_options *o = s->options;
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, bench_batch_for(o, seqlen), bench_heads_for(o), seqlen, seqlen, o->head_dim);
    desc.dtype = o->dtype;
    desc.causal = o->causal;
    desc.dropout_p = (float)o->dropout;
    desc.dropout_seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)seqlen;
    /* Only decides whether a second input set fits beside the standard
     * implementation's N x N scores (and its backward's gradient of them). */
    const double scores = (double)desc.batch * desc.heads_q * (double)seqlen * seqlen * sizeof(float);
    const double scratch = o->run_impl[FLASHCL_IMPL_STANDARD] ? (o->backward ? 2.0 : 1.0) * scores : 0.0;
    const uint64_t seed = 0x243f6a8885a308d3ull ^ ((uint64_t)seqlen << 20) ^ (uint64_t)o->head_dim;
    bench_buffers buffers;
    char message[512];
    const flashcl_status status =
        bench_buffers_create(s->ctx, &desc, o->backward, scratch, seed, &buffers, message, sizeof message);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: N=%d skipped: %s: %s\n", seqlen, flashcl_status_string(status), message);
        record_skipped_size(s, &desc, status);
        s->failed = 1;
        return;
    }
    flashcl_attention_extras extras;
    cl_mem mask = NULL;
    if (o->block_density < 1.0 && !(mask = banded_block_mask(s->ctx, o, seqlen, &extras))) {
        fprintf(stderr, "flashcl bench: N=%d skipped: cannot create the block mask\n", seqlen);
        record_skipped_size(s, &desc, FLASHCL_ERROR_OPENCL);
        s->failed = 1;
        bench_buffers_release(&buffers);
        return;
    }
    const int with_extras = mask || has_score_mods(o) || o->bias;
    if (!mask && with_extras) flashcl_attention_extras_init(&extras);
    if (with_extras) score_mods(o, &extras);
    cl_mem bias = NULL;
    size_t bias_bytes = 0;
    if (o->bias && !(bias = bench_zero_bias(flashcl_context_cl_context(s->ctx), flashcl_context_queue(s->ctx),
                                            o->bias == BENCH_BIAS_FULL, desc.batch, desc.heads_q,
                                            (size_t)desc.seqlen_q, (size_t)desc.seqlen_k, desc.dtype, &extras,
                                            &bias_bytes))) {
        fprintf(stderr, "flashcl bench: N=%d skipped: cannot create the bias\n", seqlen);
        record_skipped_size(s, &desc, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
        s->failed = 1;
        if (mask) clReleaseMemObject(mask);
        bench_buffers_release(&buffers);
        return;
    }
    s->bias_bytes = (double)bias_bytes;
    const flashcl_attention_extras *call_extras = with_extras ? &extras : NULL;
    varlen_run varlen;
    const int with_varlen = o->varlen && varlen_setup(s, &desc, &buffers, &varlen);
    const varlen_run *packed = with_varlen ? &varlen : NULL;
    measure_direction(s, &desc, &buffers, call_extras, packed, BENCH_DIR_FORWARD);
    if (o->backward) measure_direction(s, &desc, &buffers, call_extras, packed, BENCH_DIR_FORWARD_BACKWARD);
    if (with_varlen) varlen_release(&varlen);
    if (mask) clReleaseMemObject(mask);
    if (bias) clReleaseMemObject(bias);
    bench_buffers_release(&buffers);
}

/* Applies --memory-budget, --tensor-cores, --f32-precision and --plan to the context; 0 or -1 with a message. */
static int configure_context(flashcl_context *ctx, const bench_options *o) {
    if (flashcl_context_set_tensor_cores(ctx, o->tensor_cores) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: --tensor-cores: %s\n", flashcl_last_error(ctx));
        return -1;
    }
    if (flashcl_context_set_f32_precision(ctx, o->f32_precision) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: --f32-precision: %s\n", flashcl_last_error(ctx));
        return -1;
    }
    if (o->memory_budget && flashcl_context_set_memory_budget(ctx, o->memory_budget) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: setting the memory budget: %s\n", flashcl_last_error(ctx));
        return -1;
    }
    if (!o->plan_forced) return 0;
    flashcl_device_limits limits;
    flashcl_plan plan = o->plan;
    char reason[256] = "";
    flashcl_status status = flashcl_context_limits(ctx, &limits);
    if (status == FLASHCL_SUCCESS)
        status = flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, o->head_dim, o->dtype, &plan, reason, sizeof reason);
    if (status == FLASHCL_SUCCESS) status = flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &plan);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: --plan %d,%d,%d,%d: %s%s%s\n", plan.block_q, plan.block_k, plan.threads_q,
                plan.threads_k, flashcl_status_string(status), reason[0] ? ": " : "",
                reason[0] ? reason : flashcl_last_error(ctx));
        return -1;
    }
    return 0;
}

static int write_outputs(const bench_options *o, const bench_record_list *records) {
    int ok = 1;
    if (o->json_path) ok &= bench_write_json(o->json_path, records) == 0;
    if (o->csv_path) ok &= bench_write_csv(o->csv_path, records) == 0;
    /* Last, so that a missing gnuplot still leaves the JSON and CSV written. */
    if (o->plot_path) ok &= bench_write_plot(o->plot_path, o, records) == 0;
    return ok;
}

int flashcl_bench_main(int argc, char **argv) {
    if (bench_decode_requested(argc, argv)) return bench_decode_main(argc, argv);
    bench_options options;
    switch (bench_parse_options(argc, argv, &options, stderr)) {
    case BENCH_PARSE_HELP: bench_print_usage(stdout); return BENCH_EXIT_OK;
    case BENCH_PARSE_ERROR: bench_print_usage(stderr); return BENCH_EXIT_USAGE;
    case BENCH_PARSE_OK: break;
    }

    flashcl_context_options context_options;
    flashcl_context_options_init(&context_options);
    context_options.device = options.device;
    context_options.enable_profiling = 1;
    sweep_state s;
    memset(&s, 0, sizeof s);
    s.options = &options;
    const flashcl_status status = flashcl_context_create(&s.ctx, &context_options);
    if (status != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl bench: no context: %s: %s\n", flashcl_status_string(status),
                flashcl_last_error(NULL));
        return BENCH_EXIT_FAILURE;
    }
    if (clGetDeviceInfo(flashcl_context_device(s.ctx), CL_DEVICE_NAME, sizeof s.records.device, s.records.device,
                        NULL) != CL_SUCCESS)
        snprintf(s.records.device, sizeof s.records.device, "unknown device");
    if (configure_context(s.ctx, &options) != 0) {
        flashcl_context_free(s.ctx);
        return BENCH_EXIT_FAILURE;
    }

    for (int i = 0; i < options.seqlen_count; ++i) measure_size(&s, options.seqlens[i]);
    bench_print_table(stdout, &options, &s.records);
    fflush(stdout);
    if (!write_outputs(&options, &s.records)) s.failed = 1;

    bench_records_free(&s.records);
    flashcl_context_free(s.ctx);
    return s.failed ? BENCH_EXIT_FAILURE : BENCH_EXIT_OK;
}

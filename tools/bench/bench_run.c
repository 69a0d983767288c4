/* bench_run.c: the timed loop (warm-up, rotated inputs, wall clock around clFinish, median) and output capture. */
#include "bench_run.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Room for the library's last-error text. */
enum { BENCH_DETAIL_SIZE = 1024 };

static char progress_label[160];

void bench_progress_begin(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(progress_label, sizeof progress_label, format, args);
    va_end(args);
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r\033[K%s", progress_label);
    else
        fprintf(stderr, "flashcl bench: %s\n", progress_label);
}

void bench_progress_run(const char *phase, int index, int total) {
    if (!isatty(STDERR_FILENO)) return;
    fprintf(stderr, "\r\033[K%s: %s %d/%d", progress_label, phase, index, total);
    fflush(stderr);
}

void bench_progress_done(void) {
    if (isatty(STDERR_FILENO)) fprintf(stderr, "\r\033[K");
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count) {
    qsort(values, (size_t)count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* Enqueues one forward (and backward) on input set `set` and waits for it.
 * fwd_stats / bwd_stats (may be NULL) receive each call's statistics. */
static flashcl_status one_call(const bench_timing_request *r, int set, flashcl_call_stats *fwd_stats,
                               flashcl_call_stats *bwd_stats, char *detail, size_t detail_size) {
    const bench_buffers *b = r->buffers;
    flashcl_status status =
        flashcl_forward_ex(r->ctx, r->desc, r->extras, &b->tq[set], &b->tk[set], &b->tv[set], &b->to, &b->tlse, 0,
                           NULL, NULL);
    if (status == FLASHCL_SUCCESS && fwd_stats && flashcl_last_call_stats(r->ctx, fwd_stats) != FLASHCL_SUCCESS)
        memset(fwd_stats, 0, sizeof *fwd_stats);
    if (status == FLASHCL_SUCCESS && r->direction == BENCH_DIR_FORWARD_BACKWARD) {
        status = flashcl_backward_ex(r->ctx, r->desc, r->extras, &b->tq[set], &b->tk[set], &b->tv[set], &b->to,
                                     &b->tlse,
                                  &b->tdout[set], &b->tdq, &b->tdk, &b->tdv, 0, NULL, NULL);
        if (status == FLASHCL_SUCCESS && bwd_stats && flashcl_last_call_stats(r->ctx, bwd_stats) != FLASHCL_SUCCESS)
            memset(bwd_stats, 0, sizeof *bwd_stats);
    }
    if (status != FLASHCL_SUCCESS) {
        snprintf(detail, detail_size, "%s", flashcl_last_error(r->ctx));
        /* Whatever was enqueued before the failure must finish before the
         * buffers are reused or released. */
        clFinish(flashcl_context_queue(r->ctx));
        return status;
    }
    const cl_int err = clFinish(flashcl_context_queue(r->ctx));
    if (err != CL_SUCCESS) {
        snprintf(detail, detail_size, "clFinish failed (OpenCL error %d)", (int)err);
        return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES
                   ? FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY
                   : FLASHCL_ERROR_OPENCL;
    }
    return FLASHCL_SUCCESS;
}

double bench_flops(const flashcl_attention_desc *d, bench_direction direction) {
    double flops = 4.0 * d->batch * d->heads_q * (double)d->seqlen_q * d->seqlen_k * d->head_dim;
    if (d->causal) flops *= 0.5;
    return direction == BENCH_DIR_FORWARD_BACKWARD ? 3.5 * flops : flops;
}

static void fill_identity(const bench_timing_request *r, bench_record *record) {
    memset(record, 0, sizeof *record);
    record->impl = r->impl;
    record->direction = r->direction;
    record->batch = r->desc->batch;
    record->heads = r->desc->heads_q;
    record->seqlen = r->desc->seqlen_q;
    record->head_dim = r->desc->head_dim;
    record->causal = r->desc->causal;
    record->dtype = r->desc->dtype;
    record->dropout = r->desc->dropout_p;
    record->block_density = 1.0;
    /* Until a call says which kernel ran (a row whose calls fail never
     * does): the implementation's own. */
    record->kernel = r->impl == FLASHCL_IMPL_STANDARD ? FLASHCL_KERNEL_STANDARD : FLASHCL_KERNEL_PORTABLE;
    snprintf(record->backend, sizeof record->backend, "-");
    snprintf(record->forward_backend, sizeof record->forward_backend, "-");
    bench_record_clear_measurements(record);
}

static void record_failure(bench_record *record, flashcl_status status, const char *detail) {
    record->ok = 0;
    record->out_of_memory = status == FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
    record->unsupported = status == FLASHCL_ERROR_UNSUPPORTED;
    snprintf(record->status, sizeof record->status, "%s", flashcl_status_string(status));
    fprintf(stderr, "%sflashcl bench: N=%d %s %s: %s%s%s\n", isatty(STDERR_FILENO) ? "\r\033[K" : "",
            record->seqlen, bench_impl_name(record->impl), bench_direction_name(record->direction),
            flashcl_status_string(status), detail[0] ? ": " : "", detail);
}

flashcl_status bench_time(const bench_timing_request *r, bench_record *record) {
    fill_identity(r, record);
    char detail[BENCH_DETAIL_SIZE] = "";
    flashcl_status status = flashcl_context_set_impl(r->ctx, r->impl);
    if (status != FLASHCL_SUCCESS) {
        snprintf(detail, sizeof detail, "%s", flashcl_last_error(r->ctx));
        record_failure(record, status, detail);
        return status;
    }
    double *times = malloc((size_t)r->repeat * sizeof *times);
    if (!times) {
        record_failure(record, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "");
        return FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    }
    flashcl_call_stats fwd_stats, bwd_stats;
    memset(&fwd_stats, 0, sizeof fwd_stats);
    memset(&bwd_stats, 0, sizeof bwd_stats);
    fwd_stats.kernel = bwd_stats.kernel = record->kernel;
    const int sets = r->buffers->set_count;
    for (int i = 0; i < r->warmup && status == FLASHCL_SUCCESS; ++i) {
        bench_progress_run("warm-up", i + 1, r->warmup);
        status = one_call(r, i % sets, NULL, NULL, detail, sizeof detail);
    }
    for (int i = 0; i < r->repeat && status == FLASHCL_SUCCESS; ++i) {
        bench_progress_run("run", i + 1, r->repeat);
        const int first = i == 0;
        const double start = now_ms();
        status = one_call(r, i % sets, first ? &fwd_stats : NULL, first ? &bwd_stats : NULL, detail, sizeof detail);
        times[i] = now_ms() - start;
    }
    if (status != FLASHCL_SUCCESS) {
        free(times);
        record_failure(record, status, detail);
        return status;
    }
    record->ok = 1;
    snprintf(record->status, sizeof record->status, "ok");
    record->median_ms = median(times, r->repeat);
    free(times);
    record->tflops = bench_flops(r->desc, r->direction) / (record->median_ms * 1e-3) / 1e12;
    /* The forward's scratch is gone when the backward allocates its own:
     * the peak is the larger of the two; traffic adds up. */
    size_t extra = fwd_stats.extra_device_bytes;
    double traffic = fwd_stats.predicted_global_bytes;
    if (r->direction == BENCH_DIR_FORWARD_BACKWARD) {
        if (bwd_stats.extra_device_bytes > extra) extra = bwd_stats.extra_device_bytes;
        traffic += bwd_stats.predicted_global_bytes;
    }
    record->extra_device_bytes = (double)extra;
    record->predicted_hbm_bytes = traffic;
    /* Forward+backward rows name the backward's kernel and backend (the forward picks its kernel kind by the
     * same rule; its backend, which may differ, is forward_backend). */
    const flashcl_call_stats *pass = r->direction == BENCH_DIR_FORWARD_BACKWARD ? &bwd_stats : &fwd_stats;
    record->kernel = pass->kernel;
    snprintf(record->backend, sizeof record->backend, "%s", pass->backend[0] ? pass->backend : "-");
    snprintf(record->forward_backend, sizeof record->forward_backend, "%s",
             fwd_stats.backend[0] ? fwd_stats.backend : "-");
    return FLASHCL_SUCCESS;
}

flashcl_status bench_capture(const bench_timing_request *r, float **out, size_t *count) {
    *out = NULL;
    *count = 0;
    char detail[BENCH_DETAIL_SIZE] = "";
    flashcl_status status = flashcl_context_set_impl(r->ctx, r->impl);
    if (status == FLASHCL_SUCCESS) status = one_call(r, 0, NULL, NULL, detail, sizeof detail);
    const bench_buffers *b = r->buffers;
    const int gradients = r->direction == BENCH_DIR_FORWARD_BACKWARD;
    const size_t n = b->elements;
    float *values = NULL;
    if (status == FLASHCL_SUCCESS) {
        values = malloc((gradients ? 3 : 1) * n * sizeof *values);
        if (!values) status = FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    }
    const cl_mem sources[3] = {gradients ? b->dq : b->o, b->dk, b->dv};
    for (int i = 0; i < (gradients ? 3 : 1) && status == FLASHCL_SUCCESS; ++i)
        status = bench_read_floats(r->ctx, sources[i], n, r->desc->dtype, values + (size_t)i * n, detail,
                                   sizeof detail);
    if (status != FLASHCL_SUCCESS) {
        free(values);
        fprintf(stderr, "flashcl bench: reading %s outputs back for the check: %s%s%s\n", bench_impl_name(r->impl),
                flashcl_status_string(status), detail[0] ? ": " : "", detail);
        return status;
    }
    *out = values;
    *count = (gradients ? 3 : 1) * n;
    return FLASHCL_SUCCESS;
}

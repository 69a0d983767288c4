/* bench_record.h: one measurement of the sweep (size, implementation, direction) and the growing list of them. */
#ifndef FLASHCL_TOOLS_BENCH_RECORD_H
#define FLASHCL_TOOLS_BENCH_RECORD_H

#include <stddef.h>

#include "flashcl.h"

typedef enum { BENCH_DIR_FORWARD = 0, BENCH_DIR_FORWARD_BACKWARD = 1 } bench_direction;

/* Numbers that do not exist (a failed row, the error of a row not checked)
 * are NaN and written as null / left empty. */
typedef struct bench_record {
    flashcl_impl impl;
    bench_direction direction;
    int batch, heads, seqlen, head_dim, causal;
    flashcl_dtype dtype;
    double median_ms;
    double tflops;
    double extra_device_bytes;
    double predicted_hbm_bytes;
    double max_abs_err;
    double dropout;       /* dropout probability of the run (0: none) */
    double block_density; /* fraction of key blocks computed (1: dense) */
    double softcap;        /* --softcap of the run (0: none) */
    double alibi_max_bias; /* --alibi-max-bias of the run (0: none) */
    double bias_bytes;     /* --bias: bytes of the bias tensor (0: none) */
    /* --varlen, flash rows: this row's call is the padded batch (every
     * sequence at N); the same B sequences at random lengths, packed, were
     * timed beside it. NaN otherwise. */
    double varlen_ms;      /* median time of the packed call */
    double varlen_tflops;  /* varlen_flops / varlen_ms */
    double varlen_speedup; /* median_ms / varlen_ms: padded time over packed time */
    double varlen_flops;   /* FLOPs the sequences need: the FLOP formula summed over their lengths */
    double padded_flops;   /* FLOPs of the padded call (B sequences of N) */
    double varlen_tokens;  /* sum of the lengths (the padded batch holds B x N) */
    flashcl_kernel_kind kernel; /* flashcl_call_stats.kernel of the pass (forward+backward: the backward's) */
    /* flashcl_call_stats.backend of the same pass ("-" where there is none: the portable and standard kernels),
     * and of the row's forward call: on an H100 a forward+backward row's forward may run "nvidia-wgmma" and its
     * backward "nvidia-mma-sync", both of kernel kind tensor-core. */
    char backend[32], forward_backend[32];
    int ok;            /* the measurement ran */
    int out_of_memory; /* it failed for lack of device memory */
    int unsupported;   /* the implementation cannot run this configuration (standard with f16/bf16) */
    int check_failed;  /* max_abs_err exceeded the tolerance */
    char status[160];  /* "ok" or what went wrong */
} bench_record;

typedef struct bench_record_list {
    bench_record *items;
    size_t count, capacity;
    char device[256];
} bench_record_list;

/* Every measured number of r NaN (nothing measured yet); identity fields untouched. */
void bench_record_clear_measurements(bench_record *r);

/* Appends a copy; returns the stored record, or NULL if out of memory. */
bench_record *bench_records_push(bench_record_list *list, const bench_record *record);
void bench_records_free(bench_record_list *list);

/* The record of (seqlen, impl, direction), or NULL. */
const bench_record *bench_records_find(const bench_record_list *list, int seqlen, flashcl_impl impl,
                                       bench_direction direction);

const char *bench_direction_name(bench_direction direction);
const char *bench_impl_name(flashcl_impl impl);

#endif

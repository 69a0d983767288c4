/* bench_run.h: timing one implementation in one direction on one size, and capturing its outputs for the check. */
#ifndef FLASHCL_TOOLS_BENCH_RUN_H
#define FLASHCL_TOOLS_BENCH_RUN_H

#include "bench_buffers.h"
#include "bench_record.h"

typedef struct bench_timing_request {
    flashcl_context *ctx;
    const flashcl_attention_desc *desc;
    const bench_buffers *buffers;
    flashcl_impl impl;
    bench_direction direction;
    int warmup, repeat;
    const flashcl_attention_extras *extras; /* block mask; NULL: none */
} bench_timing_request;

/* The protocol's FLOP count of desc: 4 B H Sq Sk d, halved when causal,
 * times 3.5 for forward+backward. */
double bench_flops(const flashcl_attention_desc *desc, bench_direction direction);

/* Runs warmup + repeat calls (rotating input sets), each timed by a wall
 * clock from the first enqueue to clFinish, and fills the record's time,
 * memory and IO-model fields from the median and flashcl_last_call_stats.
 * On a failed call, record->ok is 0 and record->status says why; the
 * library's detail goes to stderr. Returns the call's status. */
flashcl_status bench_time(const bench_timing_request *request, bench_record *record);

/* Runs one call on input set 0 and reads the outputs back as floats: O for
 * the forward, then dQ, dK, dV after it for forward+backward. *out is
 * malloc'ed, *count its length. */
flashcl_status bench_capture(const bench_timing_request *request, float **out, size_t *count);

/* Progress on stderr. bench_progress_begin names the measurement (a line of
 * its own when stderr is not a terminal, so logs stay short);
 * bench_progress_run rewrites the terminal line with "run i/R";
 * bench_progress_done clears it. */
void bench_progress_begin(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void bench_progress_run(const char *phase, int index, int total);
void bench_progress_done(void);

#endif

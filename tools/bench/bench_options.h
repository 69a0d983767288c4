/* bench_options.h: the command line of `flashcl bench`, parsed into one structure. */
#ifndef FLASHCL_TOOLS_BENCH_OPTIONS_H
#define FLASHCL_TOOLS_BENCH_OPTIONS_H

#include <stdio.h>

#include "flashcl.h"

#define BENCH_MAX_SEQLENS 64

enum { BENCH_EXIT_OK = 0, BENCH_EXIT_FAILURE = 1, BENCH_EXIT_USAGE = 2 };

/* --bias: an additive attention bias in the storage type (zeros: its cost is reading it), of one shape. */
enum { BENCH_BIAS_NONE = 0, BENCH_BIAS_SHARED = 1, BENCH_BIAS_FULL = 2 };

typedef struct bench_options {
    int seqlens[BENCH_MAX_SEQLENS];
    int seqlen_count;
    int head_dim;
    int batch; /* 0: 16384 / N for each N, as the protocol keeps B*N fixed */
    int heads; /* 0: 2048 / head_dim, as the protocol keeps the hidden size fixed */
    int causal;
    flashcl_dtype dtype;
    int run_impl[2]; /* indexed by flashcl_impl: non-zero to measure it */
    flashcl_impl impl_order[2];
    int impl_count;
    int repeat;
    int warmup;
    int backward;
    const char *device;
    const char *json_path;
    const char *csv_path;
    const char *plot_path;
    int plan_forced;
    flashcl_tensor_cores tensor_cores; /* --tensor-cores (default AUTO) */
    flashcl_f32_precision f32_precision; /* --f32-precision (default FULL) */
    flashcl_plan plan;
    size_t memory_budget; /* 0: none */
    int check;
    double dropout;       /* 0: none; flash only */
    double block_density; /* 1: dense; below 1 a block mask keeps this fraction of key blocks; flash only */
    int block_size;       /* of the block mask */
    double softcap;        /* --softcap: logit soft-capping cap (0: none); flash only */
    double alibi_max_bias; /* --alibi-max-bias: ALiBi with llama.cpp's slopes of this max_bias (0: none); flash only */
    int bias;              /* --bias: BENCH_BIAS_NONE, _SHARED (1, 1, N, N) or _FULL (B, H, N, N); flash only */
    /* --varlen LO,HI: beside each flash row (the padded batch, B sequences
     * of N), the same B sequences at random lengths in [LO x N, HI x N],
     * packed, are timed too. */
    int varlen;
    double varlen_lo, varlen_hi;
    unsigned long long varlen_seed;
    int varlen_seed_given;
} bench_options;

typedef enum { BENCH_PARSE_OK, BENCH_PARSE_HELP, BENCH_PARSE_ERROR } bench_parse_result;

/* Fills *options from argv (argv[0] is the command name); on an error the
 * reason goes to err. */
bench_parse_result bench_parse_options(int argc, char **argv, bench_options *options, FILE *err);

void bench_print_usage(FILE *out);

/* The batch and heads of the problem at seqlen (defaults resolved). */
int bench_batch_for(const bench_options *options, int seqlen);
int bench_heads_for(const bench_options *options);

#endif

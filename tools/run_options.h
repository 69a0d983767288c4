/* run_options.h: the command line of `flashcl run`, parsed into one structure. */
#ifndef FLASHCL_TOOLS_RUN_OPTIONS_H
#define FLASHCL_TOOLS_RUN_OPTIONS_H

#include <stdio.h>

#include "flashcl.h"

typedef struct run_options {
    const char *q_path, *k_path, *v_path, *out_path, *lse_path;
    const char *dout_path, *dq_path, *dk_path, *dv_path; /* all four or none */
    int causal;
    double scale; /* 0: 1/sqrt(head_dim) */
    flashcl_layout layout;
    const char *device;
    const char *kernel_dir;
    flashcl_impl impl;
    flashcl_tensor_cores tensor_cores; /* --tensor-cores (default AUTO) */
    flashcl_f32_precision f32_precision; /* --f32-precision (default FULL) */
    int check;
    double tolerance; /* 0: the default of each output and dtype */
    int dtype_given;  /* --dtype was passed: dtype is what the files must hold */
    flashcl_dtype dtype;
    int forward_plan_given, backward_plan_given;
    flashcl_plan forward_plan, backward_plan;
    int window_left, window_right; /* -1: unbounded (the default) */
    const char *block_mask_path;   /* uint8 (nbq, nbk) or (Hq, nbq, nbk); needs block_size */
    int block_size;
    double dropout;                /* 0: none */
    unsigned long long seed;
    const char *dropout_mask_path; /* write the keep mask (B, Hq, Sq, Sk) uint8 */
    /* Score modifiers: soft-capping (0: none) and ALiBi from a float32 slopes
     * file (Hq,) or (B, Hq), or from llama.cpp's max_bias (0: none); at most
     * one ALiBi source. */
    double softcap;
    const char *alibi_slopes_path;
    double alibi_max_bias;
    /* An additive bias (B|1, Hq|1, Sq, Sk), float32 or the inputs' type, and
     * the backward's dBias to write (needs --bias and the backward). */
    const char *bias_path, *dbias_path;
    /* Packed variable-length batch: int32 (B + 1) files, both or neither;
     * the tensors are then (total, H, D) and the layout is forced to bshd. */
    const char *cu_seqlens_q_path, *cu_seqlens_k_path;
    int layout_given; /* --layout was passed (a cache run's default is bshd) */
    /* KV-cache mode (--k-cache): one flashcl_forward_kv_cache call of Q
     * against the caches instead of --k/--v. The first three together;
     * block_table makes it paged (page_size, if given, must match the cache
     * files); k_new/v_new together; k_cache_out/v_cache_out together and
     * only with k_new. */
    const char *k_cache_path, *v_cache_path, *cache_seqlens_path;
    const char *block_table_path;
    int page_size; /* 0: not given */
    const char *k_new_path, *v_new_path;
    const char *k_cache_out_path, *v_cache_out_path;
    /* The first option given that a cache run refuses, and why (NULL: none). */
    const char *not_with_cache, *not_with_cache_reason;
} run_options;

typedef enum run_parse_result {
    RUN_PARSE_OK = 0,
    RUN_PARSE_HELP = 1, /* --help was printed */
    RUN_PARSE_ERROR = 2 /* the message and usage were printed */
} run_parse_result;

run_parse_result run_parse_options(int argc, char **argv, run_options *options);
void run_print_help(FILE *out);

static inline int run_is_varlen(const run_options *options) { return options->cu_seqlens_q_path != NULL; }

static inline int run_is_cache(const run_options *options) { return options->k_cache_path != NULL; }

static inline int run_wants_backward(const run_options *options) { return options->dout_path != NULL; }

#endif

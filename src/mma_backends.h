/* mma_backends.h: the matrix-unit backends the tensor-core kernels can run on: a table, one row per backend. */
#ifndef FLASHCL_MMA_BACKENDS_H
#define FLASHCL_MMA_BACKENDS_H

#include "device_caps.h"

/* One way to run the tensor-core kernels' fragment products (cl/mma.cl's
 * interface). Adding a backend is one row of the table in mma_backends.c
 * and its kernel-side implementation of the interface (its `source`). */
typedef struct flashcl_mma_backend {
    const char *name; /* reported in flashcl_call_stats.backend */
    flashcl_kernel_kind kind;
    /* 1 if the device has it (the probe, from its caps alone). */
    int (*available)(const flashcl_device_caps *caps);
    /* Lanes that share one fragment (the kernels' fragment layout). */
    int subgroup_width;
    /* One instruction's m x n x k for 16-bit operands and for TF32. */
    int shape_m, shape_n, shape_k_16bit, shape_k_tf32;
    /* Local-memory words per sub-group the kernels need beside their tiles
     * (the emulation's operand scratch) for 16-bit and float storage, and
     * per sub-group of the forward for its quad exchange. */
    int scratch_words_16bit, scratch_words_f32, forward_exchange_words;
    /* The value of -DFLASHCL_MMA_PTX the kernels are built with, and the
     * cl/ file that implements mma.cl's instruction interface. */
    int ptx;
    const char *source;
    /* 1 if a call with these tiles is within what the device can run (the
     * llvmpipe loop budget for the emulation); NULL: always. */
    int (*fits)(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                const flashcl_plan *tiles);
} flashcl_mma_backend;

/* The backend the tensor-core mode selects on caps' device: AUTO the first
 * available hardware backend, EMULATE the emulation, OFF none (NULL). */
const flashcl_mma_backend *flashcl_mma_backend_select(const flashcl_device_caps *caps, flashcl_tensor_cores mode);

/* 1 if head_dim and dtype suit the tensor-core kernels. */
int flashcl_mma_problem_supported(int head_dim);

/* The tensor-core kernels' tiles for pass on caps' device with backend b:
 * 0 if none fits. staged_bias_bytes: the bytes of one bias element the
 * kernels stage in local memory (cl/mma_operands.cl FLASHCL_BIAS_STAGED), 0
 * for none. The plan's threads_q is the warp count, threads_k the
 * sub-group width; in the backward, block_q the rows streamed per step and
 * block_k the resident rows (16 per warp). */
int flashcl_mma_choose_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *b, flashcl_pass pass,
                             int head_dim, flashcl_dtype dtype, size_t staged_bias_bytes, flashcl_plan *plan);

/* Elements that every row start (offset and strides) must be a multiple of
 * for the kernels' 16-byte loads: 8 half values, 4 floats. */
int flashcl_mma_row_alignment(flashcl_dtype dtype);

#endif

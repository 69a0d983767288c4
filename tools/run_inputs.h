/* run_inputs.h: loading the .npy inputs of `flashcl run` and deriving the attention problem from their shapes. */
#ifndef FLASHCL_TOOLS_RUN_INPUTS_H
#define FLASHCL_TOOLS_RUN_INPUTS_H

#include "flashcl.h"
#include "npy.h"
#include "run_options.h"

typedef struct run_inputs {
    npy_array q, k, v;
    npy_array dout;             /* empty unless backward was asked for */
    npy_array block_mask;       /* empty unless --block-mask was given */
    int block_mask_per_head;    /* the mask file has a leading Hq axis */
    flashcl_attention_desc desc; /* shapes, dtype, scale and causal flag */
    /* Packed variable-length batch: desc then describes the packed tensors
     * as one bshd batch of total rows, call_desc the call itself (B
     * sequences, the longest lengths). cu_q / cu_k hold int32 (B + 1). */
    int varlen;
    npy_array cu_q, cu_k;
    flashcl_attention_desc call_desc;
} run_inputs;

/* Reads and cross-checks every input file. Returns 0, or -1 after printing a
 * one-line message naming the file and the problem. */
int run_load_inputs(const run_options *options, run_inputs *inputs);
void run_free_inputs(run_inputs *inputs);

/* Prints "flashcl run: PATH: <message>" on one line; returns -1. */
int run_file_error(const char *path, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Reads a .npy file; 0, or -1 after a message naming it. */
int run_load_npy(const char *path, npy_array *array);

/* The flashcl dtype of a tensor file: what it holds, reconciled with
 * --dtype ('<u2' only with --dtype bf16); 0, or -1 after a message. */
int run_file_dtype(const run_options *options, const char *path, const npy_array *array, flashcl_dtype *out);

/* "float32", "float16", "bfloat16". */
const char *run_dtype_name(flashcl_dtype dtype);

/* The (batch, heads, seqlen, dim) of a 4-D array in a layout. */
typedef struct run_dims4 {
    int batch, heads, seqlen, dim;
} run_dims4;

/* Reads them (role "Q", heads_name "Hq", seq_name "Sq" name the axes in the
 * message); 0, or -1 after a message if the array is not 4-D with every
 * dimension in 1..INT_MAX. */
int run_tensor_dims(const char *path, const npy_array *array, flashcl_layout layout, const char *role,
                    const char *heads_name, const char *seq_name, run_dims4 *out);

/* Elements of one 4-D tensor of `heads` heads and `seqlen` rows. */
size_t run_tensor_count(const flashcl_attention_desc *desc, int heads, int seqlen);

/* The shape in the file of a tensor of `heads` heads and `seqlen` rows for
 * the layout: (B,H,S,D) or (B,S,H,D). */
void run_tensor_shape(const flashcl_attention_desc *desc, flashcl_layout layout, int heads, int seqlen,
                      size_t shape[4]);

/* The .npy element type that holds a flashcl dtype. */
npy_dtype run_npy_dtype(flashcl_dtype dtype);

/* Converts raw tensor data (dtype, layout) into a new float array in BHSD
 * order, as the CPU reference wants it; NULL if out of memory. */
float *run_to_float_bhsd(const void *raw, flashcl_dtype dtype, flashcl_layout layout, const flashcl_attention_desc *desc,
                         int heads, int seqlen);

#endif

/* run_bias.h: `flashcl run --bias` and `--dbias`: the bias file checked against the problem, its device buffers,
 * and what the library call and the --check reference take. */
#ifndef FLASHCL_TOOLS_RUN_BIAS_H
#define FLASHCL_TOOLS_RUN_BIAS_H

#include "attention_reference.h"
#include "flashcl.h"
#include "npy.h"
#include "run_options.h"

typedef struct run_bias {
    npy_array file;       /* --bias as read: (B|1, Hq|1, Sq, Sk); empty: no bias */
    flashcl_dtype dtype;  /* float32, or the storage type ('<f2', or '<u2' with --dtype bf16) */
    int batch, heads;     /* the file's first two dimensions: 1 (broadcast) or the problem's */
    float *reference;     /* the bias as floats, for the reference; NULL: no bias */
    cl_mem buffer;        /* the bias on the device */
    cl_mem dbias;         /* --dbias on the device (the backward writes it); NULL: not asked for */
    void *dbias_host;     /* dBias read back, in dtype */
    size_t bytes;         /* of the bias, and of dBias */
} run_bias;

/* Reads and checks --bias against desc (dtype, shape (B|1, Hq|1, Sq, desc->seqlen_k)): 0, or -1 after a message
 * naming the file. keys_note (NULL: none) follows the shape in that message: what the last dimension is (a
 * KV-cache run's is the cache's key positions, not a sequence's length). */
int run_bias_load(const run_options *options, const flashcl_attention_desc *desc, const char *keys_note,
                  run_bias *bias);

/* Sequence b's part of the bias for the reference: its plane (heads, Sq, keys), columns 0..keys-1 of each row (a
 * KV-cache run's sequence sees key positions 0..keys-1 of the cache's). A new array, NULL if out of memory. */
float *run_bias_columns(const run_bias *bias, const flashcl_attention_desc *desc, int b, int keys);
void run_bias_free(run_bias *bias);

/* Makes the device buffers (dBias with want_dbias) and sets extras' bias fields: 0, or -1 after a message. */
int run_bias_buffers(run_bias *bias, cl_context context, const flashcl_attention_desc *desc, int want_dbias,
                     flashcl_attention_extras *extras);

/* Reads dBias back after the backward (blocking): 0, or -1 after a message. */
int run_bias_read_dbias(run_bias *bias, cl_command_queue queue);

/* dBias as a new float array (the reference's shape and order); NULL if out of memory. */
float *run_bias_dbias_floats(const run_bias *bias);

/* The reference's bias fields. */
void run_bias_reference(const run_bias *bias, flashcl_reference_extras *extras);

#endif

/* bench_buffers.h: the device tensors of one benchmark size, filled with fresh random inputs. */
#ifndef FLASHCL_TOOLS_BENCH_BUFFERS_H
#define FLASHCL_TOOLS_BENCH_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

/* Runs rotate between input sets so that repeated runs do not find the same
 * inputs warm in a cache; one set is used when two do not fit comfortably. */
#define BENCH_MAX_INPUT_SETS 2

typedef struct bench_buffers {
    int set_count;
    cl_mem q[BENCH_MAX_INPUT_SETS], k[BENCH_MAX_INPUT_SETS], v[BENCH_MAX_INPUT_SETS];
    cl_mem dout[BENCH_MAX_INPUT_SETS]; /* only with gradients */
    cl_mem o, lse;
    cl_mem dq, dk, dv;                 /* only with gradients */
    flashcl_tensor tq[BENCH_MAX_INPUT_SETS], tk[BENCH_MAX_INPUT_SETS], tv[BENCH_MAX_INPUT_SETS];
    flashcl_tensor tdout[BENCH_MAX_INPUT_SETS];
    flashcl_tensor to, tlse, tdq, tdk, tdv;
    size_t elements; /* of each (B, H, N, d) tensor */
} bench_buffers;

/* Allocates the tensors of desc (heads_kv == heads_q, BHSD) on ctx's device
 * and uploads uniform random values in [-1, 1] drawn from seed, rounded to
 * desc->dtype. with_gradients adds dO, dQ, dK, dV. scratch_hint: device
 * bytes the calls may add (decides whether a second input set fits).
 * On failure everything is released, *out is zeroed and message says why:
 * FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, _OUT_OF_HOST_MEMORY or _OPENCL. */
flashcl_status bench_buffers_create(flashcl_context *ctx, const flashcl_attention_desc *desc, int with_gradients,
                                    double scratch_hint, uint64_t seed, bench_buffers *out, char *message,
                                    size_t message_size);

void bench_buffers_release(bench_buffers *buffers);

/* --bias of both benches: a zero additive bias (batch or 1, heads or 1, rows, cols) in dtype as extras->bias
 * (`full` 0: a shared plane, its broadcast dimensions at stride 0), its bytes in *bytes; NULL when it cannot be
 * made. Zeros leave the results those without a bias, so what it adds to a call's time is the reading of it. */
cl_mem bench_zero_bias(cl_context context, cl_command_queue queue, int full, int batch, int heads, size_t rows,
                       size_t cols, flashcl_dtype dtype, flashcl_attention_extras *extras, size_t *bytes);

/* The next number of the bench's seedable generator (splitmix64). */
uint64_t bench_random_next(uint64_t *state);

/* Reads `count` elements of dtype from buffer into floats (blocking). */
flashcl_status bench_read_floats(flashcl_context *ctx, cl_mem buffer, size_t count, flashcl_dtype dtype, float *out,
                                 char *message, size_t message_size);

#endif

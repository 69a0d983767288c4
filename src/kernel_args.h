/* kernel_args.h: setting a kernel's arguments in order, keeping the first error. */
#ifndef FLASHCL_KERNEL_ARGS_H
#define FLASHCL_KERNEL_ARGS_H

#include "internal.h"

typedef struct flashcl_kernel_args {
    cl_kernel kernel;
    cl_uint next;
    cl_int error;
} flashcl_kernel_args;

static inline void flashcl_arg(flashcl_kernel_args *a, size_t size, const void *value) {
    if (a->error == CL_SUCCESS) a->error = clSetKernelArg(a->kernel, a->next, size, value);
    a->next++;
}
static inline void flashcl_arg_mem(flashcl_kernel_args *a, cl_mem m) { flashcl_arg(a, sizeof m, &m); }
static inline void flashcl_arg_int(flashcl_kernel_args *a, int x) {
    cl_int v = x;
    flashcl_arg(a, sizeof v, &v);
}
static inline void flashcl_arg_float(flashcl_kernel_args *a, float x) {
    cl_float v = x;
    flashcl_arg(a, sizeof v, &v);
}
static inline void flashcl_arg_ulong(flashcl_kernel_args *a, size_t x) {
    cl_ulong v = x;
    flashcl_arg(a, sizeof v, &v);
}
/* A tensor view as the kernels take it: buffer, offset, batch/head/seq strides. */
static inline void flashcl_arg_tensor(flashcl_kernel_args *a, const flashcl_tensor *t) {
    flashcl_arg_mem(a, t->buffer);
    flashcl_arg_ulong(a, t->offset);
    flashcl_arg_ulong(a, t->stride_batch);
    flashcl_arg_ulong(a, t->stride_head);
    flashcl_arg_ulong(a, t->stride_seq);
}

/* The arguments every forward kernel starts with (cl/forward.cl, cl/forward_mma.cl), in their order. Without an LSE
 * output the kernels still need a valid buffer argument: q's, never written because write_lse is 0. */
static inline void flashcl_arg_forward_dense(flashcl_kernel_args *a, const flashcl_attention_desc *desc,
                                             const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                             const flashcl_tensor *o, const flashcl_tensor *lse, int causal) {
    const flashcl_tensor lse_arg = lse ? *lse : (flashcl_tensor){q->buffer, 0, 0, 0, 0};
    flashcl_arg_tensor(a, q);
    flashcl_arg_tensor(a, k);
    flashcl_arg_tensor(a, v);
    flashcl_arg_tensor(a, o);
    flashcl_arg_tensor(a, &lse_arg);
    flashcl_arg_int(a, lse != NULL);
    flashcl_arg_int(a, desc->heads_q);
    flashcl_arg_int(a, desc->heads_q / desc->heads_kv);
    flashcl_arg_int(a, desc->seqlen_q);
    flashcl_arg_int(a, desc->seqlen_k);
    flashcl_arg_float(a, flashcl_effective_scale(desc));
    flashcl_arg_int(a, causal);
}

#endif

/* tensor.c: constructors for problem descriptions and contiguous tensor views. */
#include <math.h>

#include "internal.h"
#include "struct_abi.h"

flashcl_status flashcl_attention_desc_init_sized(flashcl_attention_desc *desc, size_t struct_size, int batch,
                                                 int heads, int seqlen_q, int seqlen_k, int head_dim) {
    flashcl_status status = flashcl_struct_init(&flashcl_abi_attention_desc, desc, struct_size);
    if (status != FLASHCL_SUCCESS) return status;
    /* The shape is in every version of the struct; the rest are struct_init's defaults. */
    desc->batch = batch;
    desc->heads_q = heads;
    desc->heads_kv = heads;
    desc->seqlen_q = seqlen_q;
    desc->seqlen_k = seqlen_k;
    desc->head_dim = head_dim;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_attention_extras_init_sized(flashcl_attention_extras *extras, size_t struct_size) {
    return flashcl_struct_init(&flashcl_abi_attention_extras, extras, struct_size);
}

flashcl_tensor flashcl_tensor_contiguous(cl_mem buffer, flashcl_layout layout, int heads, int seqlen, int head_dim) {
    flashcl_tensor t;
    const size_t h = heads > 0 ? (size_t)heads : 0, s = seqlen > 0 ? (size_t)seqlen : 0,
                 d = head_dim > 0 ? (size_t)head_dim : 0;
    t.buffer = buffer;
    t.offset = 0;
    t.stride_batch = h * s * d;
    if (layout == FLASHCL_LAYOUT_BSHD) {
        t.stride_seq = h * d;
        t.stride_head = d;
    } else {
        t.stride_head = s * d;
        t.stride_seq = d;
    }
    return t;
}

flashcl_tensor flashcl_tensor_lse(cl_mem buffer, int heads, int seqlen) {
    return flashcl_tensor_contiguous(buffer, FLASHCL_LAYOUT_BHSD, heads, seqlen, 1);
}

float flashcl_effective_scale(const flashcl_attention_desc *desc) {
    return desc->scale != 0.0f ? desc->scale : (float)(1.0 / sqrt((double)desc->head_dim));
}

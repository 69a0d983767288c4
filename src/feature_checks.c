/* feature_checks.c: the feature buffers the kernels read while the outputs are written (block mask, varlen
 * offsets, ALiBi slopes, the bias) checked against the call's outputs: valid views, no overlap; and the backward's
 * dBias output against every tensor of the call. */
#include "call_features.h"

flashcl_status flashcl_features_validate_buffers(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                 const flashcl_attention_desc *shape_desc, const flashcl_features *f,
                                                 const flashcl_call_tensor *tensors, int count) {
    if (!f->block_mask && !f->varlen.on && !f->alibi_buffer && !f->bias) return FLASHCL_SUCCESS;
    /* The feature buffers the kernels read while the outputs are written. */
    flashcl_extent inputs[5];
    const char *names[5];
    int input_count = 0;
    if (f->block_mask) {
        flashcl_status status =
            flashcl_validate_tensor(ctx, "block_mask", &f->mask_view, &f->mask_shape, 0, &inputs[input_count]);
        if (status != FLASHCL_SUCCESS) return status;
        inputs[input_count].elem_size = 0; /* compared by byte span: uint8, never strided like an output */
        names[input_count++] = "block_mask";
    }
    if (f->varlen.on) {
        /* batch + 1 int32 from the buffer's start (checked by flashcl_varlen_resolve). */
        const size_t bytes = ((size_t)desc->batch + 1) * sizeof(cl_int);
        flashcl_byte_extent(f->varlen.cu_q, 0, bytes, &inputs[input_count]);
        names[input_count++] = "cu_seqlens_q";
        flashcl_byte_extent(f->varlen.cu_k, 0, bytes, &inputs[input_count]);
        names[input_count++] = "cu_seqlens_k";
    }
    if (f->alibi_buffer) {
        flashcl_tensor view;
        flashcl_shape shape;
        flashcl_alibi_view(desc, f, &view, &shape);
        flashcl_status status = flashcl_validate_tensor(ctx, "alibi_slopes", &view, &shape, 0, &inputs[input_count]);
        if (status != FLASHCL_SUCCESS) return status;
        inputs[input_count].elem_size = 0; /* compared by byte span, as the mask */
        names[input_count++] = "alibi_slopes";
    }
    if (f->bias) {
        flashcl_status status =
            flashcl_validate_tensor(ctx, "bias", &f->bias_view, &f->bias_shape, 0, &inputs[input_count]);
        if (status != FLASHCL_SUCCESS) return status;
        inputs[input_count].elem_size = 0; /* compared by byte span: its zero strides are no output's geometry */
        names[input_count++] = "bias";
    }
    /* The outputs' extents as the call validated them: with a packed batch
     * that is (1, heads, total rows), not (batch, heads, longest). */
    flashcl_shape shapes[3];
    flashcl_attention_shapes(shape_desc, &shapes[FLASHCL_SHAPE_Q], &shapes[FLASHCL_SHAPE_KV],
                             &shapes[FLASHCL_SHAPE_LSE]);
    for (int i = 0; i < count; ++i) {
        if (!tensors[i].is_output || !tensors[i].tensor) continue;
        flashcl_extent output;
        /* Already validated by flashcl_validate_call: this only recomputes the extent. */
        flashcl_status status =
            flashcl_validate_tensor(ctx, tensors[i].name, tensors[i].tensor, &shapes[tensors[i].kind], 1, &output);
        for (int j = 0; j < input_count && status == FLASHCL_SUCCESS; ++j)
            status = flashcl_check_no_overlap(ctx, tensors[i].name, &output, names[j], &inputs[j]);
        if (status != FLASHCL_SUCCESS) return status;
    }
    if (!f->dbias_view.buffer) return FLASHCL_SUCCESS;
    /* dBias, an output of the backward: its own view (every element its own address), then no byte shared with
     * any tensor of the call, input or output, nor with a feature buffer. */
    flashcl_extent dbias;
    flashcl_status status = flashcl_validate_tensor(ctx, "dbias", &f->dbias_view, &f->bias_shape, 1, &dbias);
    for (int j = 0; j < input_count && status == FLASHCL_SUCCESS; ++j)
        status = flashcl_check_no_overlap(ctx, "dbias", &dbias, names[j], &inputs[j]);
    for (int i = 0; i < count && status == FLASHCL_SUCCESS; ++i) {
        if (!tensors[i].tensor) continue;
        flashcl_extent other;
        status = flashcl_validate_tensor(ctx, tensors[i].name, tensors[i].tensor, &shapes[tensors[i].kind],
                                         tensors[i].is_output, &other);
        if (status == FLASHCL_SUCCESS) status = flashcl_check_no_overlap(ctx, "dbias", &dbias, tensors[i].name, &other);
    }
    return status;
}

// bias_reduce.cl: dBias from the backward's full-size dS scratch, summed over the bias's broadcast dimensions.
//
// Macros taken: FLASHCL_DTYPE (cl/common.cl), here dBias's element type (the bias's: float32 or the storage type).
// The dQ kernel (cl/backward.cl) wrote dS of every pair of every (batch, head) to ds, contiguous (batch, heads_q,
// seqlen_q, seqlen_k). Work-item e owns dBias element e of (out_batch, out_heads, seqlen_q, seqlen_k), out_batch
// 1 or batch and out_heads 1 or heads_q, and adds the dS it stands for in a fixed order (batch, then head,
// ascending), in float: the same bits on every run, with no atomics. One work-item per element, no local memory.

__kernel void flashcl_dbias_reduce(__global const float *ds, int batch, int heads_q, int seqlen_q, int seqlen_k,
                                   int out_batch, int out_heads, __global storage_t *dbias, ulong dbias_offset,
                                   ulong dbias_stride_b, ulong dbias_stride_h, ulong dbias_stride_s) {
    const ulong index = get_global_id(0);
    const ulong plane = (ulong)seqlen_q * (ulong)seqlen_k;
    if (index >= (ulong)out_batch * (ulong)out_heads * plane) return;
    const ulong pair = index % plane, bh = index / plane;
    const int oh = (int)(bh % (ulong)out_heads), ob = (int)(bh / (ulong)out_heads);
    const int row = (int)(pair / (ulong)seqlen_k), col = (int)(pair % (ulong)seqlen_k);
    // A broadcast dimension sums all of the problem's; a full one takes its own index only.
    const int b_first = out_batch == 1 ? 0 : ob, b_end = out_batch == 1 ? batch : ob + 1;
    const int h_first = out_heads == 1 ? 0 : oh, h_end = out_heads == 1 ? heads_q : oh + 1;
    float sum = 0.0f;
    for (int b = b_first; b < b_end; ++b)
        for (int h = h_first; h < h_end; ++h) sum += ds[((ulong)b * (ulong)heads_q + (ulong)h) * plane + pair];
    STORE(dbias, dbias_offset + (ulong)ob * dbias_stride_b + (ulong)oh * dbias_stride_h + (ulong)row * dbias_stride_s +
                     (ulong)col,
          sum);
}

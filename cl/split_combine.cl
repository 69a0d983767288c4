// split_combine.cl: merges the partials of a split-KV forward (cl/forward.cl with FLASHCL_SPLIT_KV) into O and
// LSE, the way the online softmax merges key blocks.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM   head dimension
//
// Split s of a row holds acc_s = sum_j exp(S_j - m_s) V_j over its keys, its
// maximum m_s and sum l_s. With M = max_s m_s and w_s = exp(m_s - M):
// O = sum_s w_s acc_s / sum_s w_s l_s and LSE = M + log(sum_s w_s l_s):
// the unsplit kernel's formula with its blocks grouped by split, so the
// results differ from it by rounding only (the weights come from exact
// maxima, not from rounded log-sum-exps). A split that saw no key has
// m_s = -inf: w_s = 0, it contributes nothing. A row whose splits all saw
// no key is empty (O = 0, LSE = -inf). The NaN rule holds: fmax drops NaN,
// so a NaN m_s or l_s (a NaN score or an infinite one) is looked for
// explicitly and makes the row NaN, as in the unsplit kernel; a zero total
// sum (every visible score -inf) gives O = 0/0 and LSE NaN, as there.
// Splits are summed in order, so a given split count gives the same bits
// every run.
//
// One work-item per output element (row, dim): consecutive work-items read
// consecutive dims of a split, so the reads coalesce.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif

__kernel void flashcl_split_combine(__global const float *part_o, __global const float2 *part_stats, int splits,
                                    ulong rows, __global storage_t *o, ulong o_offset, ulong o_stride_b,
                                    ulong o_stride_h, ulong o_stride_s, __global float *lse, ulong lse_offset,
                                    ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s, int write_lse,
                                    int heads_q, int seqlen_q) {
    const ulong index = get_global_id(0);
    if (index >= rows * HEAD_DIM) return;
    const ulong row = index / HEAD_DIM; // (batch x head) * seqlen_q + query row
    const int d = (int)(index - row * HEAD_DIM);
    float m = -INFINITY;
    bool nan = false;
    for (int s = 0; s < splits; ++s) {
        const float2 x = part_stats[(ulong)s * rows + row];
        nan = nan || isnan(x.x) || isnan(x.y);
        m = fmax(m, x.x);
    }
    float out, row_lse;
    if (nan) {
        out = NAN;
        row_lse = NAN;
    } else if (m == -INFINITY) {
        out = 0.0f; // no split saw a key: the empty row
        row_lse = -INFINITY;
    } else {
        float l = 0.0f, sum = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float2 x = part_stats[(ulong)s * rows + row];
            if (x.x == -INFINITY) continue; // saw no key: its acc is 0 and its weight 0
            const float w = exp(x.x - m);
            l = fma(w, x.y, l);
            sum = fma(w, part_o[((ulong)s * rows + row) * HEAD_DIM + d], sum);
        }
        out = sum / l;
        row_lse = flashcl_row_lse(m, l);
    }
    const ulong bh = row / (ulong)seqlen_q;
    const int i = (int)(row - bh * (ulong)seqlen_q);
    const ulong b = bh / (ulong)heads_q, h = bh - b * (ulong)heads_q;
    STORE(o, o_offset + b * o_stride_b + h * o_stride_h + (ulong)i * o_stride_s + d, out);
    if (write_lse && d == 0)
        lse[lse_offset + b * lse_stride_b + h * lse_stride_h + (ulong)i * lse_stride_s] = row_lse;
}

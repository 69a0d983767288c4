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
// Splits are summed in a fixed order, so a given split count gives the same
// bits every run.
//
// One work-group per row, COMBINE_THREADS work-items: the splits' statistics
// are reduced in local memory (a tree in a fixed order), then each
// work-item sums the weighted partials of its dims with the loads of
// several splits in flight (a split at a time would wait out the memory
// latency for each).

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef COMBINE_THREADS
#define COMBINE_THREADS 64
#endif
#define MAX_SPLITS 256 // the dispatcher's MAX_KV_SPLITS
// Splits whose partials each work-item loads before adding them: on the H100 (f16 d128 decode, 32 splits, a
// work-item per dim) 16 took the combine from about 10 us to 3 (4 left eight dependent rounds of loads).
#define BATCH 16

__kernel __attribute__((reqd_work_group_size(COMBINE_THREADS, 1, 1))) void flashcl_split_combine(
    __global const float *part_o, __global const float2 *part_stats, int splits, ulong rows,
    __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse, int heads_q, int seqlen_q) {
    __local float weight[MAX_SPLITS];
    __local float red_m[COMBINE_THREADS], red_l[COMBINE_THREADS];
    __local int red_nan[COMBINE_THREADS];
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0); // (batch x head) * seqlen_q + query row

    // M = max_s m_s, and whether any split's statistics are NaN.
    float m = -INFINITY;
    int nan = 0;
    for (int s = lid; s < splits; s += COMBINE_THREADS) {
        const float2 x = part_stats[(ulong)s * rows + row];
        nan |= isnan(x.x) || isnan(x.y);
        m = fmax(m, x.x);
    }
    red_m[lid] = m;
    red_nan[lid] = nan;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_n = COMBINE_THREADS / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) {
            red_m[lid] = fmax(red_m[lid], red_m[lid + half_n]);
            red_nan[lid] |= red_nan[lid + half_n];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = red_m[0];
    nan = red_nan[0];

    // Weights w_s and the total sum L = sum_s w_s l_s.
    float l = 0.0f;
    for (int s = lid; s < splits; s += COMBINE_THREADS) {
        const float2 x = part_stats[(ulong)s * rows + row];
        // A split that saw no key has acc 0 and weight 0.
        const float w = (x.x == -INFINITY || m == -INFINITY) ? 0.0f : exp(x.x - m);
        weight[s] = w;
        l = fma(w, x.y, l);
    }
    red_l[lid] = l;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_n = COMBINE_THREADS / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) red_l[lid] += red_l[lid + half_n];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    l = red_l[0];

    const ulong bh = row / (ulong)seqlen_q;
    const int i = (int)(row - bh * (ulong)seqlen_q);
    const ulong b = bh / (ulong)heads_q, h = bh - b * (ulong)heads_q;
    const ulong o_row = o_offset + b * o_stride_b + h * o_stride_h + (ulong)i * o_stride_s;
    for (int d = lid; d < HEAD_DIM; d += COMBINE_THREADS) {
        float sum = 0.0f;
        for (int s0 = 0; s0 < splits; s0 += BATCH) {
            float x[BATCH];
            for (int u = 0; u < BATCH; ++u)
                x[u] = part_o[((ulong)min(s0 + u, splits - 1) * rows + row) * HEAD_DIM + d];
            for (int u = 0; u < BATCH; ++u)
                if (s0 + u < splits) sum = fma(weight[s0 + u], x[u], sum);
        }
        float out;
        if (nan)
            out = NAN;
        else if (m == -INFINITY)
            out = 0.0f; // no split saw a key: the empty row
        else
            out = sum / l;
        STORE(o, o_row + d, out);
    }
    if (write_lse && lid == 0)
        lse[lse_offset + b * lse_stride_b + h * lse_stride_h + (ulong)i * lse_stride_s] =
            nan ? NAN : flashcl_row_lse(m, l);
}

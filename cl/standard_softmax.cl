// standard_softmax.cl: row kernels of standard attention over materialised N x N score matrices.
//
// Macros taken (the host passes them with -D; defaults let the file compile alone):
//   ROW_WG   work-items per row (a power of two); one work-group owns one row
//
// The score matrices come from CLBlast GEMMs with alpha = scale, so they hold
// scale * Q K^T already. Storage of scores is always float, whatever the
// dtype of the tensors. One work-group per row keeps each row's reductions in
// a fixed order: results are bitwise the same run to run. Every barrier is
// reached by the whole work-group (the loops only guard their bodies).

#ifndef ROW_WG
#define ROW_WG 128
#endif
#if ROW_WG < 1 || (ROW_WG & (ROW_WG - 1)) != 0
#error "ROW_WG must be a power of two"
#endif

// Bottom-right causal alignment: row i sees keys j < i + seqlen_k - seqlen_q + 1.
inline int flashcl_visible_keys(int i, int seqlen_q, int seqlen_k, int causal) {
    return causal ? clamp(i + seqlen_k - seqlen_q + 1, 0, seqlen_k) : seqlen_k;
}

// (m, l) pairs of a running softmax: l = sum of exp(x - m). The -inf guard
// keeps an empty pair from producing exp(-inf - -inf) = NaN; a NaN sum of a
// pair whose scores were all NaN is kept.
inline float2 flashcl_merge_max_sum(float2 a, float2 b) {
    const float m = fmax(a.x, b.x);
    if (m == -INFINITY) return (float2)(-INFINITY, a.y + b.y);
    return (float2)(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

// P = softmax(S) row by row, in place, and LSE = max + log(sum) (natural
// log). Masked keys and every key of a fully masked row get P = 0, and such a
// row's LSE is -inf, so the following GEMM gives O = 0 there. A NaN score
// makes its row's P and LSE NaN.
// One work-group per row of the chunk; rows are (head - first_head, i).
__kernel __attribute__((reqd_work_group_size(ROW_WG, 1, 1))) void flashcl_standard_softmax(
    __global float *scores, ulong first_head, int heads_q, int seqlen_q, int seqlen_k, int causal,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse) {
    __local float2 parts[ROW_WG];
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0);
    const ulong local_head = row / (ulong)seqlen_q;
    const int i = (int)(row - local_head * (ulong)seqlen_q);
    __global float *s = scores + row * (ulong)seqlen_k;
    const int visible = flashcl_visible_keys(i, seqlen_q, seqlen_k, causal);

    // One read of the row: each work-item keeps a running (max, sum).
    float2 mine = (float2)(-INFINITY, 0.0f);
    for (int j = lid; j < visible; j += ROW_WG) {
        const float x = s[j];
        if (x == -INFINITY) continue; // weight 0 (an overflowed score); a row of only such is NaN below
        if (x > mine.x) {
            mine.y = mine.y * exp(mine.x - x) + 1.0f;
            mine.x = x;
        } else {
            mine.y += exp(x - mine.x);
        }
    }
    parts[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = ROW_WG / 2; half_width > 0; half_width >>= 1) {
        if (lid < half_width) parts[lid] = flashcl_merge_max_sum(parts[lid], parts[lid + half_width]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    // The library's rule for rows that see keys: IEEE arithmetic of the
    // max-subtracted softmax, as the fused kernels compute it. A +inf
    // maximum gives exp(inf - inf) and visible scores that are all -inf
    // give exp(-inf - -inf): NaN, never a silently empty row.
    const float row_max = parts[0].x;
    const float row_sum = (row_max == -INFINITY || row_max == INFINITY) ? NAN : parts[0].y;

    // Second read: normalise; the masked tail is written as exact zeros.
    for (int j = lid; j < seqlen_k; j += ROW_WG) s[j] = j < visible ? exp(s[j] - row_max) / row_sum : 0.0f;

    if (write_lse && lid == 0) {
        const ulong head = first_head + local_head;
        const ulong b = head / (ulong)heads_q, h = head - b * (ulong)heads_q;
        lse[lse_offset + b * lse_stride_b + h * lse_stride_h + (ulong)i * lse_stride_s] =
            visible > 0 ? row_max + log(row_sum) : -INFINITY;
    }
}

// The softmax gradient of one row: from S (scale * Q K^T), dP (dO V^T) and
// the forward's LSE, writes P = exp(S - LSE) over S and
// dS = P * (dP - D) over dP, with D = rowsum(dO * O) reduced here. Masked
// keys and fully masked rows (LSE = -inf) give P = dS = 0, never NaN.
__kernel __attribute__((reqd_work_group_size(ROW_WG, 1, 1))) void flashcl_standard_softmax_grad(
    __global float *scores, __global float *dprob, ulong first_head, int heads_q, int seqlen_q, int seqlen_k,
    int causal, int head_dim, __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h,
    ulong lse_stride_s, __global const storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h,
    ulong o_stride_s, __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h,
    ulong do_stride_s) {
    __local float parts[ROW_WG];
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0);
    const ulong local_head = row / (ulong)seqlen_q;
    const int i = (int)(row - local_head * (ulong)seqlen_q);
    const ulong head = first_head + local_head;
    const ulong b = head / (ulong)heads_q, h = head - b * (ulong)heads_q;

    const ulong o_row = o_offset + b * o_stride_b + h * o_stride_h + (ulong)i * o_stride_s;
    const ulong do_row = do_offset + b * do_stride_b + h * do_stride_h + (ulong)i * do_stride_s;
    float dot = 0.0f;
    for (int d = lid; d < head_dim; d += ROW_WG) dot += LOAD(dout, do_row + d) * LOAD(o, o_row + d);
    parts[lid] = dot;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_width = ROW_WG / 2; half_width > 0; half_width >>= 1) {
        if (lid < half_width) parts[lid] += parts[lid + half_width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float delta = parts[0];

    const float row_lse = lse[lse_offset + b * lse_stride_b + h * lse_stride_h + (ulong)i * lse_stride_s];
    const int visible = row_lse == -INFINITY ? 0 : flashcl_visible_keys(i, seqlen_q, seqlen_k, causal);
    __global float *s = scores + row * (ulong)seqlen_k;
    __global float *dp = dprob + row * (ulong)seqlen_k;
    for (int j = lid; j < seqlen_k; j += ROW_WG) {
        float p = 0.0f, ds = 0.0f;
        if (j < visible) {
            p = exp(s[j] - row_lse);
            ds = p * (dp[j] - delta);
        }
        s[j] = p;
        dp[j] = ds;
    }
}

// backward_delta.cl: D = rowsum(dO * O), one float per query row, the backward pass's only scratch (O(N)); the
// first kernel of both backward families (cl/backward.cl, cl/backward_mma.cl), which read D in their dS.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM   head dimension
//
// One work-item per row of (batch x heads_q, seqlen_q) rows; with a packed
// variable-length batch the host passes one sequence of total_q rows.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif

__kernel void flashcl_backward_delta(__global const storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h,
                                   ulong o_stride_s, __global const storage_t *dout, ulong do_offset,
                                   ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
                                   __global float *delta, int heads_q, int seqlen_q, ulong rows) {
    const ulong index = get_global_id(0);
    if (index >= rows) return;
    const ulong bh = index / (ulong)seqlen_q;
    const int i = (int)(index - bh * (ulong)seqlen_q);
    const ulong b = bh / (ulong)heads_q, h = bh - b * (ulong)heads_q;
    const ulong o_row = o_offset + b * o_stride_b + h * o_stride_h + (ulong)i * o_stride_s;
    const ulong do_row = do_offset + b * do_stride_b + h * do_stride_h + (ulong)i * do_stride_s;
    float sum = 0.0f;
    // mad in ascending order, as dP = dO . V in the tiled kernels: where a
    // row sees one key, O is that V row and dP - D is exactly 0, as it should.
    for (int d = 0; d < HEAD_DIM; ++d) sum = mad(LOAD(dout, do_row + d), LOAD(o, o_row + d), sum);
    delta[index] = sum;
}

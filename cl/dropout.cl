// dropout.cl: writes the dropout keep mask the attention kernels use, for inspection and tests.
//
// Macros taken: FLASHCL_DROPOUT must be 1 (the Philox generator of common.cl).
// One work-item per (row, column) of one head: keep[b][h][i][j] is 1 when
// the element is kept, exactly as flashcl_forward / flashcl_backward decide.

#if !FLASHCL_DROPOUT
#error "dropout.cl needs -DFLASHCL_DROPOUT=1"
#endif

__kernel void flashcl_dropout_mask(__global uchar *keep, ulong keep_offset, int seqlen_q, int seqlen_k,
                                   uint dropout_threshold, uint seed_lo, uint seed_hi, ulong dropout_offset) {
    const int col = (int)get_global_id(0);
    const int row = (int)get_global_id(1);
    const ulong bh = get_global_id(2);
    if (col >= seqlen_k || row >= seqlen_q) return;
    const ulong index = keep_offset + (bh * (ulong)seqlen_q + (ulong)row) * (ulong)seqlen_k + (ulong)col;
    keep[index] = (uchar)flashcl_dropout_keep(bh, row, col, dropout_threshold, seed_lo, seed_hi, dropout_offset);
}

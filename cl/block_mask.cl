// block_mask.cl: summarises a user block mask over the tiles of one attention kernel, so tiles can be skipped.
//
// No macros: tile and mask block sizes are arguments, so one build serves
// every plan. Work-item (tile, head) reads every mask entry its tile of
// tile_q query rows x tile_k key columns touches and writes 0 (every entry
// off: the tile is skipped, its K/V or Q rows never loaded), 1 (every entry
// on: no element-wise mask needed) or 2 (mixed: masked element by element).
// With a packed variable-length batch seqlen_q / seqlen_k are the longest
// lengths and the one summary serves every sequence: a shorter sequence's
// part of a tile is a subset of the tile summarised here, so all-off stays
// all-off and all-on stays all-on for it (mixed is masked element by element
// on the sequence's own lengths anyway).

__kernel void flashcl_tile_mask(__global const uchar *mask, ulong mask_offset, ulong mask_stride_h, int mask_block, int mask_cols,
                                int seqlen_q, int seqlen_k, int tile_q, int tile_k, int tile_rows, int tile_cols,
                                __global uchar *tiles) {
    const int index = (int)get_global_id(0);
    const int head = (int)get_global_id(1);
    if (index >= tile_rows * tile_cols) return;
    const int qt = index / tile_cols, kt = index - qt * tile_cols;
    // Mask blocks covering the tile's rows and columns inside the sequences.
    const int qb0 = qt * tile_q / mask_block, qb1 = (min((qt + 1) * tile_q, seqlen_q) - 1) / mask_block;
    const int kb0 = kt * tile_k / mask_block, kb1 = (min((kt + 1) * tile_k, seqlen_k) - 1) / mask_block;
    __global const uchar *head_mask = mask + mask_offset + (ulong)head * mask_stride_h;
    int on = 0, off = 0;
    for (int qb = qb0; qb <= qb1; ++qb)
        for (int kb = kb0; kb <= kb1; ++kb) {
            if (head_mask[(ulong)qb * (ulong)mask_cols + (ulong)kb] != 0)
                on = 1;
            else
                off = 1;
        }
    tiles[(ulong)head * (ulong)tile_rows * (ulong)tile_cols + (ulong)index] = on ? (off ? 2 : 1) : 0;
}

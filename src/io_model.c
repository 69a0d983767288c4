/* io_model.c: the IO model: bytes each implementation moves through global memory for one call, from its actual plan. */
#include "call_features.h"
#include "validate.h"

/* Conventions for every formula below:
 *   e = bytes per element of Q, K, V, O (and gradients); LSE, D and the
 *   standard implementation's score matrices are float (4 bytes).
 *   Every count is per (batch, query head) unless it says per K/V head; the
 *   totals multiply by batch * heads_q (or batch * heads_kv).
 *   A read or write of a row touches exactly its head_dim elements (the
 *   kernels guard their loads at the sequence ends and at head_dim).
 *   LSE is counted as written whether or not the caller asked for it.
 *   The model counts what the kernels request from global memory; caches may
 *   serve part of it, so it is the traffic a cache-less device would see.
 *   Causal masks and sliding windows are counted (the kernels skip the tiles
 *   outside the band); a block mask is not (its contents are on the device),
 *   so with one the figure is the dense mask's, an upper bound. */

/* The band of keys a block of query rows walks, as the kernels bound it. */
typedef struct key_band {
    int causal, window;
    long long left, right; /* window widths (an unbounded side is wider than any sequence) */
} key_band;

static key_band band_of(const flashcl_attention_desc *desc) {
    /* The kernels' own view of causal and window: features_resolve folds a
     * causal mask into the window's right edge. Without extras it only reads
     * desc and cannot fail. */
    flashcl_features f;
    flashcl_features_resolve(NULL, desc, NULL, &f);
    return (key_band){f.causal, f.window, f.window_left, f.window_right};
}

static long long clamp_ll(long long x, long long lo, long long hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* Keys a causal (bottom-right) row block [row0, row0 + rows) may see:
 * j < row0 + rows + seqlen_k - seqlen_q, clamped to [0, seqlen_k]. */
static double visible_key_end(int causal, long long row0, long long rows, long long seqlen_q, long long seqlen_k) {
    if (!causal) return (double)seqlen_k;
    return (double)clamp_ll(row0 + rows + seqlen_k - seqlen_q, 0, seqlen_k);
}

/* Rows a loop reads when it runs from `begin` to `end` in steps of `block`
 * and loads whole blocks guarded by seqlen. */
static double streamed_rows(long long begin, long long end, long long block, long long seqlen) {
    if (end <= begin) return 0.0;
    const long long stop = begin + (end - begin + block - 1) / block * block;
    return (double)((stop < seqlen ? stop : seqlen) - begin);
}

/* Keys [*begin, *end) the forward (and, transposed, the dQ kernel) streams
 * for the query rows [row0, row0 + rows), in blocks of `block` keys; window
 * bands start at a multiple of the block (cl/forward.cl, flashcl_backward_dq). */
static void key_range(const key_band *band, long long row0, long long rows, long long block, long long seqlen_q,
                      long long seqlen_k, long long *begin, long long *end) {
    const long long diagonal = seqlen_k - seqlen_q;
    *begin = 0;
    *end = (long long)visible_key_end(band->causal, row0, rows, seqlen_q, seqlen_k);
    if (band->window) {
        const long long last = (row0 + rows < seqlen_q ? row0 + rows : seqlen_q) - 1;
        *begin = clamp_ll(row0 + diagonal - band->left, 0, seqlen_k) / block * block;
        const long long band_end = clamp_ll(last + diagonal + band->right + 1, 0, seqlen_k);
        if (band_end < *end) *end = band_end;
    }
}

/* Query rows [*begin, *end) the dK/dV kernel streams for the keys
 * [key0, key0 + keys), in blocks of `block` rows (flashcl_backward_dkdv). */
static void query_range(const key_band *band, long long key0, long long keys, long long block, long long seqlen_q,
                        long long seqlen_k, long long *begin, long long *end) {
    const long long diagonal = seqlen_k - seqlen_q;
    *begin = band->causal ? clamp_ll(key0 - diagonal, 0, seqlen_q) : 0;
    *end = seqlen_q;
    if (band->window) {
        const long long last = (key0 + keys < seqlen_k ? key0 + keys : seqlen_k) - 1;
        const long long first = clamp_ll(key0 - diagonal - band->right, 0, seqlen_q);
        *begin = (first > *begin ? first : *begin) / block * block;
        *end = clamp_ll(last - diagonal + band->left + 1, 0, seqlen_q);
    }
}

/* Score entries the standard softmax reads per head: the visible keys of
 * every row (the masked tail is only written). */
static double visible_entries(const flashcl_attention_desc *desc) {
    double entries = 0.0;
    for (long long i = 0; i < desc->seqlen_q; ++i)
        entries += visible_key_end(desc->causal, i, 1, desc->seqlen_q, desc->seqlen_k);
    return entries;
}

/* Flash forward (cl/forward.cl): a work-group owns block_q query rows,
 * reads them once, then streams K and V in blocks of block_k up to the last
 * key its rows may see (causal: later blocks are skipped), and writes O and
 * LSE. K and V are read once per query block: Theta(N^2 d / block_q), and
 * block_q ~ M / d for M bytes of local memory gives Theta(N^2 d^2 / M). */
static double flash_forward_bytes(const flashcl_attention_desc *desc, const flashcl_plan *plan, double e) {
    const double sq = desc->seqlen_q, d = desc->head_dim;
    const key_band band = band_of(desc);
    double kv_rows = 0.0;
    for (long long q0 = 0; q0 < desc->seqlen_q; q0 += plan->block_q) {
        long long begin, end;
        key_range(&band, q0, plan->block_q, plan->block_k, desc->seqlen_q, desc->seqlen_k, &begin, &end);
        kv_rows += streamed_rows(begin, end, plan->block_k, desc->seqlen_k);
    }
    const double per_head = sq * d * e /* Q */ + 2.0 * kv_rows * d * e /* K, V */ + sq * d * e /* O */ + sq * 4.0;
    return per_head * desc->batch * desc->heads_q;
}

/* Flash backward (cl/backward.cl):
 *   delta: per query head reads O and dO, writes D (one float per row).
 *   dkdv:  per K/V head and key block of block_k rows: reads those K, V rows
 *          once; for each query head of the group streams the queries the
 *          block may see (causal: from row k0 - (seqlen_k - seqlen_q);
 *          window: the band's rows, from a multiple of block_q),
 *          reading Q, dO, LSE and D for each; writes dK, dV once.
 *   dq:    the plan transposed: per query head and block of block_k query
 *          rows: reads Q, dO, LSE, D once, streams K and V in steps of
 *          block_q up to the last visible key; writes dQ. */
static double flash_backward_bytes(const flashcl_attention_desc *desc, const flashcl_plan *plan, double e) {
    const long long sq = desc->seqlen_q, sk = desc->seqlen_k;
    const double d = desc->head_dim, group = (double)(desc->heads_q / desc->heads_kv);
    const double row_qdo = 2.0 * d * e + 8.0; /* Q, dO, LSE, D of one query row */
    const key_band band = band_of(desc);

    const double delta = sq * (2.0 * d * e + 4.0);

    double dkdv_per_kv_head = 2.0 * (double)sk * d * e /* K, V in */ + 2.0 * (double)sk * d * e /* dK, dV out */;
    for (long long k0 = 0; k0 < sk; k0 += plan->block_k) {
        long long begin, end;
        query_range(&band, k0, plan->block_k, plan->block_q, sq, sk, &begin, &end);
        dkdv_per_kv_head += group * streamed_rows(begin, end, plan->block_q, sq) * row_qdo;
    }

    double dq = (double)sq * row_qdo + (double)sq * d * e /* dQ out */;
    for (long long q0 = 0; q0 < sq; q0 += plan->block_k) {
        long long begin, end;
        key_range(&band, q0, plan->block_k, plan->block_q, sq, sk, &begin, &end);
        dq += 2.0 * d * e * streamed_rows(begin, end, plan->block_q, sk);
    }

    return (delta + dq) * desc->batch * desc->heads_q + dkdv_per_kv_head * desc->batch * desc->heads_kv;
}

/* Standard forward (src/standard_forward.c), E = seqlen_q * seqlen_k per head:
 *   GEMM S = scale Q K^T: reads Q, K, writes S (4E);
 *   softmax: reads the visible part of S twice (max/sum, then normalise),
 *            writes P over S (4E) and LSE;
 *   GEMM O = P V: reads P (4E), V, writes O.
 * The full S is computed even when causal (only the softmax skips masked
 * reads): Theta(N d + N^2) per head. A GEMM is counted as reading each
 * operand once, its ideal; a real GEMM re-reads tiles, so this is a lower
 * bound on the standard implementation's traffic. */
static double standard_forward_bytes(const flashcl_attention_desc *desc, double e) {
    const double sq = desc->seqlen_q, sk = desc->seqlen_k, d = desc->head_dim, n2 = sq * sk * 4.0;
    const double visible = visible_entries(desc) * 4.0;
    const double gemm_s = (sq + sk) * d * e + n2;
    const double softmax = 2.0 * visible + n2 + sq * 4.0;
    const double gemm_o = n2 + sk * d * e + sq * d * e;
    return (gemm_s + softmax + gemm_o) * desc->batch * desc->heads_q;
}

/* Standard backward (src/standard_backward.c), per query head:
 *   S = scale Q K^T: Q, K in, S out (4E);     dP = dO V^T: dO, V in, dP out (4E);
 *   gradient kernel: O, dO, LSE in; visible S and dP in; P and dS out (8E);
 *   dV = P^T dO: P (4E), dO in, dV out;       dK = scale dS^T Q: dS (4E), Q in, dK out;
 *   dQ = scale dS K: dS (4E), K in, dQ out.
 * dK and dV of a K/V head are written by each of its group's query heads in
 * turn, every one after the first also reading the partial sum. */
static double standard_backward_bytes(const flashcl_attention_desc *desc, double e) {
    const double sq = desc->seqlen_q, sk = desc->seqlen_k, d = desc->head_dim, n2 = sq * sk * 4.0;
    const double visible = visible_entries(desc) * 4.0;
    const double group = (double)(desc->heads_q / desc->heads_kv);
    const double gemm_s = (sq + sk) * d * e + n2, gemm_dp = (sq + sk) * d * e + n2;
    const double grad = 2.0 * sq * d * e + sq * 4.0 + 2.0 * visible + 2.0 * n2;
    const double accumulate = (group - 1.0) / group; /* share of heads that read dK, dV back */
    const double gemm_dv = n2 + sq * d * e + (1.0 + accumulate) * sk * d * e;
    const double gemm_dk = n2 + sq * d * e + (1.0 + accumulate) * sk * d * e;
    const double gemm_dq = n2 + sk * d * e + sq * d * e;
    return (gemm_s + gemm_dp + grad + gemm_dv + gemm_dk + gemm_dq) * desc->batch * desc->heads_q;
}

double flashcl_io_model_bytes(const flashcl_attention_desc *desc, flashcl_impl impl, flashcl_pass pass,
                              const flashcl_plan *plan) {
    const double e = (double)flashcl_dtype_size(desc->dtype);
    if (impl == FLASHCL_IMPL_STANDARD)
        return pass == FLASHCL_PASS_FORWARD ? standard_forward_bytes(desc, e) : standard_backward_bytes(desc, e);
    if (!plan || plan->block_q < 1 || plan->block_k < 1) return 0.0;
    return pass == FLASHCL_PASS_FORWARD ? flash_forward_bytes(desc, plan, e) : flash_backward_bytes(desc, plan, e);
}

double flashcl_io_model_bias_bytes(const flashcl_attention_desc *desc, const flashcl_features *f, flashcl_pass pass) {
    if (!f || !f->bias) return 0.0;
    const double eb = (double)flashcl_dtype_size(f->bias_dtype), heads = (double)desc->batch * desc->heads_q;
    /* Read where a score is computed: once by the forward, once by each backward kernel (dK/dV, dQ). */
    const double passes = pass == FLASHCL_PASS_FORWARD ? 1.0 : 2.0;
    double bytes = passes * visible_entries(desc) * eb * heads;
    if (pass == FLASHCL_PASS_BACKWARD && f->dbias_view.buffer) {
        const double full = heads * (double)desc->seqlen_q * (double)desc->seqlen_k;
        if (f->dbias_direct)
            bytes += full * eb;
        else /* the float scratch written and read back, then the bias's own shape written */
            bytes += 2.0 * full * 4.0 +
                     (double)f->bias_shape.batch * (double)f->bias_shape.heads * (double)desc->seqlen_q *
                         (double)desc->seqlen_k * eb;
    }
    return bytes;
}

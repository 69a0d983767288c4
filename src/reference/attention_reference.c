/* attention_reference.c: naive attention (scores, softmax, product with V) and its gradients on the CPU. */
#include "attention_reference.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* Rounds to float when emulating float arithmetic. */
static double r(flashcl_ref_precision p, double x) { return p == FLASHCL_REF_FLOAT ? (double)(float)x : x; }

/* The row of one (batch, head) that the reference works on, with what
 * decides which of its keys are visible and kept. */
typedef struct ref_row {
    const flashcl_attention_desc *d;
    const flashcl_reference_extras *x;
    int b, h, i;
} ref_row;

static size_t element_index(const ref_row *w, int j) {
    const flashcl_attention_desc *d = w->d;
    return (((size_t)w->b * d->heads_q + w->h) * d->seqlen_q + w->i) * d->seqlen_k + j;
}

/* Index of pair (i, j) of w's (batch, head) in the bias's (bias_batch, bias_heads, Sq, Sk), broadcast dims at 0. */
static size_t bias_index(const ref_row *w, int j) {
    const flashcl_attention_desc *d = w->d;
    const flashcl_reference_extras *e = w->x;
    const size_t b = e->bias_batch > 1 ? (size_t)w->b : 0, h = e->bias_heads > 1 ? (size_t)w->h : 0;
    return (((b * (size_t)(e->bias_heads > 1 ? e->bias_heads : 1) + h) * d->seqlen_q + w->i) * d->seqlen_k) + j;
}

static int visible(const ref_row *w, int j) {
    const flashcl_attention_desc *d = w->d;
    if (w->x && w->x->bias && w->x->bias[bias_index(w, j)] == -INFINITY) return 0; /* a -inf bias is a mask */
    const long pos = (long)w->i + d->seqlen_k - d->seqlen_q;
    if (d->causal && j > pos) return 0;
    if (d->sliding_window && d->window_left >= 0 && j < pos - d->window_left) return 0;
    if (d->sliding_window && d->window_right >= 0 && j > pos + d->window_right) return 0;
    return !w->x || !w->x->mask || w->x->mask[element_index(w, j)] != 0;
}

/* The factor dropout applies to P_ij: 0 or 1/(1-p) (1 without dropout). */
static double dropout_factor(const ref_row *w, int j) {
    const flashcl_attention_desc *d = w->d;
    if (d->dropout_p <= 0.0f) return 1.0;
    const int keep = w->x && w->x->keep ? w->x->keep[element_index(w, j)] != 0
                                        : flashcl_reference_dropout_keep(d, w->b, w->h, w->i, j);
    return keep ? 1.0 / (1.0 - (double)d->dropout_p) : 0.0;
}

void flashcl_reference_alibi_slopes(int heads, double max_bias, float *slopes) {
    int n_floor = 1;
    while (2 * n_floor <= heads) n_floor *= 2;
    const double m0 = exp2(-max_bias / n_floor), m1 = exp2(-max_bias / 2.0 / n_floor);
    for (int h = 0; h < heads; ++h) slopes[h] = (float)(h < n_floor ? pow(m0, h + 1) : pow(m1, 2 * (h - n_floor) + 1));
}

void flashcl_reference_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        c1 = (uint32_t)p1;
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

int flashcl_reference_dropout_keep(const flashcl_attention_desc *d, int b, int h, int i, int j) {
    const uint64_t upper = (uint64_t)b * (uint64_t)d->heads_q + (uint64_t)h + d->dropout_offset;
    const uint32_t ctr[4] = {(uint32_t)j, (uint32_t)i, (uint32_t)upper, (uint32_t)(upper >> 32)};
    const uint32_t key[2] = {(uint32_t)d->dropout_seed, (uint32_t)(d->dropout_seed >> 32)};
    uint32_t out[4];
    flashcl_reference_philox(ctr, key, out);
    /* Kept when the word is at least floor(p * 2^32), as the kernels decide. */
    return out[0] >= (uint32_t)floor((double)d->dropout_p * 4294967296.0);
}

void flashcl_reference_dropout_mask(const flashcl_attention_desc *d, uint8_t *keep) {
    size_t x = 0;
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h)
            for (int i = 0; i < d->seqlen_q; ++i)
                for (int j = 0; j < d->seqlen_k; ++j) keep[x++] = (uint8_t)flashcl_reference_dropout_keep(d, b, h, i, j);
}

void flashcl_reference_expand_block_mask(const flashcl_attention_desc *d, const uint8_t *block_mask, int block_size,
                                         int per_head, uint8_t *mask) {
    const size_t rows = ((size_t)d->seqlen_q + block_size - 1) / block_size;
    const size_t cols = ((size_t)d->seqlen_k + block_size - 1) / block_size;
    size_t x = 0;
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h) {
            const uint8_t *plane = block_mask + (per_head ? (size_t)h * rows * cols : 0);
            for (int i = 0; i < d->seqlen_q; ++i)
                for (int j = 0; j < d->seqlen_k; ++j)
                    mask[x++] = plane[(size_t)(i / block_size) * cols + (size_t)(j / block_size)] != 0;
        }
}

static double scale_of(const flashcl_attention_desc *d) {
    return d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim);
}

/* A score as the kernels hold it: float. A dot product or scaled score past
 * FLT_MAX overflows to +-inf there, so it does here; below that the double
 * value is kept (rounding every score to float would blur the golden
 * reference). Partial sums that overflow while the whole does not are not
 * modelled: documented as outside the accurate range. */
static double float_overflow(double x) { return fabs(x) > FLT_MAX ? (double)(float)x : x; }

/* Probabilities of row i of one head into p[0..Sk); returns the row's
 * log-sum-exp. The library's rule for non-finite values: a row is empty
 * (p all zero, LSE -inf) exactly when no key is visible after the masks;
 * otherwise IEEE arithmetic of the max-subtracted softmax decides, so a NaN
 * score, a +inf score, or visible scores that are all -inf (an overflow)
 * give NaN probabilities and a NaN LSE, never a silent empty row. A masked
 * key takes no part at all (p = 0, seen_by 0: the callers skip its products). */
/* The score modifiers of w's row applied to its scaled score x against key j
 * (see flashcl_reference_extras); *grad receives d(result)/dx. */
static double modify_score(const ref_row *w, flashcl_ref_precision prec, double x, int j, double *grad) {
    const flashcl_reference_extras *e = w->x;
    *grad = 1.0;
    if (!e) return x;
    if (e->softcap > 0.0) {
        const double t = r(prec, tanh(r(prec, x / e->softcap)));
        *grad = r(prec, 1.0 - r(prec, t * t));
        x = r(prec, e->softcap * t);
    }
    if (e->alibi_slopes) {
        const flashcl_attention_desc *d = w->d;
        const size_t index = (e->alibi_per_batch ? (size_t)w->b * d->heads_q : 0) + (size_t)w->h;
        const double distance = fabs((double)w->i + d->seqlen_k - d->seqlen_q - j);
        x = r(prec, x - r(prec, (double)e->alibi_slopes[index] * distance));
    }
    if (e->bias) x = r(prec, x + (double)e->bias[bias_index(w, j)]);
    return x;
}

static double softmax_row(const ref_row *w, flashcl_ref_precision prec, const float *qrow, const float *khead,
                          double *p, unsigned char *seen_by, double *grad) {
    const flashcl_attention_desc *d = w->d;
    const int D = d->head_dim;
    const double scale = r(prec, scale_of(d));
    double m = -INFINITY;
    int seen = 0;
    for (int j = 0; j < d->seqlen_k; ++j) {
        seen_by[j] = (unsigned char)visible(w, j);
        if (!seen_by[j]) continue;
        double s = 0.0;
        for (int t = 0; t < D; ++t) s = r(prec, s + r(prec, (double)qrow[t] * khead[(size_t)j * D + t]));
        double g;
        p[j] = modify_score(w, prec, float_overflow(r(prec, float_overflow(s) * scale)), j, &g);
        if (grad) grad[j] = g;
        if (p[j] > m) m = p[j]; /* NaN never wins: as fmax in the kernels */
        seen = 1;
    }
    if (!seen) {
        for (int j = 0; j < d->seqlen_k; ++j) p[j] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int j = 0; j < d->seqlen_k; ++j) {
        /* With m = -inf (every visible score -inf) or +inf, p - m is NaN. */
        p[j] = seen_by[j] ? r(prec, exp(p[j] - m)) : 0.0;
        sum = r(prec, sum + p[j]);
    }
    for (int j = 0; j < d->seqlen_k; ++j) p[j] = r(prec, p[j] / sum);
    return r(prec, m + log(sum));
}

int flashcl_reference_forward(const flashcl_attention_desc *d, flashcl_ref_precision prec, const float *q,
                              const float *k, const float *v, double *o, double *lse) {
    return flashcl_reference_forward_ex(d, prec, NULL, q, k, v, o, lse);
}

int flashcl_reference_forward_ex(const flashcl_attention_desc *d, flashcl_ref_precision prec,
                                 const flashcl_reference_extras *extras, const float *q, const float *k,
                                 const float *v, double *o, double *lse) {
    const int D = d->head_dim, Sq = d->seqlen_q, Sk = d->seqlen_k, group = d->heads_q / d->heads_kv;
    double *p = malloc(sizeof(double) * (size_t)Sk);
    unsigned char *seen_by = malloc((size_t)Sk);
    if (!p || !seen_by) {
        free(p);
        free(seen_by);
        return -1;
    }
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h) {
            const size_t qh = ((size_t)b * d->heads_q + h) * Sq * D;
            const size_t kh = ((size_t)b * d->heads_kv + h / group) * Sk * D;
            for (int i = 0; i < Sq; ++i) {
                const ref_row w = {d, extras, b, h, i};
                double l = softmax_row(&w, prec, q + qh + (size_t)i * D, k + kh, p, seen_by, NULL);
                if (lse) lse[((size_t)b * d->heads_q + h) * Sq + i] = l;
                /* Dropout acts on the normalised probabilities, after LSE. */
                for (int j = 0; j < Sk; ++j) p[j] = r(prec, p[j] * dropout_factor(&w, j));
                for (int t = 0; t < D; ++t) {
                    double acc = 0.0;
                    for (int j = 0; j < Sk; ++j)
                        if (seen_by[j]) acc = r(prec, acc + r(prec, p[j] * v[kh + (size_t)j * D + t]));
                    o[qh + (size_t)i * D + t] = acc;
                }
            }
        }
    free(p);
    free(seen_by);
    return 0;
}

int flashcl_reference_backward(const flashcl_attention_desc *d, flashcl_ref_precision prec, const float *q,
                               const float *k, const float *v, const float *dout, double *dq, double *dk,
                               double *dv) {
    return flashcl_reference_backward_ex(d, prec, NULL, q, k, v, dout, dq, dk, dv);
}

int flashcl_reference_backward_ex(const flashcl_attention_desc *d, flashcl_ref_precision prec,
                                  const flashcl_reference_extras *extras, const float *q, const float *k,
                                  const float *v, const float *dout, double *dq, double *dk, double *dv) {
    const int D = d->head_dim, Sq = d->seqlen_q, Sk = d->seqlen_k, group = d->heads_q / d->heads_kv;
    const double scale = r(prec, scale_of(d));
    double *p = malloc(sizeof(double) * (size_t)Sk);
    double *dp = malloc(sizeof(double) * (size_t)Sk);
    double *grad = malloc(sizeof(double) * (size_t)Sk);
    unsigned char *seen_by = malloc((size_t)Sk);
    if (!p || !dp || !grad || !seen_by) {
        free(p);
        free(dp);
        free(grad);
        free(seen_by);
        return -1;
    }
    const size_t kv_count = (size_t)d->batch * d->heads_kv * Sk * D;
    for (size_t x = 0; x < kv_count; ++x) dk[x] = dv[x] = 0.0;
    double *dbias = extras && extras->bias ? extras->dbias : NULL;
    if (dbias) {
        const size_t count = (size_t)(extras->bias_batch > 1 ? extras->bias_batch : 1) *
                             (size_t)(extras->bias_heads > 1 ? extras->bias_heads : 1) * Sq * Sk;
        for (size_t x = 0; x < count; ++x) dbias[x] = 0.0;
    }
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h) {
            const size_t qh = ((size_t)b * d->heads_q + h) * Sq * D;
            const size_t kh = ((size_t)b * d->heads_kv + h / group) * Sk * D;
            for (int i = 0; i < Sq; ++i) {
                const float *qrow = q + qh + (size_t)i * D, *dorow = dout + qh + (size_t)i * D;
                const ref_row w = {d, extras, b, h, i};
                softmax_row(&w, prec, qrow, k + kh, p, seen_by, grad);
                /* With dropout factors z_j (0 or 1/(1-p); 1 without):
                 * O = sum_j z_j P_j V_j, so dV_j += z_j P_j dO, dP'_j =
                 * z_j (dO . V_j), D_i = sum_j P_j dP'_j (= rowsum(dO * O))
                 * and dS_j = P_j (dP'_j - D_i). */
                double di = 0.0;
                for (int j = 0; j < Sk; ++j) {
                    dp[j] = 0.0;
                    if (!seen_by[j]) continue; /* a masked pair takes no part, NaN/Inf included */
                    double s = 0.0;
                    for (int t = 0; t < D; ++t) s = r(prec, s + r(prec, (double)dorow[t] * v[kh + (size_t)j * D + t]));
                    dp[j] = r(prec, s * dropout_factor(&w, j));
                    di = r(prec, di + r(prec, p[j] * dp[j]));
                }
                for (int t = 0; t < D; ++t) dq[qh + (size_t)i * D + t] = 0.0;
                for (int j = 0; j < Sk; ++j) {
                    if (!seen_by[j]) continue;
                    /* Soft-capping's derivative takes dS back to the scaled score (ALiBi's bias has none); dBias is
                     * dS before it, summed over the bias's broadcast dimensions in (batch, head) order. */
                    const double ds_score = r(prec, p[j] * r(prec, dp[j] - di));
                    if (dbias) dbias[bias_index(&w, j)] = r(prec, dbias[bias_index(&w, j)] + ds_score);
                    const double ds = r(prec, r(prec, ds_score * grad[j]) * scale);
                    const double pz = r(prec, p[j] * dropout_factor(&w, j));
                    for (int t = 0; t < D; ++t) {
                        const size_t kx = kh + (size_t)j * D + t;
                        dq[qh + (size_t)i * D + t] = r(prec, dq[qh + (size_t)i * D + t] + r(prec, ds * k[kx]));
                        dk[kx] = r(prec, dk[kx] + r(prec, ds * qrow[t]));
                        dv[kx] = r(prec, dv[kx] + r(prec, pz * dorow[t]));
                    }
                }
            }
        }
    free(p);
    free(dp);
    free(grad);
    free(seen_by);
    return 0;
}

void flashcl_reference_bshd_to_bhsd(const float *in, float *out, int batch, int seqlen, int heads, int dim) {
    for (int b = 0; b < batch; ++b)
        for (int s = 0; s < seqlen; ++s)
            for (int h = 0; h < heads; ++h)
                for (int t = 0; t < dim; ++t)
                    out[(((size_t)b * heads + h) * seqlen + s) * dim + t] =
                        in[(((size_t)b * seqlen + s) * heads + h) * dim + t];
}

void flashcl_reference_bhsd_to_bshd(const float *in, float *out, int batch, int heads, int seqlen, int dim) {
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int s = 0; s < seqlen; ++s)
                for (int t = 0; t < dim; ++t)
                    out[(((size_t)b * seqlen + s) * heads + h) * dim + t] =
                        in[(((size_t)b * heads + h) * seqlen + s) * dim + t];
}

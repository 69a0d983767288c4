/* attention_reference.c: naive attention (scores, softmax, product with V) and its gradients on the CPU. */
#include "attention_reference.h"

#include <math.h>
#include <stdlib.h>

/* Rounds to float when emulating float arithmetic. */
static double r(flashcl_ref_precision p, double x) { return p == FLASHCL_REF_FLOAT ? (double)(float)x : x; }

static int visible(const flashcl_attention_desc *d, int i, int j) {
    return !d->causal || j <= i + d->seqlen_k - d->seqlen_q;
}

static double scale_of(const flashcl_attention_desc *d) {
    return d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim);
}

/* Probabilities of row i of one head into p[0..Sk); returns the row's
 * log-sum-exp (-inf if no key is visible, with p all zero). */
static double softmax_row(const flashcl_attention_desc *d, flashcl_ref_precision prec, const float *qrow,
                          const float *khead, int i, double *p) {
    const int D = d->head_dim;
    const double scale = r(prec, scale_of(d));
    double m = -INFINITY;
    for (int j = 0; j < d->seqlen_k; ++j) {
        if (!visible(d, i, j)) {
            p[j] = -INFINITY;
            continue;
        }
        double s = 0.0;
        for (int t = 0; t < D; ++t) s = r(prec, s + r(prec, (double)qrow[t] * khead[(size_t)j * D + t]));
        p[j] = r(prec, s * scale);
        if (p[j] > m) m = p[j];
    }
    if (m == -INFINITY) {
        for (int j = 0; j < d->seqlen_k; ++j) p[j] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int j = 0; j < d->seqlen_k; ++j) {
        p[j] = p[j] == -INFINITY ? 0.0 : r(prec, exp(p[j] - m));
        sum = r(prec, sum + p[j]);
    }
    for (int j = 0; j < d->seqlen_k; ++j) p[j] = r(prec, p[j] / sum);
    return r(prec, m + log(sum));
}

int flashcl_reference_forward(const flashcl_attention_desc *d, flashcl_ref_precision prec, const float *q,
                              const float *k, const float *v, double *o, double *lse) {
    const int D = d->head_dim, Sq = d->seqlen_q, Sk = d->seqlen_k, group = d->heads_q / d->heads_kv;
    double *p = malloc(sizeof(double) * (size_t)Sk);
    if (!p) return -1;
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h) {
            const size_t qh = ((size_t)b * d->heads_q + h) * Sq * D;
            const size_t kh = ((size_t)b * d->heads_kv + h / group) * Sk * D;
            for (int i = 0; i < Sq; ++i) {
                double l = softmax_row(d, prec, q + qh + (size_t)i * D, k + kh, i, p);
                if (lse) lse[((size_t)b * d->heads_q + h) * Sq + i] = l;
                for (int t = 0; t < D; ++t) {
                    double acc = 0.0;
                    for (int j = 0; j < Sk; ++j) acc = r(prec, acc + r(prec, p[j] * v[kh + (size_t)j * D + t]));
                    o[qh + (size_t)i * D + t] = acc;
                }
            }
        }
    free(p);
    return 0;
}

int flashcl_reference_backward(const flashcl_attention_desc *d, flashcl_ref_precision prec, const float *q,
                               const float *k, const float *v, const float *dout, double *dq, double *dk,
                               double *dv) {
    const int D = d->head_dim, Sq = d->seqlen_q, Sk = d->seqlen_k, group = d->heads_q / d->heads_kv;
    const double scale = r(prec, scale_of(d));
    double *p = malloc(sizeof(double) * (size_t)Sk);
    double *dp = malloc(sizeof(double) * (size_t)Sk);
    if (!p || !dp) {
        free(p);
        free(dp);
        return -1;
    }
    const size_t kv_count = (size_t)d->batch * d->heads_kv * Sk * D;
    for (size_t x = 0; x < kv_count; ++x) dk[x] = dv[x] = 0.0;
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h) {
            const size_t qh = ((size_t)b * d->heads_q + h) * Sq * D;
            const size_t kh = ((size_t)b * d->heads_kv + h / group) * Sk * D;
            for (int i = 0; i < Sq; ++i) {
                const float *qrow = q + qh + (size_t)i * D, *dorow = dout + qh + (size_t)i * D;
                softmax_row(d, prec, qrow, k + kh, i, p);
                /* dP = dO V^T; D_i = sum_j P_ij dP_ij (= rowsum(dO * O)). */
                double di = 0.0;
                for (int j = 0; j < Sk; ++j) {
                    double s = 0.0;
                    for (int t = 0; t < D; ++t) s = r(prec, s + r(prec, (double)dorow[t] * v[kh + (size_t)j * D + t]));
                    dp[j] = s;
                    di = r(prec, di + r(prec, p[j] * s));
                }
                for (int t = 0; t < D; ++t) dq[qh + (size_t)i * D + t] = 0.0;
                for (int j = 0; j < Sk; ++j) {
                    if (p[j] == 0.0) continue;
                    const double ds = r(prec, r(prec, p[j] * r(prec, dp[j] - di)) * scale);
                    for (int t = 0; t < D; ++t) {
                        const size_t kx = kh + (size_t)j * D + t;
                        dq[qh + (size_t)i * D + t] = r(prec, dq[qh + (size_t)i * D + t] + r(prec, ds * k[kx]));
                        dk[kx] = r(prec, dk[kx] + r(prec, ds * qrow[t]));
                        dv[kx] = r(prec, dv[kx] + r(prec, p[j] * dorow[t]));
                    }
                }
            }
        }
    free(p);
    free(dp);
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

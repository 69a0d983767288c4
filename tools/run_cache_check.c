/* run_cache_check.c: --check of a KV-cache run, one sequence at a time through the same reference and tolerance
 * rules as plain runs (run_check.c), plus the bit-exact comparison of the appended caches. */
#include "run_cache_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_float.h"
#include "run_check.h"
#include "run_inputs.h"

static float element(const void *raw, flashcl_dtype dtype, size_t i) {
    if (dtype == FLASHCL_DTYPE_F32) return ((const float *)raw)[i];
    const uint16_t bits = ((const uint16_t *)raw)[i];
    return dtype == FLASHCL_DTYPE_F16 ? half_to_float(bits) : bf16_to_float(bits);
}

/* The (Hkv, L, D) float keys or values sequence b attends to: its cache rows
 * 0 .. len-1 (from the input cache file), then its new rows (new_bhsd:
 * (B, Hkv, Sq, D), NULL without). NULL if out of memory. */
static float *sequence_rows(const run_cache_inputs *in, const npy_array *cache, const float *new_bhsd, int b) {
    const flashcl_attention_desc *d = &in->desc;
    const size_t hkv = (size_t)d->heads_kv, dim = (size_t)d->head_dim, len = (size_t)in->lens[b];
    const size_t rows = (size_t)run_cache_attended(in, b), sq = (size_t)d->seqlen_q;
    float *out = malloc(hkv * rows * dim * sizeof *out + 1);
    if (!out) return NULL;
    for (size_t h = 0; h < hkv; ++h) {
        float *head = out + h * rows * dim;
        for (size_t j = 0; j < len; ++j) {
            const size_t from = (run_cache_row(in, b, (int)j) * hkv + h) * dim;
            for (size_t t = 0; t < dim; ++t) head[j * dim + t] = element(cache->data, d->dtype, from + t);
        }
        if (new_bhsd)
            memcpy(head + len * dim, new_bhsd + (((size_t)b * hkv + h) * sq) * dim, sq * dim * sizeof *out);
    }
    return out;
}

/* O and LSE of sequence b: the reference over its rows (with its columns of the bias), or for a sequence with none
 * the definition (O 0, LSE -inf). 1 passed, 0 failed, -1 out of memory. */
static int check_sequence(const run_options *o, const run_cache_inputs *in, const run_score_mods *mods,
                          const run_bias *bias, const float *q, const float *out, const float *lse,
                          const float *k_new, const float *v_new, int b) {
    const flashcl_attention_desc *d = &in->desc;
    const size_t q_rows = (size_t)d->heads_q * (size_t)d->seqlen_q, dim = (size_t)d->head_dim;
    const int rows = run_cache_attended(in, b);
    printf("sequence %d (%d/%d rows q/k, %d of them new):\n", b, d->seqlen_q, rows, in->append ? d->seqlen_q : 0);
    const float *q_b = q + (size_t)b * q_rows * dim, *o_b = out + (size_t)b * q_rows * dim;
    const float *lse_b = lse + (size_t)b * q_rows;
    if (rows == 0) {
        size_t bad = 0;
        for (size_t i = 0; i < q_rows * dim; ++i) bad += o_b[i] != 0.0f;
        for (size_t i = 0; i < q_rows; ++i) bad += lse_b[i] != -INFINITY;
        printf("check empty sequence: %zu element(s) differ from the definition (O 0, LSE -inf) %s\n", bad,
               bad ? "FAILED" : "ok");
        return bad == 0;
    }
    float *k = sequence_rows(in, &in->k_cache, k_new, b), *v = sequence_rows(in, &in->v_cache, v_new, b);
    /* Key position j of the sequence is column j of the bias: its first `rows` columns, the rest never read. */
    float *columns = bias->reference ? run_bias_columns(bias, d, b, rows) : NULL;
    int result = -1;
    if (k && v && (columns || !bias->reference)) {
        flashcl_attention_desc one = *d;
        one.batch = 1;
        one.seqlen_k = rows;
        /* Every field starts empty (the bias's too): the helpers set theirs only. */
        flashcl_reference_extras ref_mods = {.mask = NULL};
        run_score_mods_reference(mods, b, d->heads_q, &ref_mods);
        if (columns) {
            ref_mods.bias = columns;
            ref_mods.bias_batch = 1;
            ref_mods.bias_heads = bias->heads;
        }
        const check_inputs inputs = {.q = q_b, .k = k, .v = v, .mods = &ref_mods};
        result = check_forward(&one, &inputs, o_b, lse_b, o->tolerance);
    }
    free(k);
    free(v);
    free(columns);
    return result;
}

static int check_attention(const run_options *o, const run_cache_inputs *in, const run_score_mods *mods,
                           const run_bias *bias, const run_cache_results *r) {
    const flashcl_attention_desc *d = &in->desc;
    const flashcl_dtype t = d->dtype;
    float *q = run_to_float_bhsd(in->q.data, t, in->layout, d, d->heads_q, d->seqlen_q);
    float *out = run_to_float_bhsd(r->o, t, in->layout, d, d->heads_q, d->seqlen_q);
    float *k_new = in->append ? run_to_float_bhsd(in->k_new.data, t, in->layout, d, d->heads_kv, d->seqlen_q) : NULL;
    float *v_new = in->append ? run_to_float_bhsd(in->v_new.data, t, in->layout, d, d->heads_kv, d->seqlen_q) : NULL;
    int result = q && out && (!in->append || (k_new && v_new)) ? 1 : -1;
    for (int b = 0; b < d->batch && result >= 0; ++b) {
        const int one = check_sequence(o, in, mods, bias, q, out, r->lse, k_new, v_new, b);
        result = one < 0 ? -1 : result && one;
    }
    free(q), free(out), free(k_new), free(v_new);
    return result;
}

/* One cache after the call against the input cache with the new rows
 * copied in at cache_seqlens[b].. (new rows in Q's layout). 1 if equal bit
 * for bit, 0 if not, -1 out of memory. */
static int check_cache(const char *name, const run_cache_inputs *in, const npy_array *input, const npy_array *new_rows,
                       const void *got) {
    const flashcl_attention_desc *d = &in->desc;
    const size_t e = flashcl_dtype_size(d->dtype), hkv = (size_t)d->heads_kv, dim = (size_t)d->head_dim;
    const size_t sq = (size_t)d->seqlen_q, count = in->cache_rows * hkv * dim;
    unsigned char *want = malloc(count * e);
    if (!want) return -1;
    memcpy(want, input->data, count * e);
    const unsigned char *src = new_rows->data;
    for (int b = 0; b < d->batch; ++b)
        for (size_t i = 0; i < sq; ++i)
            for (size_t h = 0; h < hkv; ++h) {
                const size_t from = in->layout == FLASHCL_LAYOUT_BSHD ? (((size_t)b * sq + i) * hkv + h) * dim
                                                                      : (((size_t)b * hkv + h) * sq + i) * dim;
                const size_t to = (run_cache_row(in, b, in->lens[b] + (int)i) * hkv + h) * dim;
                memcpy(want + to * e, src + from * e, dim * e);
            }
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < count; ++i)
        if (memcmp(want + i * e, (const unsigned char *)got + i * e, e) != 0 && differ++ == 0) first = i;
    printf("check %s cache: %zu of %zu elements differ from the input cache with the new rows in place (bit-exact)",
           name, differ, count);
    if (differ) {
        const size_t row = first / (hkv * dim), per = input->shape[1];
        printf(", the first at [%zu, %zu, %zu, %zu]", row / per, row % per, first / dim % hkv, first % dim);
    }
    printf(" %s\n", differ ? "FAILED" : "ok");
    free(want);
    return differ == 0;
}

/* Prints the outcome of one part of the check; 0 if it passed, -1 otherwise. */
static int outcome(int result, const char *what) {
    if (result < 0) {
        fprintf(stderr, "flashcl run: out of host memory for --check\n");
        return -1;
    }
    if (result == 0) {
        fprintf(stderr, "flashcl run: --check failed: the %s\n", what);
        return -1;
    }
    return 0;
}

int run_cache_check(const run_options *o, const run_cache_inputs *in, const run_score_mods *mods,
                    const run_bias *bias, const run_cache_results *r) {
    /* Each part runs and reports even when an earlier one failed. */
    int failed = outcome(check_attention(o, in, mods, bias, r), "forward error exceeds the tolerance") != 0;
    if (!failed) printf("check: forward passed\n");
    if (!in->append) return failed ? -1 : 0;
    const int k = check_cache("K", in, &in->k_cache, &in->k_new, r->k_cache);
    const int v = k < 0 ? -1 : check_cache("V", in, &in->v_cache, &in->v_new, r->v_cache);
    const int cache_failed = outcome(k < 0 || v < 0 ? -1 : k && v, "cache after the append is not the input "
                                                                    "cache with the new rows in place") != 0;
    if (!cache_failed) printf("check: cache passed\n");
    return failed || cache_failed ? -1 : 0;
}

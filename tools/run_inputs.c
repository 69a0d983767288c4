/* run_inputs.c: reads Q, K, V (and dO) for `flashcl run`, checks they describe one problem, converts for the reference. */
#include "run_inputs.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "half_float.h"

int run_file_error(const char *path, const char *format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, "flashcl run: %s: ", path);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    return -1;
}

const char *run_dtype_name(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F32 ? "float32" : dtype == FLASHCL_DTYPE_F16 ? "float16" : "bfloat16";
}

npy_dtype run_npy_dtype(flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_F32 ? NPY_DTYPE_F32 : dtype == FLASHCL_DTYPE_F16 ? NPY_DTYPE_F16 : NPY_DTYPE_U16;
}

int run_file_dtype(const run_options *o, const char *path, const npy_array *a, flashcl_dtype *out) {
    if (a->dtype == NPY_DTYPE_U8 || a->dtype == NPY_DTYPE_I32)
        return run_file_error(path, "holds %s; tensors must be float32, float16 or bfloat16", npy_dtype_name(a->dtype));
    if (a->dtype == NPY_DTYPE_U16) {
        if (!o->dtype_given || o->dtype != FLASHCL_DTYPE_BF16)
            return run_file_error(path, "holds uint16 ('<u2'); if that is bfloat16 data, pass --dtype bf16");
        *out = FLASHCL_DTYPE_BF16;
        return 0;
    }
    *out = a->dtype == NPY_DTYPE_F32 ? FLASHCL_DTYPE_F32 : FLASHCL_DTYPE_F16;
    if (o->dtype_given && o->dtype != *out)
        return run_file_error(path, "holds %s but --dtype %s was given", npy_dtype_name(a->dtype),
                          o->dtype == FLASHCL_DTYPE_F32 ? "f32" : o->dtype == FLASHCL_DTYPE_F16 ? "f16" : "bf16");
    return 0;
}

int run_tensor_dims(const char *path, const npy_array *a, flashcl_layout layout, const char *role,
                       const char *heads_name, const char *seq_name, run_dims4 *out) {
    char shape_text[256];
    npy_format_shape(a->rank, a->shape, shape_text, sizeof shape_text);
    const int bshd = layout == FLASHCL_LAYOUT_BSHD;
    if (a->rank != 4)
        return run_file_error(path, "%s must be a 4-D array (B,%s,%s,D for --layout %s), not shape %s", role,
                          bshd ? seq_name : heads_name, bshd ? heads_name : seq_name, bshd ? "bshd" : "bhsd",
                          shape_text);
    for (int i = 0; i < 4; ++i)
        if (a->shape[i] < 1 || a->shape[i] > INT_MAX)
            return run_file_error(path, "dimension %d of shape %s is outside 1..%d", i, shape_text, INT_MAX);
    out->batch = (int)a->shape[0];
    out->heads = (int)a->shape[bshd ? 2 : 1];
    out->seqlen = (int)a->shape[bshd ? 1 : 2];
    out->dim = (int)a->shape[3];
    return 0;
}

int run_load_npy(const char *path, npy_array *a) {
    char error[512];
    if (npy_read(path, a, error, sizeof error) != 0) return run_file_error(path, "%s", error);
    return 0;
}

static int same_shape(const npy_array *a, const npy_array *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; ++i)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int shape_mismatch(const char *path, const npy_array *a, const char *other_path, const npy_array *b,
                          const char *rule) {
    char mine[256], theirs[256];
    npy_format_shape(a->rank, a->shape, mine, sizeof mine);
    npy_format_shape(b->rank, b->shape, theirs, sizeof theirs);
    return run_file_error(path, "shape %s differs from %s's %s (%s)", mine, other_path, theirs, rule);
}

static int check_inputs(const run_options *o, run_inputs *in) {
    /* Initialised only to quiet gcc -O2; file_dtype sets them on success. */
    flashcl_dtype q_dtype = FLASHCL_DTYPE_F32, k_dtype = FLASHCL_DTYPE_F32, v_dtype = FLASHCL_DTYPE_F32;
    if (run_file_dtype(o, o->q_path, &in->q, &q_dtype) || run_file_dtype(o, o->k_path, &in->k, &k_dtype) ||
        run_file_dtype(o, o->v_path, &in->v, &v_dtype))
        return -1;
    if (k_dtype != q_dtype)
        return run_file_error(o->k_path, "holds %s but %s holds %s", run_dtype_name(k_dtype), o->q_path,
                              run_dtype_name(q_dtype));
    if (v_dtype != q_dtype)
        return run_file_error(o->v_path, "holds %s but %s holds %s", run_dtype_name(v_dtype), o->q_path,
                              run_dtype_name(q_dtype));

    run_dims4 q, k, v;
    if (run_tensor_dims(o->q_path, &in->q, o->layout, "Q", "Hq", "Sq", &q) ||
        run_tensor_dims(o->k_path, &in->k, o->layout, "K", "Hkv", "Sk", &k) ||
        run_tensor_dims(o->v_path, &in->v, o->layout, "V", "Hkv", "Sk", &v))
        return -1;
    if (!same_shape(&in->v, &in->k))
        return shape_mismatch(o->v_path, &in->v, o->k_path, &in->k, "K and V must have the same shape");
    if (k.batch != q.batch)
        return run_file_error(o->k_path, "batch %d differs from %s's batch %d", k.batch, o->q_path, q.batch);
    if (k.dim != q.dim)
        return run_file_error(o->k_path, "head dim %d differs from %s's head dim %d", k.dim, o->q_path, q.dim);
    if (q.heads % k.heads != 0)
        return run_file_error(o->q_path, "%d query heads are not a multiple of %s's %d key/value heads", q.heads,
                          o->k_path, k.heads);

    if (run_wants_backward(o)) {
        flashcl_dtype dout_dtype = FLASHCL_DTYPE_F32;
        if (run_file_dtype(o, o->dout_path, &in->dout, &dout_dtype)) return -1;
        if (dout_dtype != q_dtype)
            return run_file_error(o->dout_path, "holds %s but %s holds %s", run_dtype_name(dout_dtype), o->q_path,
                              run_dtype_name(q_dtype));
        if (!same_shape(&in->dout, &in->q))
            return shape_mismatch(o->dout_path, &in->dout, o->q_path, &in->q, "dO must be shaped like Q");
    }

    flashcl_attention_desc *d = &in->desc;
    flashcl_attention_desc_init(d, q.batch, q.heads, q.seqlen, k.seqlen, q.dim);
    d->heads_kv = k.heads;
    d->dtype = q_dtype;
    d->scale = (float)o->scale;
    d->causal = o->causal;
    d->sliding_window = o->window_left >= 0 || o->window_right >= 0;
    d->window_left = o->window_left;
    d->window_right = o->window_right;
    d->dropout_p = (float)o->dropout;
    d->dropout_seed = (uint64_t)o->seed;
    return 0;
}

/* The block mask file: uint8, (ceil(Sq/N), ceil(Sk/N)) or (Hq, ...); with
 * a packed batch Sq and Sk are the longest sequence lengths. */
static int check_block_mask(const run_options *o, run_inputs *in) {
    const npy_array *m = &in->block_mask;
    const flashcl_attention_desc *d = in->varlen ? &in->call_desc : &in->desc;
    const size_t n = (size_t)o->block_size;
    const size_t rows = ((size_t)d->seqlen_q + n - 1) / n, cols = ((size_t)d->seqlen_k + n - 1) / n;
    char shape_text[256];
    npy_format_shape(m->rank, m->shape, shape_text, sizeof shape_text);
    if (m->dtype != NPY_DTYPE_U8)
        return run_file_error(o->block_mask_path, "a block mask must hold uint8 ('|u1'), not %s", npy_dtype_name(m->dtype));
    const int shared = m->rank == 2 && m->shape[0] == rows && m->shape[1] == cols;
    const int per_head = m->rank == 3 && m->shape[0] == (size_t)d->heads_q && m->shape[1] == rows && m->shape[2] == cols;
    if (!shared && !per_head)
        return run_file_error(o->block_mask_path, "shape %s is neither (%zu, %zu) nor (%d, %zu, %zu) for block size %zu%s",
                          shape_text, rows, cols, d->heads_q, rows, cols, n,
                          in->varlen ? " over the longest sequence lengths" : "");
    in->block_mask_per_head = per_head;
    return 0;
}

/* A packed (total, H, D) file seen as the 4-D (1, total, H, D) of --layout bshd. */
static int unpack_rank(const char *path, npy_array *a, const char *role) {
    if (a->rank != 3) {
        char shape_text[256];
        npy_format_shape(a->rank, a->shape, shape_text, sizeof shape_text);
        return run_file_error(path, "with --cu-seqlens-q/-k, %s must be a packed 3-D array (total, heads, D), not shape %s",
                          role, shape_text);
    }
    for (int i = 3; i > 0; --i) a->shape[i] = a->shape[i - 1];
    a->shape[0] = 1;
    a->rank = 4;
    return 0;
}

/* One cu_seqlens file: int32 (B + 1), 0 first, non-decreasing, ending at
 * total; *max_len receives the longest sequence. */
static int check_cu_seqlens(const char *path, const npy_array *a, size_t expected_count, int total, int *max_len) {
    if (a->dtype != NPY_DTYPE_I32 || a->rank != 1 || a->count < 2)
        return run_file_error(path, "cumulative sequence lengths must be a 1-D int32 ('<i4') array of B+1 >= 2 entries");
    if (expected_count && a->count != expected_count)
        return run_file_error(path, "has %zu entries, the other cu_seqlens file %zu", a->count, expected_count);
    const int32_t *cu = a->data;
    if (cu[0] != 0) return run_file_error(path, "the first offset is %d, not 0", (int)cu[0]);
    *max_len = 0;
    for (size_t b = 0; b + 1 < a->count; ++b) {
        if (cu[b + 1] < cu[b]) return run_file_error(path, "offsets decrease at entry %zu", b + 1);
        if (cu[b + 1] - cu[b] > *max_len) *max_len = cu[b + 1] - cu[b];
    }
    if (cu[a->count - 1] != total)
        return run_file_error(path, "ends at %d but the packed tensors have %d rows", (int)cu[a->count - 1], total);
    return 0;
}

static int load_varlen(const run_options *o, run_inputs *in) {
    in->varlen = 1;
    int max_q = 0, max_k = 0;
    if (run_load_npy(o->cu_seqlens_q_path, &in->cu_q) || run_load_npy(o->cu_seqlens_k_path, &in->cu_k) ||
        check_cu_seqlens(o->cu_seqlens_q_path, &in->cu_q, 0, in->desc.seqlen_q, &max_q) ||
        check_cu_seqlens(o->cu_seqlens_k_path, &in->cu_k, in->cu_q.count, in->desc.seqlen_k, &max_k))
        return -1;
    if (max_q < 1 || max_k < 1)
        return run_file_error(o->cu_seqlens_q_path, "every sequence is empty");
    in->call_desc = in->desc;
    in->call_desc.batch = (int)(in->cu_q.count - 1);
    in->call_desc.seqlen_q = max_q;
    in->call_desc.seqlen_k = max_k;
    return 0;
}

int run_load_inputs(const run_options *o, run_inputs *in) {
    memset(in, 0, sizeof *in);
    const int packed = run_is_varlen(o);
    int failed = run_load_npy(o->q_path, &in->q) || run_load_npy(o->k_path, &in->k) || run_load_npy(o->v_path, &in->v) ||
                 (run_wants_backward(o) && run_load_npy(o->dout_path, &in->dout)) ||
                 (packed && (unpack_rank(o->q_path, &in->q, "Q") || unpack_rank(o->k_path, &in->k, "K") ||
                             unpack_rank(o->v_path, &in->v, "V") ||
                             (run_wants_backward(o) && unpack_rank(o->dout_path, &in->dout, "dO")))) ||
                 check_inputs(o, in) || (packed && load_varlen(o, in)) ||
                 (o->block_mask_path && (run_load_npy(o->block_mask_path, &in->block_mask) || check_block_mask(o, in)));
    if (failed) run_free_inputs(in);
    return failed ? -1 : 0;
}

void run_free_inputs(run_inputs *in) {
    npy_free(&in->q);
    npy_free(&in->k);
    npy_free(&in->v);
    npy_free(&in->dout);
    npy_free(&in->block_mask);
    npy_free(&in->cu_q);
    npy_free(&in->cu_k);
}

size_t run_tensor_count(const flashcl_attention_desc *d, int heads, int seqlen) {
    return (size_t)d->batch * (size_t)heads * (size_t)seqlen * (size_t)d->head_dim;
}

void run_tensor_shape(const flashcl_attention_desc *d, flashcl_layout layout, int heads, int seqlen,
                      size_t shape[4]) {
    const int bshd = layout == FLASHCL_LAYOUT_BSHD;
    shape[0] = (size_t)d->batch;
    shape[1] = (size_t)(bshd ? seqlen : heads);
    shape[2] = (size_t)(bshd ? heads : seqlen);
    shape[3] = (size_t)d->head_dim;
}

float *run_to_float_bhsd(const void *raw, flashcl_dtype dtype, flashcl_layout layout, const flashcl_attention_desc *d,
                         int heads, int seqlen) {
    const size_t count = run_tensor_count(d, heads, seqlen);
    float *values = malloc((count ? count : 1) * sizeof(float));
    if (!values) return NULL;
    const uint16_t *bits = raw;
    for (size_t i = 0; i < count; ++i)
        values[i] = dtype == FLASHCL_DTYPE_F32   ? ((const float *)raw)[i]
                    : dtype == FLASHCL_DTYPE_F16 ? half_to_float(bits[i])
                                                 : bf16_to_float(bits[i]);
    if (layout == FLASHCL_LAYOUT_BHSD) return values;
    float *reordered = malloc((count ? count : 1) * sizeof(float));
    if (reordered) flashcl_reference_bshd_to_bhsd(values, reordered, d->batch, seqlen, heads, d->head_dim);
    free(values);
    return reordered;
}

/* test_block_sparse.c: block-sparse attention (alone and with causal/window), forward and backward, against the reference with the equivalent dense mask. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"
#include "test_support.h"

typedef struct sparse_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, left, right;
    int block_size, per_head;
} sparse_case;

/* Block sizes below, equal to and above the kernels' tiles, not dividing
 * the sequence lengths. */
static const sparse_case cases[] = {
    {"113x203 d40 bs 7 shared", 1, 2, 1, 113, 203, 40, 0, -1, -1, 7, 0},
    {"128x217 d64 bs 64 per head gqa", 2, 4, 2, 128, 217, 64, 0, -1, -1, 64, 1},
    {"255x256 d59 bs 100 causal", 1, 2, 2, 255, 256, 59, 1, -1, -1, 100, 1},
    {"200x150 d32 bs 16 window 40,10", 1, 1, 1, 200, 150, 32, 0, 40, 10, 16, 0},
    {"1x239 d16 bs 1", 1, 1, 1, 1, 239, 16, 0, -1, -1, 1, 0},
};

/* A random block mask, about half on, with some all-off rows. */
static uint8_t *random_block_mask(const fh_case *c, uint64_t seed, size_t *bytes) {
    const size_t rows = ((size_t)c->desc.seqlen_q + c->block_size - 1) / c->block_size;
    const size_t cols = ((size_t)c->desc.seqlen_k + c->block_size - 1) / c->block_size;
    *bytes = (c->per_head ? (size_t)c->desc.heads_q : 1) * rows * cols;
    uint8_t *m = malloc(*bytes);
    ck_assert(m);
    ts_rng rng = {seed};
    for (size_t x = 0; x < *bytes; ++x) m[x] = ts_uniform(&rng, 0.0, 1.0) < 0.5;
    if (rows > 1)
        for (size_t j = 0; j < cols; ++j) m[cols + j] = 0; /* query block 1 of head 0 sees nothing */
    return m;
}

static fh_case case_of(const sparse_case *w) {
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = w->name;
    flashcl_attention_desc_init(&c.desc, w->batch, w->heads_q, w->seqlen_q, w->seqlen_k, w->head_dim);
    c.desc.heads_kv = w->heads_kv;
    c.desc.causal = w->causal;
    c.desc.sliding_window = 1;
    c.desc.window_left = w->left;
    c.desc.window_right = w->right;
    c.block_size = w->block_size;
    c.per_head = w->per_head;
    return c;
}

START_TEST(test_block_sparse_matches_dense_mask) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    fh_case c = case_of(&cases[_i]);
    uint8_t *block_mask = random_block_mask(&c, 21 + (uint64_t)_i, &c.mask_bytes);
    c.block_mask = block_mask;
    flashcl_context *ctx = ts_context();
    fh_inputs in;
    fh_inputs_make(&c, 31 + (uint64_t)_i, &in);
    fh_result r;
    fh_run(ctx, &c, &in, 1, &r);
    uint8_t *mask = fh_dense_mask(&c);
    fh_check(&c, &in, &r, 1, mask, NULL);
    free(mask);
    free(block_mask);
    fh_result_free(&r);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_block_sparse_forced_plans) {
    const sparse_case w = {"150x170 d32 bs 24 forced", 1, 2, 1, 150, 170, 32, 0, -1, -1, 24, 1};
    fh_case c = case_of(&w);
    uint8_t *block_mask = random_block_mask(&c, 3, &c.mask_bytes);
    c.block_mask = block_mask;
    fh_check_forced_plans(&c, 8);
    free(block_mask);
}
END_TEST

/* Q, K, V rows whose blocks are all off (block size 128, a multiple of every
 * tile) hold NaN: were their tiles loaded and computed, NaN would spread.
 * The result must be bitwise that of zeros there. */
START_TEST(test_block_sparse_skips_off_tiles) {
    const sparse_case w = {"384x384 d32 bs 128 skip", 1, 1, 1, 384, 384, 32, 0, -1, -1, 128, 0};
    fh_case c = case_of(&w);
    /* Query block 1 and key block 2 are entirely off. */
    static const uint8_t block_mask[9] = {1, 1, 0, 0, 0, 0, 1, 1, 0};
    c.block_mask = block_mask;
    c.mask_bytes = sizeof block_mask;
    fh_inputs in;
    fh_inputs_make(&c, 4, &in);
    flashcl_context *ctx = ts_context();
    fh_result zeros, poisoned;
    for (int pass = 0; pass < 2; ++pass) {
        const float fill = pass == 0 ? 0.0f : NAN;
        for (size_t x = 128 * 32; x < 256 * 32; ++x) in.q[x] = in.dout[x] = fill;
        for (size_t x = 256 * 32; x < 384 * 32; ++x) in.k[x] = in.v[x] = fill;
        fh_run(ctx, &c, &in, 1, pass == 0 ? &zeros : &poisoned);
    }
    ck_assert(memcmp(zeros.lse, poisoned.lse, in.lse_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dk, poisoned.dk, in.kv_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dv, poisoned.dv, in.kv_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.dq, poisoned.dq, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(zeros.o, poisoned.o, in.q_count * sizeof(float)) == 0);
    fh_result_free(&zeros);
    fh_result_free(&poisoned);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_block_mask_bad_inputs_rejected) {
    flashcl_context *ctx = ts_context();
    cl_context context = flashcl_context_cl_context(ctx);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 2, 40, 40, 16);
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, 4 * 40 * 40 * 16 * sizeof(float), NULL, &err);
    cl_mem small = clCreateBuffer(context, CL_MEM_READ_WRITE, 15, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor q = flashcl_tensor_contiguous(m, FLASHCL_LAYOUT_BHSD, 2, 40, 16);
    flashcl_tensor o = q;
    o.offset = 2 * 40 * 16;
    flashcl_attention_extras x;
    flashcl_attention_extras_init(&x);
    x.block_mask = small;
    x.block_size = 0;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &x, &q, &q, &q, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    x.block_size = 10; /* 4 x 4 blocks = 16 bytes > 15 */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &x, &q, &q, &q, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "block_mask"));
    x.block_size = 20; /* 2 x 2 per head = 8 bytes: fits, but o overlaps a mask in the same buffer */
    x.block_mask = m;
    x.block_mask_offset = o.offset * sizeof(float);
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &x, &q, &q, &q, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_ALIASING);
    x.block_mask = NULL;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &x, &q, &q, &q, &o, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    x.block_mask = small;
    x.block_mask_offset = 0;
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &x, &q, &q, &q, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    clReleaseMemObject(m);
    clReleaseMemObject(small);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *block_sparse_suite(void) {
    Suite *s = suite_create("block_sparse");
    TCase *tc = tcase_create("block_sparse");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_block_sparse_matches_dense_mask, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_block_sparse_forced_plans);
    tcase_add_test(tc, test_block_sparse_skips_off_tiles);
    tcase_add_test(tc, test_block_mask_bad_inputs_rejected);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("block_sparse");
    SRunner *runner = srunner_create(block_sparse_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

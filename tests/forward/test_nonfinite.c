/* test_nonfinite.c: the NaN/Inf rule on every path (portable, tensor-core emulated, standard) against the reference.
 *
 * The rule (flashcl.h): a row is empty (O = 0, LSE = -inf, zero gradients)
 * exactly when none of its keys is visible after the masks; otherwise IEEE
 * arithmetic of the max-subtracted softmax decides, so a NaN or Inf in Q, K,
 * V or dO, or a score that overflows float, reaches the outputs it touches
 * as NaN (or Inf) and never as a silent 0. The CPU reference follows the
 * same rule, and each case checks that it is not vacuous: the reference has
 * NaN where the case puts them. Cases whose masks would let a NaN also reach
 * entries through a masked pair inside a partly masked tile (0 x NaN, the
 * documented "may" of the rule) are not compared element by element. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---- the paths: which implementation and kernel family runs ---------- */

typedef enum path_kind { PATH_PORTABLE, PATH_EMULATED, PATH_STANDARD } path_kind;

typedef struct path {
    const char *name;
    path_kind kind;
    flashcl_dtype dtype;
} path;

static const path paths[] = {
    {"portable f32", PATH_PORTABLE, FLASHCL_DTYPE_F32},
    {"portable f16", PATH_PORTABLE, FLASHCL_DTYPE_F16},
    {"tensor-core emulated f16", PATH_EMULATED, FLASHCL_DTYPE_F16},
    {"tensor-core emulated f32 (3xTF32)", PATH_EMULATED, FLASHCL_DTYPE_F32},
#if FLASHCL_HAS_STANDARD /* without CLBlast: test_forward_errors checks its refusal instead */
    {"standard f32", PATH_STANDARD, FLASHCL_DTYPE_F32},
#endif
};
#define PATH_COUNT ((int)(sizeof paths / sizeof paths[0]))

static flashcl_context *path_context(const path *p) {
    flashcl_context *ctx = ts_context();
    const flashcl_tensor_cores mode = p->kind == PATH_EMULATED ? FLASHCL_TENSOR_CORES_EMULATE : FLASHCL_TENSOR_CORES_OFF;
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, mode), FLASHCL_SUCCESS);
    if (p->kind == PATH_EMULATED && p->dtype == FLASHCL_DTYPE_F32)
        ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_3XTF32), FLASHCL_SUCCESS);
    if (p->kind == PATH_STANDARD) ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    return ctx;
}

/* The emulated path must really have run the tensor-core kernel. */
static void assert_path_ran(flashcl_context *ctx, const path *p, const char *pass) {
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    const flashcl_kernel_kind want = p->kind == PATH_EMULATED    ? FLASHCL_KERNEL_TENSOR_CORE_EMULATED
                                     : p->kind == PATH_STANDARD ? FLASHCL_KERNEL_STANDARD
                                                                : FLASHCL_KERNEL_PORTABLE;
    ck_assert_msg(stats.kernel == want, "%s %s: ran kernel kind %d, expected %d", p->name, pass,
                  (int)stats.kernel, (int)want);
    ck_assert_int_eq((int)stats.impl, p->kind == PATH_STANDARD ? FLASHCL_IMPL_STANDARD : FLASHCL_IMPL_FLASH);
}

/* ---- the cases ------------------------------------------------------- */

enum { HEADS = 2, DIM = 64 };

typedef struct problem {
    flashcl_attention_desc desc;
    float *q, *k, *v, *dout;
    size_t q_count, kv_count;
} problem;

/* Element (h, s, d) of a (1, HEADS, seqlen, DIM) tensor. */
#define AT(x, seqlen, h, s, d) ((x)[((size_t)(h) * (seqlen) + (s)) * DIM + (d)])

typedef struct nonfinite_case {
    const char *name;
    int seqlen_q, seqlen_k, causal;
    float scale;  /* 0: the default */
    int backward; /* also compare the gradients element by element */
    int inf_input; /* an input element is infinite (see spreads_inf) */
    void (*poke)(problem *p);
} nonfinite_case;

static void poke_q_nan(problem *p) { AT(p->q, p->desc.seqlen_q, 0, 5, 3) = NAN; }
static void poke_q_inf(problem *p) { AT(p->q, p->desc.seqlen_q, 1, 7, 0) = INFINITY; }
static void poke_k_nan(problem *p) { AT(p->k, p->desc.seqlen_k, 0, 30, 2) = NAN; }
static void poke_k_inf(problem *p) { AT(p->k, p->desc.seqlen_k, 1, 4, 60) = -INFINITY; }
static void poke_v_nan(problem *p) { AT(p->v, p->desc.seqlen_k, 1, 11, 9) = NAN; }
static void poke_v_inf(problem *p) { AT(p->v, p->desc.seqlen_k, 0, 20, 33) = INFINITY; }
static void poke_dout_nan(problem *p) { AT(p->dout, p->desc.seqlen_q, 0, 3, 1) = NAN; }

/* With scale 1e36 and every K element in [0.5, 1], query row 0 of head 0
 * (all -1000) scores below -FLT_MAX on every key (-inf: a row that sees
 * keys but whose scores all overflow, which is NaN and not empty) and row 1
 * (all +1000) above FLT_MAX; the other rows' scores stay finite (|q.k| of
 * a few tens, times 1e36) and give a one-hot softmax. */
static void poke_overflow(problem *p) {
    const int sq = p->desc.seqlen_q, sk = p->desc.seqlen_k;
    for (int h = 0; h < HEADS; ++h)
        for (int s = 0; s < sk; ++s)
            for (int d = 0; d < DIM; ++d) AT(p->k, sk, h, s, d) = 0.5f + 0.5f * fabsf(AT(p->k, sk, h, s, d));
    for (int d = 0; d < DIM; ++d) {
        AT(p->q, sq, 0, 0, d) = -1000.0f;
        AT(p->q, sq, 0, 1, d) = 1000.0f;
    }
}

/* Causal with seqlen_q 48 > seqlen_k 24: rows 0-23 see no key (empty). A
 * NaN in an empty row leaves it empty; one in row 30 makes row 30 NaN. */
static void poke_empty_beside_nan(problem *p) {
    AT(p->q, p->desc.seqlen_q, 0, 2, 7) = NAN;
    AT(p->q, p->desc.seqlen_q, 0, 30, 0) = NAN;
}

static const nonfinite_case cases[] = {
    {"NaN in Q", 40, 48, 0, 0.0f, 1, 0, poke_q_nan},
    {"+Inf in Q", 40, 48, 0, 0.0f, 1, 1, poke_q_inf},
    {"NaN in K, causal", 48, 48, 1, 0.0f, 0, 0, poke_k_nan},
    {"-Inf in K", 40, 48, 0, 0.0f, 1, 1, poke_k_inf},
    {"NaN in V", 40, 48, 0, 0.0f, 1, 0, poke_v_nan},
    {"+Inf in V", 40, 48, 0, 0.0f, 0, 1, poke_v_inf},
    {"NaN in dO", 40, 48, 0, 0.0f, 1, 0, poke_dout_nan},
    {"scores overflowing float", 40, 48, 0, 1e36f, 0, 0, poke_overflow},
    {"empty rows beside NaN rows, causal", 48, 24, 1, 0.0f, 0, 0, poke_empty_beside_nan},
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))

static float *random_values(ts_rng *rng, size_t n, flashcl_dtype dtype) {
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    ts_fill_uniform(rng, x, n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) x[i] = ts_round_to_dtype(x[i], dtype);
    return x;
}

static void problem_make(problem *p, const nonfinite_case *c, flashcl_dtype dtype) {
    flashcl_attention_desc_init(&p->desc, 1, HEADS, c->seqlen_q, c->seqlen_k, DIM);
    p->desc.causal = c->causal;
    p->desc.scale = c->scale;
    p->desc.dtype = dtype;
    p->q_count = (size_t)HEADS * c->seqlen_q * DIM;
    p->kv_count = (size_t)HEADS * c->seqlen_k * DIM;
    ts_rng rng = {2026};
    p->q = random_values(&rng, p->q_count, dtype);
    p->k = random_values(&rng, p->kv_count, dtype);
    p->v = random_values(&rng, p->kv_count, dtype);
    p->dout = random_values(&rng, p->q_count, dtype);
    c->poke(p);
    /* The pokes are exact in every storage type, except the overflow case's
     * K in [0.5, 1], which is rounded here like the rest. */
    for (size_t i = 0; i < p->kv_count; ++i) p->k[i] = ts_round_to_dtype(p->k[i], dtype);
}

static void problem_free(problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->dout);
}

/* ---- the comparison -------------------------------------------------- */

/* 3xTF32 splits an infinite operand x into big = x and small = x - big =
 * NaN, so an infinite input makes every product it enters NaN, even where
 * IEEE arithmetic would give a zero weight (documented in flashcl.h). */
static int spreads_inf(const path *p, const nonfinite_case *c) {
    return c->inf_input && p->kind == PATH_EMULATED && p->dtype == FLASHCL_DTYPE_F32;
}

/* Element by element: NaN in the reference must be NaN; +-inf must be the
 * same infinity or NaN (max-subtracted arithmetic may give inf - inf);
 * finite must be finite and within tol of the largest finite reference
 * magnitude (accuracy itself is the other suites' business), or NaN when
 * nan_allowed. Returns the number of non-finite reference entries. */
static size_t expect_classes(const char *label, const char *what, const float *got, const double *ref, size_t n,
                             double tol, int nan_allowed) {
    double max_ref = 0.0;
    size_t nan_count = 0;
    for (size_t i = 0; i < n; ++i)
        if (isfinite(ref[i]) && fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    for (size_t i = 0; i < n; ++i) {
        const double r = ref[i], g = (double)got[i];
        if (isnan(r)) {
            ++nan_count;
            ck_assert_msg(isnan(g), "%s: %s[%zu] is %g where the reference is NaN", label, what, i, g);
        } else if (isinf(r)) {
            ++nan_count;
            ck_assert_msg(isnan(g) || g == r, "%s: %s[%zu] is %g where the reference is %g", label, what, i, g, r);
        } else if (nan_allowed && isnan(g)) {
            continue;
        } else {
            ck_assert_msg(isfinite(g) && fabs(g - r) <= tol * max_ref + 1e-6,
                          "%s: %s[%zu] is %g where the reference is %.9g (max |ref| %g)", label, what, i, g, r,
                          max_ref);
        }
    }
    return nan_count;
}

/* The tensor-core forward takes exponents against a rounded row maximum and
 * writes a row whose scaled scores reach 2^30 / log2(e) (~7.4e8) as NaN
 * (flashcl.h): the reference says what that path must give there. */
static void tensor_core_range(double *o_ref, double *lse_ref, size_t rows) {
    for (size_t row = 0; row < rows; ++row) {
        if (!isfinite(lse_ref[row]) || fabs(lse_ref[row]) * 1.4426950408889634 < 0x1.0p30) continue;
        lse_ref[row] = NAN;
        for (size_t t = 0; t < DIM; ++t) o_ref[row * DIM + t] = NAN;
    }
}

/* Rows with LSE -inf in the reference (empty) must be exactly that, with O 0. */
static void expect_empty_rows(const char *label, const float *o, const float *lse, const double *lse_ref,
                              size_t rows) {
    for (size_t row = 0; row < rows; ++row) {
        if (lse_ref[row] != -INFINITY) continue;
        ck_assert_msg(lse[row] == -INFINITY, "%s: empty row %zu has LSE %g", label, row, (double)lse[row]);
        for (size_t t = 0; t < DIM; ++t)
            ck_assert_msg(o[row * DIM + t] == 0.0f, "%s: empty row %zu has O[%zu] = %g", label, row, t,
                          (double)o[row * DIM + t]);
    }
}

static double output_tol(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 1e-4 : 5e-3; }
static double gradient_tol(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 5e-4 : 3e-2; }

/* ---- the test -------------------------------------------------------- */

START_TEST(test_nonfinite) {
    const nonfinite_case *c = &cases[_i % CASE_COUNT];
    const path *pa = &paths[_i / CASE_COUNT];
    char label[160];
    snprintf(label, sizeof label, "%s, %s", c->name, pa->name);
    problem p;
    problem_make(&p, c, pa->dtype);
    const size_t Sq = (size_t)p.desc.seqlen_q, Sk = (size_t)p.desc.seqlen_k, rows = (size_t)HEADS * Sq;

    flashcl_context *ctx = path_context(pa);
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement bhsd = {FLASHCL_LAYOUT_BHSD, 0, 0};
    ts_tensor q, k, v, o, lse;
    ts_tensor_create(&q, context, &bhsd, 1, HEADS, Sq, DIM, pa->dtype, p.q);
    ts_tensor_create(&k, context, &bhsd, 1, HEADS, Sk, DIM, pa->dtype, p.k);
    ts_tensor_create(&v, context, &bhsd, 1, HEADS, Sk, DIM, pa->dtype, p.v);
    ts_tensor_create(&o, context, &bhsd, 1, HEADS, Sq, DIM, pa->dtype, NULL);
    ts_tensor_create(&lse, context, &bhsd, 1, HEADS, Sq, 1, FLASHCL_DTYPE_F32, NULL);
    flashcl_status status = flashcl_forward(ctx, &p.desc, &q.view, &k.view, &v.view, &o.view, &lse.view, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: forward: %s", label, flashcl_last_error(ctx));
    assert_path_ran(ctx, pa, "forward");
    ts_tensor_read(queue, &o);
    ts_tensor_read(queue, &lse);
    ts_assert_written_exactly(&o, "O");
    ts_assert_written_exactly(&lse, "LSE");
    float *o_got = malloc(p.q_count * sizeof *o_got), *lse_got = malloc(rows * sizeof *lse_got);
    double *o_ref = malloc(p.q_count * sizeof *o_ref), *lse_ref = malloc(rows * sizeof *lse_ref);
    ck_assert(o_got && lse_got && o_ref && lse_ref);
    ts_tensor_gather(&o, o_got);
    ts_tensor_gather(&lse, lse_got);
    ck_assert_int_eq(flashcl_reference_forward(&p.desc, FLASHCL_REF_DOUBLE, p.q, p.k, p.v, o_ref, lse_ref), 0);
    if (pa->kind == PATH_EMULATED) tensor_core_range(o_ref, lse_ref, rows);
    const int nan_allowed = spreads_inf(pa, c);
    const size_t o_nan = expect_classes(label, "O", o_got, o_ref, p.q_count, output_tol(pa->dtype), nan_allowed);
    expect_classes(label, "LSE", lse_got, lse_ref, rows, 1e-5, nan_allowed);
    expect_empty_rows(label, o_got, lse_got, lse_ref, rows);
    if (c->poke != poke_dout_nan)
        ck_assert_msg(o_nan > 0, "%s: the reference has no NaN or Inf in O: the case tests nothing", label);

    const int backward = c->backward;
    if (backward) {
        ts_tensor dout, dq, dk, dv;
        ts_tensor_create(&dout, context, &bhsd, 1, HEADS, Sq, DIM, pa->dtype, p.dout);
        ts_tensor_create(&dq, context, &bhsd, 1, HEADS, Sq, DIM, pa->dtype, NULL);
        ts_tensor_create(&dk, context, &bhsd, 1, HEADS, Sk, DIM, pa->dtype, NULL);
        ts_tensor_create(&dv, context, &bhsd, 1, HEADS, Sk, DIM, pa->dtype, NULL);
        status = flashcl_backward(ctx, &p.desc, &q.view, &k.view, &v.view, &o.view, &lse.view, &dout.view, &dq.view,
                                  &dk.view, &dv.view, 0, NULL, NULL);
        ck_assert_msg(status == FLASHCL_SUCCESS, "%s: backward: %s", label, flashcl_last_error(ctx));
        assert_path_ran(ctx, pa, "backward");
        ts_tensor *grads[3] = {&dq, &dk, &dv};
        const char *names[3] = {"dQ", "dK", "dV"};
        const size_t counts[3] = {p.q_count, p.kv_count, p.kv_count};
        double *ref[3];
        float *got[3];
        for (int g = 0; g < 3; ++g) {
            ref[g] = malloc(counts[g] * sizeof *ref[g]);
            got[g] = malloc(counts[g] * sizeof *got[g]);
            ck_assert(ref[g] && got[g]);
            ts_tensor_read(queue, grads[g]);
            ts_assert_written_exactly(grads[g], names[g]);
            ts_tensor_gather(grads[g], got[g]);
        }
        ck_assert_int_eq(
            flashcl_reference_backward(&p.desc, FLASHCL_REF_DOUBLE, p.q, p.k, p.v, p.dout, ref[0], ref[1], ref[2]), 0);
        size_t grad_nan = 0;
        for (int g = 0; g < 3; ++g) {
            grad_nan +=
                expect_classes(label, names[g], got[g], ref[g], counts[g], gradient_tol(pa->dtype), nan_allowed);
            free(ref[g]);
            free(got[g]);
        }
        ck_assert_msg(grad_nan > 0, "%s: the reference has no NaN or Inf gradient: the case tests nothing", label);
        ts_tensor_free(&dout);
        ts_tensor_free(&dq);
        ts_tensor_free(&dk);
        ts_tensor_free(&dv);
    }

    free(o_got);
    free(lse_got);
    free(o_ref);
    free(lse_ref);
    ts_tensor_free(&q);
    ts_tensor_free(&k);
    ts_tensor_free(&v);
    ts_tensor_free(&o);
    ts_tensor_free(&lse);
    flashcl_context_free(ctx);
    problem_free(&p);
}
END_TEST

static Suite *nonfinite_suite(void) {
    Suite *s = suite_create("nonfinite");
    TCase *tc = tcase_create("rule");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_nonfinite, 0, CASE_COUNT * PATH_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(nonfinite_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

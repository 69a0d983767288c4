/* test_varlen_host.c: varlen with host copies of the offsets: the same results, no blocking, the same checks. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feature_harness.h"

/* Empty sequences on either side, GQA/MQA, Sq != Sk, a desc maximum above
 * the real one, window + dropout: every way the offsets reach the kernels. */
static const fh_varlen_case cases[] = {
    {"1,37,64,0,100 d40 causal gqa", 5, 4, 2, 40, 1, {1, 37, 64, 0, 100}, {1, 37, 64, 0, 100}, 0, -1, -1, 0.0f},
    {"q!=k causal mqa d64 empty k", 4, 2, 1, 64, 1, {5, 70, 0, 33}, {50, 20, 9, 0}, 7, -1, -1, 0.0f},
    {"window 16,4 dropout 0.2 d16", 3, 2, 2, 16, 0, {60, 3, 129}, {80, 3, 100}, 0, 16, 4, 0.2f},
};

enum { Q, K, V, DO, O, L, DQ, DK, DV, CQ, CK, NBUF };
enum { FIRST_OUTPUT = O, LAST_OUTPUT = DV };

/* One packed problem on the device: inputs random, outputs poisoned (TS_POISON_F32). */
typedef struct problem {
    flashcl_context *ctx;
    flashcl_attention_desc desc;
    int n, total_q, total_k;
    int32_t cu_q[FH_MAX_SEQS + 1], cu_k[FH_MAX_SEQS + 1];
    size_t count[NBUF]; /* floats (int32 for CQ, CK) */
    cl_mem m[NBUF];
    flashcl_tensor t[NBUF]; /* packed views: Q, K, V, DO, O, LSE, DQ, DK, DV */
} problem;

static void problem_make(const fh_varlen_case *c, problem *p) {
    memset(p, 0, sizeof *p);
    p->ctx = ts_context();
    p->n = c->batch;
    const size_t H = (size_t)c->heads_q, Hk = (size_t)c->heads_kv, D = (size_t)c->head_dim;
    p->total_q = fh_cu_offsets(c->len_q, p->n, p->cu_q);
    p->total_k = fh_cu_offsets(c->len_k, p->n, p->cu_k);
    p->desc = fh_varlen_desc(c, p->n, fh_max_len(c->len_q, p->n) + c->extra_max,
                             fh_max_len(c->len_k, p->n) + c->extra_max, 99);
    const size_t nq = (size_t)p->total_q * H * D, nk = (size_t)p->total_k * Hk * D;
    const size_t counts[NBUF] = {nq, nk, nk, nq, nq, (size_t)p->total_q * H, nq, nk, nk, 0, 0};
    memcpy(p->count, counts, sizeof counts);
    p->count[CQ] = p->count[CK] = (size_t)p->n + 1;
    cl_context context = flashcl_context_cl_context(p->ctx);
    ts_rng rng = {4242u};
    for (int i = 0; i < NBUF; ++i) {
        if (i == CQ || i == CK) continue;
        float *host = NULL;
        if (i < FIRST_OUTPUT) {
            host = ts_random_floats(&rng, p->count[i], -1.0f, 1.0f);
        }
        p->m[i] = ts_buffer(context, p->count[i] * sizeof(float), host);
        free(host);
    }
    p->m[CQ] = ts_buffer(context, p->count[CQ] * sizeof(int32_t), p->cu_q);
    p->m[CK] = ts_buffer(context, p->count[CK] * sizeof(int32_t), p->cu_k);
    /* Packed (total, heads, dim); LSE (heads_q, total_q). */
    for (int i = 0; i <= DV; ++i) {
        const int kv = i == K || i == V || i == DK || i == DV;
        p->t[i] = (flashcl_tensor){p->m[i], 0, 0, D, (kv ? Hk : H) * D};
    }
    p->t[L] = (flashcl_tensor){p->m[L], 0, 0, (size_t)p->total_q, 1};
}

static void problem_free(problem *p) {
    for (int i = 0; i < NBUF; ++i)
        if (p->m[i]) clReleaseMemObject(p->m[i]);
    flashcl_context_free(p->ctx);
}

static void extras_of(const problem *p, int host_copies, flashcl_attention_extras *ex) {
    flashcl_attention_extras_init(ex);
    ex->cu_seqlens_q = p->m[CQ];
    ex->cu_seqlens_k = p->m[CK];
    if (host_copies) {
        ex->cu_seqlens_q_host = p->cu_q;
        ex->cu_seqlens_k_host = p->cu_k;
    }
}

static flashcl_status forward(problem *p, const flashcl_attention_extras *ex, cl_uint n_wait, const cl_event *wait,
                              cl_event *done) {
    return flashcl_forward_ex(p->ctx, &p->desc, ex, &p->t[Q], &p->t[K], &p->t[V], &p->t[O], &p->t[L], n_wait, wait,
                              done);
}

static flashcl_status backward(problem *p, const flashcl_attention_extras *ex, cl_uint n_wait, const cl_event *wait,
                               cl_event *done) {
    return flashcl_backward_ex(p->ctx, &p->desc, ex, &p->t[Q], &p->t[K], &p->t[V], &p->t[O], &p->t[L], &p->t[DO],
                               &p->t[DQ], &p->t[DK], &p->t[DV], n_wait, wait, done);
}

/* The outputs O, LSE, dQ, dK, dV read back (blocking), one malloc'ed array each. */
static void read_outputs(problem *p, float *out[NBUF]) {
    for (int i = FIRST_OUTPUT; i <= LAST_OUTPUT; ++i)
        out[i] = ts_read_floats(flashcl_context_queue(p->ctx), p->m[i], p->count[i]);
}

static void free_outputs(float *out[NBUF]) {
    for (int i = FIRST_OUTPUT; i <= LAST_OUTPUT; ++i) free(out[i]);
}

/* Refills every output with the shared poison, so a later run must write them. */
static void poison_outputs(problem *p) {
    const cl_uint poison = TS_POISON_F32;
    for (int i = FIRST_OUTPUT; i <= LAST_OUTPUT; ++i)
        ck_assert_int_eq(clEnqueueFillBuffer(flashcl_context_queue(p->ctx), p->m[i], &poison, sizeof poison, 0,
                                             p->count[i] * sizeof(float), 0, NULL, NULL),
                         CL_SUCCESS);
    ck_assert_int_eq(clFinish(flashcl_context_queue(p->ctx)), CL_SUCCESS);
}

static const char *const output_names[NBUF] = {[O] = "O", [L] = "LSE", [DQ] = "dQ", [DK] = "dK", [DV] = "dV"};

static void expect_bitwise_equal(const char *name, const problem *p, float *got[NBUF], float *want[NBUF]) {
    for (int i = FIRST_OUTPUT; i <= LAST_OUTPUT; ++i)
        ck_assert_msg(memcmp(got[i], want[i], p->count[i] * sizeof(float)) == 0,
                      "%s: %s differs from the read-back path's", name, output_names[i]);
}

/* Forward and backward with host copies give bitwise the results of the
 * read-back path (the same kernels on the same offsets). */
START_TEST(test_host_copies_same_results) {
    const fh_varlen_case *c = &cases[_i];
    problem p;
    problem_make(c, &p);
    flashcl_attention_extras plain, with_host;
    extras_of(&p, 0, &plain);
    extras_of(&p, 1, &with_host);
    float *want[NBUF] = {NULL}, *got[NBUF] = {NULL};
    ck_assert_msg(forward(&p, &plain, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    ck_assert_msg(backward(&p, &plain, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    read_outputs(&p, want);
    poison_outputs(&p);
    ck_assert_msg(forward(&p, &with_host, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    ck_assert_msg(backward(&p, &with_host, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    read_outputs(&p, got);
    /* The read-back results are real numbers, not the poison (test_varlen.c judges their values). */
    for (size_t j = 0; j < p.count[O]; ++j) ck_assert_msg(!isnan(want[O][j]), "%s: O[%zu] is NaN", c->name, j);
    expect_bitwise_equal(c->name, &p, got, want);
    free_outputs(want);
    free_outputs(got);
    problem_free(&p);
}
END_TEST

/* A thread that completes a user event after delay_s unless disarmed first:
 * a call that blocks on the event then returns late instead of hanging, and
 * the test can tell which came first. */
typedef struct watchdog {
    pthread_t thread;
    cl_event user;
    double delay_s;
    atomic_int state; /* ARMED, then FIRED (the thread completed the event) or DISARMED */
} watchdog;

enum { ARMED, FIRED, DISARMED };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *watchdog_main(void *arg) {
    watchdog *w = arg;
    const double deadline = now_s() + w->delay_s;
    const struct timespec step = {0, 5 * 1000 * 1000};
    while (now_s() < deadline) {
        if (atomic_load(&w->state) != ARMED) return NULL;
        nanosleep(&step, NULL);
    }
    int armed = ARMED;
    if (atomic_compare_exchange_strong(&w->state, &armed, FIRED)) clSetUserEventStatus(w->user, CL_COMPLETE);
    return NULL;
}

static void watchdog_start(watchdog *w, cl_event user, double delay_s) {
    w->user = user;
    w->delay_s = delay_s;
    atomic_init(&w->state, ARMED);
    ck_assert_int_eq(pthread_create(&w->thread, NULL, watchdog_main, w), 0);
}

/* Stops the watchdog; 1 if it had already completed the event. */
static int watchdog_stop(watchdog *w) {
    int armed = ARMED;
    const int fired = !atomic_compare_exchange_strong(&w->state, &armed, DISARMED);
    ck_assert_int_eq(pthread_join(w->thread, NULL), 0);
    return fired;
}

/* Long enough for a call that does not wait for its wait list (kernels are
 * compiled by a warm-up call first) on a loaded machine. */
#define NO_BLOCK_DELAY_S 60.0

/* With host copies the call returns while its wait list is still pending:
 * the offsets themselves are written behind an unsignalled user event (the
 * device buffers hold zeros until then, which the read-back path would
 * refuse), the forward and the backward are enqueued behind that, and both
 * return before the event is completed. Completing it then gives bitwise
 * the results of the read-back path. A call that blocked would only return
 * once the watchdog completed the event, and fail the first assertion. */
START_TEST(test_host_copies_do_not_block) {
    const fh_varlen_case *c = &cases[_i];
    problem p;
    problem_make(c, &p);
    cl_command_queue queue = flashcl_context_queue(p.ctx);
    flashcl_attention_extras plain, with_host;
    extras_of(&p, 0, &plain);
    extras_of(&p, 1, &with_host);
    float *want[NBUF] = {NULL}, *got[NBUF] = {NULL};
    /* Reference through the read-back path; it also compiles the kernels. */
    ck_assert_msg(forward(&p, &plain, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    ck_assert_msg(backward(&p, &plain, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    read_outputs(&p, want);
    poison_outputs(&p);
    const cl_int zero = 0;
    ck_assert_int_eq(clEnqueueFillBuffer(queue, p.m[CQ], &zero, sizeof zero, 0, p.count[CQ] * sizeof zero, 0, NULL,
                                         NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueFillBuffer(queue, p.m[CK], &zero, sizeof zero, 0, p.count[CK] * sizeof zero, 0, NULL,
                                         NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);

    cl_int err;
    cl_event user = clCreateUserEvent(flashcl_context_cl_context(p.ctx), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event written[2], forward_done = NULL, backward_done = NULL;
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, p.m[CQ], CL_FALSE, 0, p.count[CQ] * sizeof(int32_t), p.cu_q, 1,
                                          &user, &written[0]),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, p.m[CK], CL_FALSE, 0, p.count[CK] * sizeof(int32_t), p.cu_k, 1,
                                          &user, &written[1]),
                     CL_SUCCESS);
    watchdog w;
    watchdog_start(&w, user, NO_BLOCK_DELAY_S);
    const flashcl_status forward_status = forward(&p, &with_host, 2, written, &forward_done);
    flashcl_status backward_status = FLASHCL_ERROR_INVALID_ARGUMENT;
    if (forward_status == FLASHCL_SUCCESS) backward_status = backward(&p, &with_host, 1, &forward_done, &backward_done);
    const int fired = watchdog_stop(&w);
    cl_int pending = CL_COMPLETE;
    if (backward_done)
        ck_assert_int_eq(clGetEventInfo(backward_done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof pending, &pending,
                                        NULL),
                         CL_SUCCESS);
    /* Complete the event before any assertion can end the test with work queued behind it. */
    if (!fired) ck_assert_int_eq(clSetUserEventStatus(user, CL_COMPLETE), CL_SUCCESS);
    ck_assert_msg(!fired, "%s: the calls waited for their wait list (returned only after the user event completed)",
                  c->name);
    ck_assert_msg(forward_status == FLASHCL_SUCCESS, "%s: forward: %s", c->name, flashcl_last_error(p.ctx));
    ck_assert_msg(backward_status == FLASHCL_SUCCESS, "%s: backward: %s", c->name, flashcl_last_error(p.ctx));
    ck_assert_msg(pending != CL_COMPLETE && pending >= 0, "%s: the backward's event was %d before its wait list ran",
                  c->name, (int)pending);

    ck_assert_int_eq(clWaitForEvents(1, &backward_done), CL_SUCCESS);
    read_outputs(&p, got);
    expect_bitwise_equal(c->name, &p, got, want);
    free_outputs(want);
    free_outputs(got);
    cl_event events[] = {user, written[0], written[1], forward_done, backward_done};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; ++i) clReleaseEvent(events[i]);
    problem_free(&p);
}
END_TEST

/* The contrast that shows the watchdog can see a blocking call: without host
 * copies the call reads the offsets back after its wait list, so it returns
 * only after the watchdog has completed the user event. (The documented
 * behaviour of that path; the offsets are valid from the start here.) */
START_TEST(test_read_back_blocks) {
    problem p;
    problem_make(&cases[0], &p);
    flashcl_attention_extras plain;
    extras_of(&p, 0, &plain);
    /* Compile first, so the call below has nothing else to wait for. */
    ck_assert_msg(forward(&p, &plain, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    ck_assert_int_eq(clFinish(flashcl_context_queue(p.ctx)), CL_SUCCESS);
    cl_int err;
    cl_event user = clCreateUserEvent(flashcl_context_cl_context(p.ctx), &err), done = NULL;
    ck_assert_int_eq(err, CL_SUCCESS);
    watchdog w;
    watchdog_start(&w, user, 0.5);
    const flashcl_status status = forward(&p, &plain, 1, &user, &done);
    const int fired = watchdog_stop(&w);
    if (!fired) ck_assert_int_eq(clSetUserEventStatus(user, CL_COMPLETE), CL_SUCCESS);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s", flashcl_last_error(p.ctx));
    ck_assert_msg(fired, "the read-back path returned before its wait list completed");
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    clReleaseEvent(user);
    problem_free(&p);
}
END_TEST

/* Bad host copies are refused as the read-back path refuses bad buffers
 * (same status, same message), and the buffers' own checks still apply;
 * nothing is written (the poisoned outputs stay poisoned). */
START_TEST(test_bad_host_copies_rejected) {
    flashcl_context *ctx = ts_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 1, 8, 8, 16);
    float zeros[12 * 16] = {0};
    cl_mem in = ts_buffer(context, sizeof zeros, zeros);
    enum { OUT_O, OUT_L, OUT_DQ, OUT_DK, OUT_DV, OUTS };
    const size_t out_floats[OUTS] = {12 * 16, 12, 12 * 16, 12 * 16, 12 * 16};
    cl_mem out[OUTS];
    for (int i = 0; i < OUTS; ++i) out[i] = ts_buffer(context, out_floats[i] * sizeof(float), NULL);
    const flashcl_tensor t = {in, 0, 0, 16, 16}, o = {out[OUT_O], 0, 0, 16, 16}, lse = {out[OUT_L], 0, 0, 12, 1};
    const flashcl_tensor dq = {out[OUT_DQ], 0, 0, 16, 16}, dk = {out[OUT_DK], 0, 0, 16, 16},
                         dv = {out[OUT_DV], 0, 0, 16, 16};
    const int32_t good[3] = {0, 5, 12}, not_zero[3] = {1, 5, 12}, decreasing[3] = {0, 6, 4}, too_long[3] = {0, 9, 12},
                  empty[3] = {0, 0, 0}, too_many_rows[3] = {0, 8, 16};
    cl_mem cu_good = ts_buffer(context, sizeof good, good), cu_small = ts_buffer(context, 2 * sizeof(int32_t), good);
    flashcl_attention_extras ex;

    /* Contents: the host path's message is the read-back path's for the same array. */
    const struct {
        const int32_t *values;
        int on_k; /* the bad array is cu_seqlens_k (else _q) */
        const char *expected;
    } contents[] = {
        {not_zero, 0, "cu_seqlens_q[0] is 1, not 0"},
        {decreasing, 0, "cu_seqlens_q: sequence 1 has length -2"},
        {too_long, 1, "cu_seqlens_k: sequence 0 has length 9"},
        {empty, 1, "cu_seqlens_k: the packed batch has no rows"},
    };
    for (size_t i = 0; i < sizeof contents / sizeof contents[0]; ++i) {
        char read_back_message[512];
        cl_mem bad = ts_buffer(context, 3 * sizeof(int32_t), contents[i].values);
        flashcl_attention_extras_init(&ex);
        ex.cu_seqlens_q = contents[i].on_k ? cu_good : bad;
        ex.cu_seqlens_k = contents[i].on_k ? bad : cu_good;
        ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_ARGUMENT);
        snprintf(read_back_message, sizeof read_back_message, "%s", flashcl_last_error(ctx));
        ck_assert_msg(strstr(read_back_message, contents[i].expected), "read-back: %s", read_back_message);
        /* Host copies: the device arrays are both good, so only the copy can be refused. */
        flashcl_attention_extras_init(&ex);
        ex.cu_seqlens_q = ex.cu_seqlens_k = cu_good;
        ex.cu_seqlens_q_host = contents[i].on_k ? good : contents[i].values;
        ex.cu_seqlens_k_host = contents[i].on_k ? contents[i].values : good;
        ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_ARGUMENT);
        ck_assert_str_eq(flashcl_last_error(ctx), read_back_message);
        ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &dq, &dk, &dv, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_ARGUMENT);
        ck_assert_str_eq(flashcl_last_error(ctx), read_back_message);
        clReleaseMemObject(bad);
    }

    /* Only one host copy: the other array would be read back anyway. */
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = ex.cu_seqlens_k = cu_good;
    ex.cu_seqlens_q_host = good;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "cu_seqlens_k_host is NULL"), "%s", flashcl_last_error(ctx));
    ex.cu_seqlens_q_host = NULL;
    ex.cu_seqlens_k_host = good;
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &t, &lse, &t, &dq, &dk, &dv, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "cu_seqlens_q_host is NULL"), "%s", flashcl_last_error(ctx));

    /* Host copies without the device arrays the kernels read. */
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q_host = ex.cu_seqlens_k_host = good;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "without the device arrays"), "%s", flashcl_last_error(ctx));
    ex.cu_seqlens_k_host = NULL; /* one of them alone is refused too */
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "without the device arrays"), "%s", flashcl_last_error(ctx));
    /* One device array with both host copies: the device pair is checked first. */
    ex.cu_seqlens_q = cu_good;
    ex.cu_seqlens_k_host = good;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "cu_seqlens_k is NULL"), "%s", flashcl_last_error(ctx));

    /* The buffers' size and context are still checked. */
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = cu_small;
    ex.cu_seqlens_k = cu_good;
    ex.cu_seqlens_q_host = ex.cu_seqlens_k_host = good;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "cu_seqlens_q needs 12 bytes"), "%s", flashcl_last_error(ctx));
    cl_device_id device;
    ck_assert_int_eq(clGetContextInfo(context, CL_CONTEXT_DEVICES, sizeof device, &device, NULL), CL_SUCCESS);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem foreign = clCreateBuffer(other, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof good, (void *)good, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ex.cu_seqlens_q = cu_good;
    ex.cu_seqlens_k = foreign;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_WRONG_CONTEXT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "cu_seqlens_k belongs to another"), "%s", flashcl_last_error(ctx));

    /* The totals come from the host copies: 16 rows do not fit the 12-row views. */
    ex.cu_seqlens_k = cu_good;
    ex.cu_seqlens_q_host = too_many_rows;
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &lse, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);

    /* Nothing was written by any refused call. */
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    for (int i = 0; i < OUTS; ++i) {
        float *back = ts_read_floats(queue, out[i], out_floats[i]);
        for (size_t j = 0; j < out_floats[i]; ++j)
            ck_assert_msg(ts_is_poison(back[j]), "output %d element %zu was written by a refused call", i, j);
        free(back);
    }
    clReleaseMemObject(foreign);
    clReleaseContext(other);
    cl_mem all[] = {in, cu_good, cu_small, out[0], out[1], out[2], out[3], out[4]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *varlen_host_suite(void) {
    Suite *s = suite_create("varlen_host");
    TCase *tc = tcase_create("varlen_host");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    tcase_add_loop_test(tc, test_host_copies_same_results, 0, n_cases);
    tcase_add_loop_test(tc, test_host_copies_do_not_block, 0, n_cases);
    tcase_add_test(tc, test_read_back_blocks);
    tcase_add_test(tc, test_bad_host_copies_rejected);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(varlen_host_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

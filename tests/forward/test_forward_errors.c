/* test_forward_errors.c: bad forward calls get their specific status and a message and write nothing; API odds and ends. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

/* A valid small forward call whose tensors each test spoils one way. */
typedef struct call {
    flashcl_context *ctx;
    flashcl_attention_desc desc;
    ts_problem problem;
    ts_tensor q, k, v, o, lse;
} call;

static void call_init(call *c, flashcl_context *ctx) {
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    flashcl_attention_desc_init(&c->desc, 1, 2, 20, 24, 16);
    ts_problem_init(&c->problem, &c->desc, 77, 1.0f);
    const ts_placement bhsd = {FLASHCL_LAYOUT_BHSD, 0, 0};
    cl_context context = flashcl_context_cl_context(ctx);
    ts_tensor_create(&c->q, context, &bhsd, 1, 2, 20, 16, FLASHCL_DTYPE_F32, c->problem.q);
    ts_tensor_create(&c->k, context, &bhsd, 1, 2, 24, 16, FLASHCL_DTYPE_F32, c->problem.k);
    ts_tensor_create(&c->v, context, &bhsd, 1, 2, 24, 16, FLASHCL_DTYPE_F32, c->problem.v);
    ts_tensor_create(&c->o, context, &bhsd, 1, 2, 20, 16, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&c->lse, context, &bhsd, 1, 2, 20, 1, FLASHCL_DTYPE_F32, NULL);
}

static void call_free(call *c) {
    ts_tensor_free(&c->q);
    ts_tensor_free(&c->k);
    ts_tensor_free(&c->v);
    ts_tensor_free(&c->o);
    ts_tensor_free(&c->lse);
    ts_problem_free(&c->problem);
}

/* The status must be the expected one, with a message, and no buffer of the
 * call may have changed once the queue is drained. */
static void expect_rejected(call *c, flashcl_status got, flashcl_status want, const char *what) {
    ck_assert_msg(got == want, "%s: got \"%s\", want \"%s\" (%s)", what, flashcl_status_string(got),
                  flashcl_status_string(want), flashcl_last_error(c->ctx));
    ck_assert_msg(flashcl_last_error(c->ctx)[0] != '\0', "%s: no message in flashcl_last_error", what);
    cl_command_queue queue = flashcl_context_queue(c->ctx);
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    ts_assert_untouched(queue, &c->o, "O after a rejected call");
    ts_assert_untouched(queue, &c->lse, "LSE after a rejected call");
    ts_assert_untouched(queue, &c->q, "Q after a rejected call");
    ts_assert_untouched(queue, &c->k, "K after a rejected call");
    ts_assert_untouched(queue, &c->v, "V after a rejected call");
}

/* Runs the call with possibly spoiled copies of its parts. */
typedef struct spoiled {
    flashcl_attention_desc desc;
    flashcl_tensor q, k, v, o, lse;
    const flashcl_attention_desc *desc_p;
    const flashcl_tensor *q_p, *k_p, *v_p, *o_p, *lse_p;
    cl_uint num_events;
    const cl_event *events;
} spoiled;

static spoiled spoil_nothing(const call *c) {
    spoiled s;
    memset(&s, 0, sizeof s);
    s.desc = c->desc;
    s.q = c->q.view, s.k = c->k.view, s.v = c->v.view, s.o = c->o.view, s.lse = c->lse.view;
    s.desc_p = &s.desc;
    s.q_p = &s.q, s.k_p = &s.k, s.v_p = &s.v, s.o_p = &s.o, s.lse_p = &s.lse;
    return s;
}

/* Pointers into a spoiled copy must be re-aimed after the copy moves. */
static flashcl_status run_spoiled(call *c, spoiled *s) {
#define REAIM(field) \
    if (s->field##_p) s->field##_p = &s->field
    REAIM(desc);
    REAIM(q);
    REAIM(k);
    REAIM(v);
    REAIM(o);
    REAIM(lse);
#undef REAIM
    return flashcl_forward(c->ctx, s->desc_p, s->q_p, s->k_p, s->v_p, s->o_p, s->lse_p, s->num_events, s->events,
                           NULL);
}

/* The unspoiled call works: every rejection below is due to its one defect. */
START_TEST(test_valid_call_succeeds) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    flashcl_status status = run_spoiled(&c, &s);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s", flashcl_last_error(ctx));
    ck_assert_str_eq(flashcl_last_error(ctx), "");
    ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    ts_tensor_read(flashcl_context_queue(ctx), &c.o);
    ts_assert_written_exactly(&c.o, "O");
    /* A failure, then a success: the success clears the message. */
    s.desc.head_dim = 0;
    ck_assert_int_eq(run_spoiled(&c, &s), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(ctx)[0] != '\0');
    s.desc.head_dim = 16;
    ck_assert_int_eq(run_spoiled(&c, &s), FLASHCL_SUCCESS);
    ck_assert_str_eq(flashcl_last_error(ctx), "");
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

typedef struct bad_case {
    const char *what;
    flashcl_status want;
} bad_case;

static const bad_case bad_cases[] = {
    {"NULL desc", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL q", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL k", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL v", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL o", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL o buffer", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL k buffer", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"NULL lse buffer", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"o offset past the buffer", FLASHCL_ERROR_BUFFER_TOO_SMALL},
    {"q seq stride too large", FLASHCL_ERROR_BUFFER_TOO_SMALL},
    {"k seq stride overflowing size_t", FLASHCL_ERROR_BUFFER_TOO_SMALL},
    {"v offset overflowing size_t", FLASHCL_ERROR_BUFFER_TOO_SMALL},
    {"lse buffer too small", FLASHCL_ERROR_BUFFER_TOO_SMALL},
    {"batch 0", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"heads_q -1", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"heads_kv 0", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"seqlen_q 0", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"seqlen_k -5", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"head_dim 0", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"head_dim 257", FLASHCL_ERROR_UNSUPPORTED},
    {"heads_q 3 with heads_kv 2", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"o is q", FLASHCL_ERROR_ALIASING},
    {"o overlaps part of k", FLASHCL_ERROR_ALIASING},
    {"lse inside o", FLASHCL_ERROR_ALIASING},
    {"lse overlaps v", FLASHCL_ERROR_ALIASING},
    {"o rows share addresses (seq stride 0)", FLASHCL_ERROR_ALIASING},
    {"o rows overlap (seq stride < head_dim)", FLASHCL_ERROR_ALIASING},
    {"o heads share addresses (head stride 0)", FLASHCL_ERROR_ALIASING},
    {"lse seq stride 0", FLASHCL_ERROR_ALIASING},
    {"scale NaN", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"scale inf", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"scale negative", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"unknown dtype", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"wait-list count 1 with NULL list", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"wait-list count 0 with a list", FLASHCL_ERROR_INVALID_ARGUMENT},
    {"wait-list with a NULL event", FLASHCL_ERROR_INVALID_ARGUMENT},
};
#define BAD_COUNT ((int)(sizeof bad_cases / sizeof bad_cases[0]))

START_TEST(test_bad_call) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    cl_event some_event = NULL;
    cl_event null_event = NULL;
    const size_t k_elems = c.k.capacity;
    switch (_i) {
    case 0: s.desc_p = NULL; break;
    case 1: s.q_p = NULL; break;
    case 2: s.k_p = NULL; break;
    case 3: s.v_p = NULL; break;
    case 4: s.o_p = NULL; break;
    case 5: s.o.buffer = NULL; break;
    case 6: s.k.buffer = NULL; break;
    case 7: s.lse.buffer = NULL; break;
    case 8: s.o.offset = TS_CANARY_ELEMS + 1; break;
    case 9: s.q.stride_seq = 64; break;
    case 10: s.k.stride_seq = SIZE_MAX / 3; break;
    case 11: s.v.offset = SIZE_MAX - 8; break;
    case 12: s.lse.offset = TS_CANARY_ELEMS + 1; break;
    case 13: s.desc.batch = 0; break;
    case 14: s.desc.heads_q = -1; break;
    case 15: s.desc.heads_kv = 0; break;
    case 16: s.desc.seqlen_q = 0; break;
    case 17: s.desc.seqlen_k = -5; break;
    case 18: s.desc.head_dim = 0; break;
    case 19: s.desc.head_dim = 257; break;
    case 20: s.desc.heads_q = 3, s.desc.heads_kv = 2; break;
    case 21: s.o.buffer = c.q.view.buffer; break;
    case 22: s.o.buffer = c.k.view.buffer, s.o.offset = 100; break;
    case 23: s.lse.buffer = c.o.view.buffer, s.lse.offset = 33; break;
    case 24: s.lse.buffer = c.v.view.buffer, s.lse.offset = k_elems - TS_CANARY_ELEMS - 10; break;
    case 25: s.o.stride_seq = 0; break;
    case 26: s.o.stride_seq = 8; break;
    case 27: s.o.stride_head = 0; break;
    case 28: s.lse.stride_seq = 0; break;
    case 29: s.desc.scale = NAN; break;
    case 30: s.desc.scale = INFINITY; break;
    case 31: s.desc.scale = -0.5f; break;
    case 32: s.desc.dtype = (flashcl_dtype)7; break;
    case 33: s.num_events = 1, s.events = NULL; break;
    case 34: {
        cl_int err;
        some_event = clCreateUserEvent(flashcl_context_cl_context(ctx), &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        s.num_events = 0, s.events = &some_event;
        break;
    }
    case 35: s.num_events = 1, s.events = &null_event; break;
    }
    expect_rejected(&c, run_spoiled(&c, &s), bad_cases[_i].want, bad_cases[_i].what);
    if (some_event) {
        clSetUserEventStatus(some_event, CL_COMPLETE);
        clReleaseEvent(some_event);
    }
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_null_context) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 4, 4, 8);
    flashcl_tensor t = {NULL, 0, 0, 0, 0};
    ck_assert_int_eq(flashcl_forward(NULL, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(NULL)[0] != '\0');
    float x[32] = {0};
    ck_assert_int_eq(flashcl_forward_host(NULL, &d, FLASHCL_LAYOUT_BHSD, x, x, x, x, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(NULL)[0] != '\0');
    ck_assert_int_eq(flashcl_context_force_plan(NULL, FLASHCL_PASS_FORWARD, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_context_free(NULL); /* accepted */
}
END_TEST

/* Every public call given a NULL context returns INVALID_ARGUMENT and leaves
 * its detail (naming the call and ctx) in flashcl_last_error(NULL), replacing
 * whatever an earlier failure left there. */
static void expect_null_ctx_message(flashcl_status got, const char *function) {
    ck_assert_msg(got == FLASHCL_ERROR_INVALID_ARGUMENT, "%s(NULL): status %s", function, flashcl_status_string(got));
    const char *message = flashcl_last_error(NULL);
    ck_assert_msg(strstr(message, function) && strstr(message, "ctx"),
                  "%s(NULL): flashcl_last_error(NULL) is \"%s\"", function, message);
}

/* Leaves a message unrelated to ctx in flashcl_last_error(NULL). */
static void stale_thread_error(void) {
    ck_assert_int_eq(flashcl_context_create(NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_null(strstr(flashcl_last_error(NULL), "ctx"));
}

START_TEST(test_null_context_messages) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 4, 4, 8);
    const flashcl_tensor t = {NULL, 0, 0, 0, 0};
    float x[32] = {0};
    flashcl_plan plan = {16, 16, 4, 4, 0, 0};
    flashcl_device_limits limits;
    flashcl_call_stats stats;
    double bytes;
    cl_mem no_mem = NULL;
#define NULL_CTX(function, ...)                                         \
    do {                                                                 \
        stale_thread_error();                                            \
        expect_null_ctx_message(function(NULL, __VA_ARGS__), #function); \
    } while (0)
    NULL_CTX(flashcl_forward, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL);
    NULL_CTX(flashcl_forward_ex, &d, NULL, &t, &t, &t, &t, NULL, 0, NULL, NULL);
    NULL_CTX(flashcl_forward_host, &d, FLASHCL_LAYOUT_BHSD, x, x, x, x, NULL);
    NULL_CTX(flashcl_backward, &d, &t, &t, &t, &t, &t, &t, &t, &t, &t, 0, NULL, NULL);
    NULL_CTX(flashcl_backward_ex, &d, NULL, &t, &t, &t, &t, &t, &t, &t, &t, &t, 0, NULL, NULL);
    NULL_CTX(flashcl_backward_host, &d, FLASHCL_LAYOUT_BHSD, x, x, x, x, x, NULL, x, x, x);
    NULL_CTX(flashcl_dropout_mask, &d, no_mem, 0, 0, NULL, NULL);
    NULL_CTX(flashcl_context_set_impl, FLASHCL_IMPL_FLASH);
    NULL_CTX(flashcl_context_set_memory_budget, 0);
    NULL_CTX(flashcl_last_call_stats, &stats);
    NULL_CTX(flashcl_predict_global_bytes, FLASHCL_IMPL_FLASH, FLASHCL_PASS_FORWARD, &d, &bytes);
    NULL_CTX(flashcl_context_limits, &limits);
    NULL_CTX(flashcl_context_force_plan, FLASHCL_PASS_FORWARD, &plan);
    NULL_CTX(flashcl_context_plan, FLASHCL_PASS_FORWARD, &d, &plan);
#undef NULL_CTX
    /* The context-free calls report there too. */
    stale_thread_error();
    ck_assert_int_eq(flashcl_query_device_limits(NULL, &limits), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "flashcl_query_device_limits"));
    stale_thread_error();
    ck_assert_int_eq(flashcl_plan_choose(NULL, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "flashcl_plan_choose"));
    const flashcl_device_limits tiny = {sizeof(flashcl_device_limits), 64, 1, 1, 1, 0};
    stale_thread_error();
    ck_assert_int_eq(flashcl_plan_choose(&tiny, FLASHCL_PASS_FORWARD, 256, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_PLAN);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "no forward tile plan"));
}
END_TEST

/* flashcl_last_call_stats before any call succeeded, or without somewhere
 * to write: INVALID_ARGUMENT with the reason in flashcl_last_error(ctx). */
START_TEST(test_last_call_stats_without_a_call) {
    flashcl_context *ctx = ts_context();
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "no flashcl_forward") != NULL, "message \"%s\"",
                  flashcl_last_error(ctx));
    ck_assert_int_eq(flashcl_last_call_stats(ctx, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "stats is NULL"));
    flashcl_context_free(ctx);
}
END_TEST

/* The kernels take (batch, head) from a 32-bit group id: batch x heads_q
 * must stay below 2^31, checked (UNSUPPORTED) before the tensors are. */
START_TEST(test_batch_heads_bound) {
    flashcl_context *ctx = ts_context();
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor t = flashcl_tensor_contiguous(m, FLASHCL_LAYOUT_BHSD, 1, 1, 1);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1 << 16, 1 << 15, 1, 1, 1); /* 2^31 pairs */
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "batch x heads_q"));
    double bytes;
    ck_assert_int_eq(flashcl_predict_global_bytes(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_FORWARD, &d, &bytes),
                     FLASHCL_ERROR_UNSUPPORTED);
    d.heads_kv = 1 << 14; /* GQA: still batch x heads_q pairs of query heads */
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    flashcl_attention_desc_init(&d, 1 << 16, (1 << 15) - 1, 1, 1, 1); /* below 2^31: on to the tensors */
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    clReleaseMemObject(m);
    flashcl_context_free(ctx);
}
END_TEST

/* Row and key bounds are 32-bit in the kernels: seqlen_q + seqlen_k + 1024
 * must stay below 2^31, checked (UNSUPPORTED) before the tensors are. */
START_TEST(test_sequence_length_bound) {
    flashcl_context *ctx = ts_context();
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor t = flashcl_tensor_contiguous(m, FLASHCL_LAYOUT_BHSD, 1, 1, 1);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 1 << 30, (1 << 30) - 1023, 1); /* sum + 1024 = 2^31 + 1 */
    d.causal = 1;
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "seqlen_q + seqlen_k"));
    flashcl_attention_desc_init(&d, 1, 1, 1 << 30, (1 << 30) - 1025, 1); /* just below: on to the tensors */
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &t, NULL, 0, NULL, NULL), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    clReleaseMemObject(m);
    flashcl_context_free(ctx);
}
END_TEST

/* A buffer of another cl_context (same device) is refused before OpenCL sees it. */
START_TEST(test_buffer_of_another_context) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem foreign = clCreateBuffer(other, CL_MEM_READ_WRITE, c.v.capacity * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    spoiled s = spoil_nothing(&c);
    s.v.buffer = foreign;
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_WRONG_CONTEXT, "v from another context");
    s = spoil_nothing(&c);
    s.o.buffer = foreign;
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_WRONG_CONTEXT, "o from another context");
    clReleaseMemObject(foreign);
    clReleaseContext(other);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

/* Sub-buffers are resolved to their parent: an overlap through them is
 * caught, disjoint sub-buffers of one parent work. */
START_TEST(test_sub_buffers) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    cl_uint align_bits = 0;
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                                     &align_bits, NULL),
                     CL_SUCCESS);
    const size_t align = align_bits / 8 > 0 ? align_bits / 8 : 1;
    const size_t o_bytes = c.o.capacity * sizeof(float);
    const size_t region = (o_bytes + align - 1) / align * align; /* one O, rounded up to the alignment */
    cl_int err;
    cl_mem parent = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 3 * region, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    /* Fill the parent with O's poison so "nothing written" is checkable. */
    ck_assert_int_eq(clEnqueueWriteBuffer(flashcl_context_queue(ctx), parent, CL_TRUE, 0, o_bytes, c.o.initial, 0,
                                          NULL, NULL),
                     CL_SUCCESS);
    cl_buffer_region first = {0, region}, shifted = {align, region}, disjoint = {region, region};
    cl_mem sub_first = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &first, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem sub_shifted = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &shifted, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem sub_disjoint = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &disjoint, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_msg(align < o_bytes, "alignment %zu leaves no overlap to test", align);

    /* o in a sub-buffer, lse in an overlapping sibling. */
    spoiled s = spoil_nothing(&c);
    s.o.buffer = sub_first;
    s.lse.buffer = sub_shifted;
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_ALIASING, "lse in a sub-buffer overlapping o's");
    /* o in the parent, lse in a sub-buffer inside the same bytes. */
    s = spoil_nothing(&c);
    s.o.buffer = parent;
    s.lse.buffer = sub_first;
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_ALIASING, "lse in a sub-buffer of o's buffer");
    /* Neither rejection wrote into the parent's bytes. */
    unsigned char *back = malloc(o_bytes);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), parent, CL_TRUE, 0, o_bytes, back, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_msg(memcmp(back, c.o.initial, o_bytes) == 0, "a rejected call wrote into the shared parent buffer");
    free(back);
    /* Disjoint sub-buffers: accepted and computed. */
    s = spoil_nothing(&c);
    s.o.buffer = sub_first;
    s.lse.buffer = sub_disjoint;
    flashcl_status status = run_spoiled(&c, &s);
    ck_assert_msg(status == FLASHCL_SUCCESS, "disjoint sub-buffers: %s", flashcl_last_error(ctx));
    float *o = malloc(o_bytes), *lse = malloc(c.problem.lse_count * sizeof(float));
    ck_assert(o && lse);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), sub_first, CL_TRUE, 0, c.problem.q_count * 4, o,
                                         0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), sub_disjoint, CL_TRUE, 0,
                                         c.problem.lse_count * 4, lse, 0, NULL, NULL),
                     CL_SUCCESS);
    ts_check_forward(&c.problem, o, lse, "outputs in sub-buffers");
    free(o), free(lse);
    clReleaseMemObject(sub_first);
    clReleaseMemObject(sub_shifted);
    clReleaseMemObject(sub_disjoint);
    clReleaseMemObject(parent);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

/* A power-of-two plan that passes every check against `relaxed` but not
 * against the device (and, if wider_group, has more work-items than the
 * device allows): 1 and *out set if one exists. */
static int plan_beyond(const flashcl_device_limits *device, const flashcl_device_limits *relaxed, int head_dim,
                       int wider_group, flashcl_plan *out) {
    for (int bq = 1; bq <= 1024; bq *= 2)
        for (int bk = 1; bk <= 1024; bk *= 2)
            for (int tq = 1; tq <= bq; tq *= 2)
                for (int tk = 1; tk <= bk; tk *= 2) {
                    flashcl_plan p = {bq, bk, tq, tk, 0, 0}, q = p;
                    if (wider_group && (size_t)tq * (size_t)tk <= device->max_work_group_size) continue;
                    if (flashcl_plan_check(relaxed, FLASHCL_PASS_FORWARD, head_dim, FLASHCL_DTYPE_F32, &p, NULL,
                                           0) == FLASHCL_SUCCESS &&
                        flashcl_plan_check(device, FLASHCL_PASS_FORWARD, head_dim, FLASHCL_DTYPE_F32, &q, NULL, 0) ==
                            FLASHCL_ERROR_PLAN) {
                        *out = p;
                        return 1;
                    }
                }
    return 0;
}

/* Forced plans too big for this device: FLASHCL_ERROR_PLAN at the call, with
 * the reason, and nothing written. */
START_TEST(test_forced_plan_too_big) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    flashcl_device_limits limits;
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    flashcl_device_limits relaxed = limits;
    flashcl_plan plan;
    const char *word;
    if (_i == 0) {
        relaxed.local_mem_bytes = SIZE_MAX;
        word = "local memory";
    } else {
        /* On a 32 KiB device every plan with more work-items than the
         * device allows also needs more local memory; the work-group
         * check comes first, so the reason still names it. */
        relaxed.max_work_group_size = SIZE_MAX;
        relaxed.local_mem_bytes = SIZE_MAX;
        word = "work-group";
    }
    ck_assert_msg(plan_beyond(&limits, &relaxed, c.desc.head_dim, _i == 1, &plan), "no plan exceeds the %s limit", word);
    if (_i == 1) ck_assert_uint_gt(plan.work_group_size, limits.max_work_group_size);
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &plan), FLASHCL_SUCCESS);
    spoiled s = spoil_nothing(&c);
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_PLAN, word);
    ck_assert_msg(strstr(flashcl_last_error(ctx), word) != NULL, "message \"%s\" does not mention %s",
                  flashcl_last_error(ctx), word);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

/* flashcl_forward_host: float32 only, a known layout, non-NULL arrays. */
START_TEST(test_forward_host_rejects) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 4, 4, 8);
    float in[32] = {0}, out[32], lse[4];
    for (int i = 0; i < 32; ++i) out[i] = -7.0f;
    d.dtype = FLASHCL_DTYPE_F16;
    ck_assert_int_eq(flashcl_forward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, in, in, in, out, lse),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(ctx)[0] != '\0');
    d.dtype = FLASHCL_DTYPE_F32;
    ck_assert_int_eq(flashcl_forward_host(ctx, &d, (flashcl_layout)5, in, in, in, out, lse),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_forward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, in, NULL, in, out, lse),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_forward_host(ctx, NULL, FLASHCL_LAYOUT_BHSD, in, in, in, out, lse),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < 32; ++i) ck_assert(out[i] == -7.0f);
    flashcl_context_free(ctx);
}
END_TEST

/* A wait-list event of another cl_context is refused (OpenCL leaves it
 * undefined; POCL ran the call), and a rejected call leaves *event as it
 * was. */
START_TEST(test_foreign_event_rejected) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event foreign = clCreateUserEvent(other, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clSetUserEventStatus(foreign, CL_COMPLETE), CL_SUCCESS);
    cl_event untouched = (cl_event)(uintptr_t)0x5a5a5a5a;
    cl_event out = untouched;
    const flashcl_status status = flashcl_forward(ctx, &c.desc, &c.q.view, &c.k.view, &c.v.view, &c.o.view,
                                                  &c.lse.view, 1, &foreign, &out);
    expect_rejected(&c, status, FLASHCL_ERROR_INVALID_ARGUMENT, "wait-list event of another context");
    ck_assert_msg(strstr(flashcl_last_error(ctx), "another cl_context") != NULL, "%s", flashcl_last_error(ctx));
    ck_assert_msg(out == untouched, "a rejected call changed *event");
    /* The same call with an event of its own context runs. */
    cl_event own = clCreateUserEvent(flashcl_context_cl_context(ctx), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clSetUserEventStatus(own, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(flashcl_forward(ctx, &c.desc, &c.q.view, &c.k.view, &c.v.view, &c.o.view, &c.lse.view, 1,
                                     &own, &out),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &out), CL_SUCCESS);
    clReleaseEvent(out);
    clReleaseEvent(own);
    clReleaseEvent(foreign);
    clReleaseContext(other);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

/* The _host calls refuse shapes whose byte counts overflow size_t (each
 * dimension is valid alone) before allocating anything; backward_host
 * takes a NULL o as its header says. */
START_TEST(test_host_size_overflow) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1 << 20, 1 << 10, 1 << 29, 1 << 29, 256); /* Q alone: 2^69 bytes */
    float in[32] = {0}, out[32];
    for (int i = 0; i < 32; ++i) out[i] = -7.0f;
    flashcl_status status = flashcl_forward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, in, in, in, out, NULL);
    ck_assert_msg(status == FLASHCL_ERROR_INVALID_ARGUMENT, "%s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    status = flashcl_backward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, in, in, in, in, NULL, NULL, out, out, out);
    ck_assert_msg(status == FLASHCL_ERROR_INVALID_ARGUMENT, "%s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    for (int i = 0; i < 32; ++i) ck_assert(out[i] == -7.0f);

    flashcl_attention_desc_init(&d, 1, 1, 4, 4, 8);
    float q[32], dq[32], dk[32], dv[32], lse[4];
    for (int i = 0; i < 32; ++i) q[i] = (float)(i % 7) * 0.1f;
    ck_assert_msg(flashcl_backward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, q, q, q, q, NULL, lse, dq, dk, dv) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    for (int i = 0; i < 32; ++i) ck_assert(isfinite(dq[i]) && isfinite(dk[i]) && isfinite(dv[i]));
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_status_strings) {
    const flashcl_status all[] = {
#define FLASHCL_TEST_STATUS(name, value, text) name,
        FLASHCL_STATUS_LIST(FLASHCL_TEST_STATUS)
#undef FLASHCL_TEST_STATUS
    };
    const int n = (int)(sizeof all / sizeof all[0]);
    ck_assert_int_ge(n, 14);
    for (int i = 0; i < n; ++i) {
        const char *a = flashcl_status_string(all[i]);
        ck_assert(a != NULL && a[0] != '\0');
        for (int j = 0; j < i; ++j) ck_assert_msg(strcmp(a, flashcl_status_string(all[j])) != 0, "%d and %d share \"%s\"", i, j, a);
    }
    ck_assert(flashcl_status_string((flashcl_status)999) != NULL);
    ck_assert_str_eq(flashcl_status_string(FLASHCL_SUCCESS), "success");
}
END_TEST

START_TEST(test_version) {
    ck_assert_uint_eq(flashcl_version_number(), FLASHCL_VERSION_NUMBER);
    ck_assert_str_eq(flashcl_version_string(), FLASHCL_VERSION_STRING);
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", FLASHCL_VERSION_MAJOR, FLASHCL_VERSION_MINOR, FLASHCL_VERSION_PATCH);
    ck_assert_str_eq(flashcl_version_string(), expected);
}
END_TEST

START_TEST(test_device_not_found) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    flashcl_context *ctx = (flashcl_context *)(uintptr_t)0x10; /* must be reset to NULL */
    options.device = "no-such-device-xyz";
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_ERROR_DEVICE_NOT_FOUND);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(flashcl_last_error(NULL), "no-such-device-xyz") != NULL, "message: %s",
                  flashcl_last_error(NULL));
    options.device = "4242";
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_ERROR_DEVICE_NOT_FOUND);
    ck_assert(flashcl_last_error(NULL)[0] != '\0');
    /* The environment variable is the fallback when options name nothing. */
    setenv("FLASHCL_DEVICE", "also-no-such-device", 1);
    ck_assert_int_eq(flashcl_context_create(&ctx, NULL), FLASHCL_ERROR_DEVICE_NOT_FOUND);
    ck_assert(strstr(flashcl_last_error(NULL), "also-no-such-device") != NULL);
    ck_assert_int_eq(flashcl_context_create(NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

/* A small forward with the context's settings, checked against the reference. */
static void check_small_forward(flashcl_context *ctx) {
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    flashcl_status status = run_spoiled(&c, &s);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s", flashcl_last_error(ctx));
    float *o = malloc(c.problem.q_count * sizeof(float)), *lse = malloc(c.problem.lse_count * sizeof(float));
    ck_assert(o && lse);
    ts_tensor_read(flashcl_context_queue(ctx), &c.o);
    ts_tensor_read(flashcl_context_queue(ctx), &c.lse);
    ts_assert_written_exactly(&c.o, "O");
    ts_tensor_gather(&c.o, o);
    ts_tensor_gather(&c.lse, lse);
    ts_check_forward(&c.problem, o, lse, "small forward");
    free(o), free(lse);
    call_free(&c);
}

START_TEST(test_kernel_dir_option_and_env) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.kernel_dir = FLASHCL_TEST_KERNEL_DIR;
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_SUCCESS);
    check_small_forward(ctx);
    flashcl_context_free(ctx);
    setenv("FLASHCL_KERNEL_DIR", FLASHCL_TEST_KERNEL_DIR, 1);
    ctx = ts_context();
    check_small_forward(ctx);
    flashcl_context_free(ctx);
    /* The environment points nowhere: loading fails, proving it is read. */
    setenv("FLASHCL_KERNEL_DIR", "/nonexistent/flashcl-kernels", 1);
    ctx = ts_context();
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_KERNEL_SOURCE, "FLASHCL_KERNEL_DIR missing");
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_missing_kernel_dir) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.kernel_dir = "/nonexistent/flashcl-kernels";
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_SUCCESS);
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_KERNEL_SOURCE, "missing kernel directory");
    ck_assert(strstr(flashcl_last_error(ctx), "/nonexistent/flashcl-kernels") != NULL);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    ck_assert_msg(in && out, "cannot copy %s to %s", from, to);
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, in)) > 0) ck_assert_uint_eq(fwrite(buffer, 1, n, out), n);
    fclose(in);
    fclose(out);
}

START_TEST(test_broken_kernel_source) {
    char dir[] = "/tmp/flashcl-broken-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char common[256], forward[256];
    snprintf(common, sizeof common, "%s/common.cl", dir);
    snprintf(forward, sizeof forward, "%s/forward.cl", dir);
    FILE *f = fopen(common, "w");
    ck_assert_ptr_nonnull(f);
    fputs("// a deliberately broken common.cl\ntypedef float storage_t\nint this is not C;\n", f);
    fclose(f);
    copy_file(FLASHCL_TEST_KERNEL_DIR "/forward.cl", forward);
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.kernel_dir = dir;
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_SUCCESS);
    ck_assert_str_eq(flashcl_last_build_log(ctx), "");
    call c;
    call_init(&c, ctx);
    spoiled s = spoil_nothing(&c);
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_BUILD_FAILED, "broken common.cl");
    ck_assert_msg(flashcl_last_build_log(ctx)[0] != '\0', "empty build log");
    call_free(&c);
    flashcl_context_free(ctx);
    unlink(common);
    unlink(forward);
    rmdir(dir);
}
END_TEST

/* The caller's own queue and buffers; the wait list is honoured (a user
 * event holds the kernel back) and the returned event completes. */
START_TEST(test_context_from_callers_queue) {
    flashcl_context *probe = ts_context(); /* only to find the device FLASHCL_DEVICE names */
    cl_device_id device = flashcl_context_device(probe);
    cl_int err;
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_context_free(probe);
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    cl_command_queue queue = clCreateCommandQueue(context, device, 0, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, queue, NULL), FLASHCL_SUCCESS);
    ck_assert_ptr_eq(flashcl_context_queue(ctx), queue);
    ck_assert_ptr_eq(flashcl_context_cl_context(ctx), context);
    ck_assert_ptr_eq(flashcl_context_device(ctx), device);

    call c;
    call_init(&c, ctx);
    cl_event gate = clCreateUserEvent(context, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    ck_assert_int_eq(flashcl_forward(ctx, &c.desc, &c.q.view, &c.k.view, &c.v.view, &c.o.view, &c.lse.view, 1, &gate,
                                     &done),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_nonnull(done);
    cl_int state = CL_QUEUED;
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_msg(state != CL_COMPLETE, "the kernel ran before its wait list completed");
    ck_assert_int_eq(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_int_eq(state, CL_COMPLETE);
    float *o = malloc(c.problem.q_count * sizeof(float)), *lse = malloc(c.problem.lse_count * sizeof(float));
    ck_assert(o && lse);
    ts_tensor_read(queue, &c.o);
    ts_tensor_read(queue, &c.lse);
    ts_assert_written_exactly(&c.o, "O");
    ts_assert_written_exactly(&c.lse, "LSE");
    ts_tensor_gather(&c.o, o);
    ts_tensor_gather(&c.lse, lse);
    ts_check_forward(&c.problem, o, lse, "caller's queue");
    free(o), free(lse);
    clReleaseEvent(done);
    clReleaseEvent(gate);
    call_free(&c);
    /* Freeing the flashcl context leaves the caller's queue usable. */
    flashcl_context_free(ctx);
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(NULL)[0] != '\0');
}
END_TEST

/* flashcl_forward_host on a context wrapping an out-of-order queue: the
 * read-back must wait for the kernel (several runs, outputs poisoned with
 * NaN each time). Devices without out-of-order queues (rusticl) skip it. */
START_TEST(test_forward_host_out_of_order_queue) {
    flashcl_context *probe = ts_context();
    cl_device_id device = flashcl_context_device(probe);
    cl_command_queue_properties props = 0;
    ck_assert_int_eq(clGetDeviceInfo(device, CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props, NULL), CL_SUCCESS);
    if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
        flashcl_context_free(probe);
        return;
    }
    cl_int err;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    cl_command_queue queue = clCreateCommandQueue(flashcl_context_cl_context(probe), device,
                                                  CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, queue, NULL), FLASHCL_SUCCESS);
    clReleaseCommandQueue(queue);
    /* Large enough that the kernel is still running when an unordered read would start. */
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 8, 256, 256, 64);
    ts_problem p;
    ts_problem_init(&p, &d, 2024, 1.0f);
    float *o = malloc(p.q_count * sizeof(float)), *lse = malloc(p.lse_count * sizeof(float));
    ck_assert(o && lse);
    for (int run = 0; run < 4; ++run) {
        for (size_t i = 0; i < p.q_count; ++i) o[i] = NAN;
        for (size_t i = 0; i < p.lse_count; ++i) lse[i] = NAN;
        ck_assert_msg(flashcl_forward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, p.q, p.k, p.v, o, lse) == FLASHCL_SUCCESS,
                      "%s", flashcl_last_error(ctx));
        ts_check_forward(&p, o, lse, "forward_host on an out-of-order queue");
    }
    free(o), free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
    flashcl_context_free(probe);
}
END_TEST

#if !FLASHCL_HAS_STANDARD
/* A build without CLBlast: the standard implementation can still be chosen (a
 * setting, and explain/IO-model queries are arithmetic), but running it is a
 * clean FLASHCL_ERROR_UNSUPPORTED that names the build option, forward and
 * backward, with nothing written. Builds with CLBlast test the real thing in
 * tests/standard instead. */
START_TEST(test_standard_unavailable) {
    flashcl_context *ctx = ts_context();
    call c;
    call_init(&c, ctx);
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    spoiled s = spoil_nothing(&c);
    expect_rejected(&c, run_spoiled(&c, &s), FLASHCL_ERROR_UNSUPPORTED, "standard forward without CLBlast");
    ck_assert_msg(strstr(flashcl_last_error(ctx), "FLASHCL_WITH_CLBLAST=OFF") != NULL, "%s", flashcl_last_error(ctx));
    /* The backward: every tensor valid and apart (dO holds Q's values), so only the build refuses. */
    const ts_placement bhsd = {FLASHCL_LAYOUT_BHSD, 0, 0};
    cl_context context = flashcl_context_cl_context(ctx);
    ts_tensor dout, dq, dk, dv;
    ts_tensor_create(&dout, context, &bhsd, 1, 2, 20, 16, FLASHCL_DTYPE_F32, c.problem.q);
    ts_tensor_create(&dq, context, &bhsd, 1, 2, 20, 16, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&dk, context, &bhsd, 1, 2, 24, 16, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&dv, context, &bhsd, 1, 2, 24, 16, FLASHCL_DTYPE_F32, NULL);
    const flashcl_status status = flashcl_backward(ctx, &c.desc, &c.q.view, &c.k.view, &c.v.view, &c.o.view,
                                                   &c.lse.view, &dout.view, &dq.view, &dk.view, &dv.view, 0, NULL,
                                                   NULL);
    ck_assert_msg(status == FLASHCL_ERROR_UNSUPPORTED, "backward: %s", flashcl_last_error(ctx));
    ck_assert_msg(strstr(flashcl_last_error(ctx), "FLASHCL_WITH_CLBLAST=OFF") != NULL, "%s", flashcl_last_error(ctx));
    cl_command_queue queue = flashcl_context_queue(ctx);
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    ts_assert_untouched(queue, &dq, "dQ after the refusal");
    ts_assert_untouched(queue, &dk, "dK after the refusal");
    ts_assert_untouched(queue, &dv, "dV after the refusal");
    ts_tensor_free(&dout), ts_tensor_free(&dq), ts_tensor_free(&dk), ts_tensor_free(&dv);
    call_free(&c);
    flashcl_context_free(ctx);
}
END_TEST
#endif

/* The api cases set FLASHCL_DEVICE and FLASHCL_KERNEL_DIR: after each one (passed or failed) both get back the
 * values the process started with, since the cases share the suite's process (CK_FORK=no under CTest). */
static char *g_start_device, *g_start_kernel_dir;

static void restore_variable(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

static void restore_environment(void) {
    restore_variable("FLASHCL_DEVICE", g_start_device);
    restore_variable("FLASHCL_KERNEL_DIR", g_start_kernel_dir);
}

static char *copy_variable(const char *name) {
    const char *value = getenv(name);
    return value ? strdup(value) : NULL;
}

static Suite *errors_suite(void) {
    Suite *s = suite_create("forward_errors");
    TCase *tc = tcase_create("bad_inputs");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_valid_call_succeeds);
    tcase_add_loop_test(tc, test_bad_call, 0, BAD_COUNT);
    tcase_add_test(tc, test_null_context);
    tcase_add_test(tc, test_null_context_messages);
    tcase_add_test(tc, test_last_call_stats_without_a_call);
    tcase_add_test(tc, test_batch_heads_bound);
    tcase_add_test(tc, test_sequence_length_bound);
    tcase_add_test(tc, test_buffer_of_another_context);
    tcase_add_test(tc, test_sub_buffers);
    tcase_add_loop_test(tc, test_forced_plan_too_big, 0, 2);
    tcase_add_test(tc, test_forward_host_rejects);
    tcase_add_test(tc, test_foreign_event_rejected);
    tcase_add_test(tc, test_host_size_overflow);
    suite_add_tcase(s, tc);
    TCase *api = tcase_create("api");
    tcase_set_timeout(api, TS_CASE_TIMEOUT);
    tcase_add_checked_fixture(api, NULL, restore_environment);
    tcase_add_test(api, test_status_strings);
    tcase_add_test(api, test_version);
    tcase_add_test(api, test_device_not_found);
    tcase_add_test(api, test_kernel_dir_option_and_env);
    tcase_add_test(api, test_missing_kernel_dir);
    tcase_add_test(api, test_broken_kernel_source);
    tcase_add_test(api, test_context_from_callers_queue);
    tcase_add_test(api, test_forward_host_out_of_order_queue);
#if !FLASHCL_HAS_STANDARD
    tcase_add_test(api, test_standard_unavailable);
#endif
    suite_add_tcase(s, api);
    return s;
}

int main(void) {
    g_start_device = copy_variable("FLASHCL_DEVICE");
    g_start_kernel_dir = copy_variable("FLASHCL_KERNEL_DIR");
    SRunner *runner = srunner_create(errors_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    free(g_start_device);
    free(g_start_kernel_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

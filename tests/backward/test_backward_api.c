/* test_backward_api.c: bad inputs, the memory budget and O(N) scratch, events, the host form, finite differences, planning. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "backward_harness.h"

static const bwd_case small_case = {"api 37x29 d40 causal", {2, 2, 1, 37, 29, 40, 1, 0.0f, 1.0f},
                                    FLASHCL_LAYOUT_BSHD, 4};

/* A context, host data and device buffers with the forward already run. */
typedef struct fixture {
    flashcl_context *ctx;
    bwd_host h;
    bwd_device d;
    flashcl_attention_desc desc;
} fixture;

static void setup(fixture *f, const bwd_case *c) {
    f->ctx = ts_context();
    bwd_host_alloc(c, 3, &f->h);
    bwd_device_create(f->ctx, c, &f->h, &f->d);
    ck_assert_int_eq(bwd_run_forward(f->ctx, c, &f->d), FLASHCL_SUCCESS);
    bwd_desc(c, &f->desc);
}

static void teardown(fixture *f) {
    bwd_device_free(&f->d);
    bwd_host_free(&f->h);
    flashcl_context_free(f->ctx);
}

static flashcl_status backward_with(fixture *f, const flashcl_tensor *lse, const flashcl_tensor *dq,
                                    const flashcl_tensor *dk, const flashcl_tensor *dv) {
    return flashcl_backward(f->ctx, &f->desc, &f->d.q.view, &f->d.k.view, &f->d.v.view, &f->d.o.view, lse,
                            &f->d.dout.view, dq, dk, dv, 0, NULL, NULL);
}

START_TEST(test_missing_lse) {
    fixture f;
    setup(&f, &small_case);
    ck_assert_int_eq(backward_with(&f, NULL, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view), FLASHCL_ERROR_MISSING_LSE);
    ck_assert_str_ne(flashcl_last_error(f.ctx), "");
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    teardown(&f);
}
END_TEST

START_TEST(test_dq_aliasing_q) {
    fixture f;
    setup(&f, &small_case);
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.q.view, &f.d.dk.view, &f.d.dv.view), FLASHCL_ERROR_ALIASING);
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    teardown(&f);
}
END_TEST

START_TEST(test_dk_overlapping_dv) {
    fixture f;
    setup(&f, &small_case);
    flashcl_tensor shifted = f.d.dk.view;
    shifted.buffer = f.d.dv.view.buffer;
    shifted.offset += 1; /* dk one element into dv's view */
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &shifted, &f.d.dv.view), FLASHCL_ERROR_ALIASING);
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    teardown(&f);
}
END_TEST

START_TEST(test_buffer_too_small) {
    fixture f;
    setup(&f, &small_case);
    cl_int err;
    const size_t needed = small_case.offset + ts_case_kv_count(&small_case.shape);
    cl_mem tiny = clCreateBuffer(flashcl_context_cl_context(f.ctx), CL_MEM_READ_WRITE, (needed - 1) * sizeof(float),
                                 NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_tensor dk = f.d.dk.view;
    dk.buffer = tiny;
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &dk, &f.d.dv.view), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    /* LSE too small as well: its view has one float per query row. */
    cl_mem short_lse = clCreateBuffer(flashcl_context_cl_context(f.ctx), CL_MEM_READ_WRITE,
                                      (small_case.offset + ts_case_lse_count(&small_case.shape) - 1) * sizeof(float),
                                      NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_tensor lse = f.d.lse.view;
    lse.buffer = short_lse;
    ck_assert_int_eq(backward_with(&f, &lse, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    clReleaseMemObject(short_lse);
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    clReleaseMemObject(tiny);
    teardown(&f);
}
END_TEST

START_TEST(test_bad_desc_and_plan) {
    fixture f;
    setup(&f, &small_case);
    f.desc.head_dim = 0;
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    bwd_desc(&small_case, &f.desc);
    f.desc.scale = -1.0f;
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    bwd_desc(&small_case, &f.desc);
    /* 40 head-dim columns on one work-item break the register rule. */
    const flashcl_plan too_wide = {4, 4, 1, 1, 0, 0};
    ck_assert_int_eq(flashcl_context_force_plan(f.ctx, FLASHCL_PASS_BACKWARD, &too_wide), FLASHCL_SUCCESS);
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view),
                     FLASHCL_ERROR_PLAN);
    /* A plan whose tiles exceed any device's local memory. */
    const flashcl_plan too_big = {1024, 1024, 32, 32, 0, 0};
    ck_assert_int_eq(flashcl_context_force_plan(f.ctx, FLASHCL_PASS_BACKWARD, &too_big), FLASHCL_SUCCESS);
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view),
                     FLASHCL_ERROR_PLAN);
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    teardown(&f);
}
END_TEST

/* The scratch is D = rowsum(dO * O): one float per query row and head. */
static size_t expected_scratch(const bwd_case *c) { return ts_case_lse_count(&c->shape) * sizeof(float); }

START_TEST(test_memory_budget) {
    fixture f;
    setup(&f, &small_case);
    const size_t scratch = expected_scratch(&small_case);
    ck_assert_int_eq(flashcl_context_set_memory_budget(f.ctx, scratch - 1), FLASHCL_SUCCESS);
    ck_assert_int_eq(backward_with(&f, &f.d.lse.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view),
                     FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_int_eq(clFinish(flashcl_context_queue(f.ctx)), CL_SUCCESS);
    bwd_assert_gradients_untouched(f.ctx, &f.d);
    /* Exactly the scratch is enough. */
    ck_assert_int_eq(flashcl_context_set_memory_budget(f.ctx, scratch), FLASHCL_SUCCESS);
    ck_assert_int_eq(bwd_run_backward(f.ctx, &small_case, &f.d), FLASHCL_SUCCESS);
    bwd_read_results(f.ctx, &f.d, &f.h);
    bwd_check_gradients(&small_case, &f.h);
    teardown(&f);
}
END_TEST

/* Extra memory is O(N) per head: exactly one float per query row, whatever
 * seqlen_k (an N x N buffer would grow with seqlen_q x seqlen_k). */
START_TEST(test_scratch_is_linear) {
    const bwd_case cases[] = {
        {"scratch 64x64", {1, 2, 2, 64, 64, 16, 0, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
        {"scratch 64x640", {1, 2, 2, 64, 640, 16, 0, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
        {"scratch 640x64", {1, 2, 2, 640, 64, 16, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        fixture f;
        setup(&f, &cases[i]);
        ck_assert_int_eq(bwd_run_backward(f.ctx, &cases[i], &f.d), FLASHCL_SUCCESS);
        flashcl_call_stats stats;
        ck_assert_int_eq(flashcl_last_call_stats(f.ctx, &stats), FLASHCL_SUCCESS);
        ck_assert_int_eq(stats.pass, FLASHCL_PASS_BACKWARD);
        ck_assert_int_eq(stats.impl, FLASHCL_IMPL_FLASH);
        ck_assert_uint_eq(stats.extra_device_bytes, expected_scratch(&cases[i]));
        teardown(&f);
    }
}
END_TEST

/* The call honours its wait list: nothing runs before a user event fires. */
START_TEST(test_wait_list_and_event) {
    fixture f;
    setup(&f, &small_case);
    cl_int err;
    cl_event gate = clCreateUserEvent(flashcl_context_cl_context(f.ctx), &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_event done = NULL;
    ck_assert_int_eq(flashcl_backward(f.ctx, &f.desc, &f.d.q.view, &f.d.k.view, &f.d.v.view, &f.d.o.view,
                                      &f.d.lse.view, &f.d.dout.view, &f.d.dq.view, &f.d.dk.view, &f.d.dv.view, 1,
                                      &gate, &done),
                     FLASHCL_SUCCESS);
    ck_assert_ptr_nonnull(done);
    cl_int state = 0;
    ck_assert_int_eq(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL), CL_SUCCESS);
    ck_assert_int_ne(state, CL_COMPLETE);
    ck_assert_int_eq(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    clReleaseEvent(gate);
    bwd_read_results(f.ctx, &f.d, &f.h);
    bwd_check_gradients(&small_case, &f.h);
    teardown(&f);
}
END_TEST

/* The shared library's buffers on a context: a copy of host, or the poison when host is NULL. */
static cl_mem buffer_of(flashcl_context *ctx, const float *host, size_t count) {
    return ts_buffer(flashcl_context_cl_context(ctx), count * sizeof(float), host);
}

static float *read_floats(flashcl_context *ctx, cl_mem m, size_t count) {
    return ts_read_floats(flashcl_context_queue(ctx), m, count);
}

/* Q, K, V and dQ, dK, dV each interleaved in one packed (B, S, Hq + 2 Hkv, D)
 * buffer, as frameworks keep a fused QKV projection: the gradient views
 * never share a byte although their spans overlap, so the backward runs,
 * writes every element of the packed buffer and equals the same call with
 * separate dQ, dK, dV buffers bit for bit. Views that do share bytes are
 * still refused. Loop: Hq = Hkv, then GQA (views of different head counts). */
START_TEST(test_packed_dqkv) {
    const int batch = 2, seqlen = 37, dim = 16, hq = 2 + 2 * _i, hkv = 2;
    const size_t rowq = (size_t)hq * dim, rowkv = (size_t)hkv * dim, row = rowq + 2 * rowkv;
    const size_t packed = (size_t)batch * seqlen * row, room = packed + (size_t)seqlen * row; /* one spare batch */
    const size_t nq = (size_t)batch * seqlen * rowq, nkv = (size_t)batch * seqlen * rowkv;
    flashcl_context *ctx = ts_context();
    ts_rng rng = {12345u};
    float *host = ts_random_floats(&rng, packed, -1.0f, 1.0f), *dout_host = ts_random_floats(&rng, nq, -1.0f, 1.0f);
    cl_mem qkv = buffer_of(ctx, host, packed), dout = buffer_of(ctx, dout_host, nq), dqkv = buffer_of(ctx, NULL, room);
    cl_mem o = buffer_of(ctx, NULL, nq), lse = buffer_of(ctx, NULL, (size_t)batch * hq * seqlen);
    cl_mem dq = buffer_of(ctx, NULL, nq), dk = buffer_of(ctx, NULL, nkv), dv = buffer_of(ctx, NULL, nkv);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, batch, hq, seqlen, seqlen, dim);
    d.heads_kv = hkv;
    d.causal = 1;
    const size_t sb = (size_t)seqlen * row;
    const flashcl_tensor tq = {qkv, 0, sb, dim, row}, tk = {qkv, rowq, sb, dim, row}, tv = {qkv, rowq + rowkv, sb, dim, row};
    const flashcl_tensor pdq = {dqkv, 0, sb, dim, row}, pdk = {dqkv, rowq, sb, dim, row},
                         pdv = {dqkv, rowq + rowkv, sb, dim, row};
    const flashcl_tensor to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, hq, seqlen, dim),
                         tdo = flashcl_tensor_contiguous(dout, FLASHCL_LAYOUT_BSHD, hq, seqlen, dim),
                         tl = flashcl_tensor_lse(lse, hq, seqlen),
                         sdq = flashcl_tensor_contiguous(dq, FLASHCL_LAYOUT_BSHD, hq, seqlen, dim),
                         sdk = flashcl_tensor_contiguous(dk, FLASHCL_LAYOUT_BSHD, hkv, seqlen, dim),
                         sdv = flashcl_tensor_contiguous(dv, FLASHCL_LAYOUT_BSHD, hkv, seqlen, dim);
    ck_assert_msg(flashcl_forward(ctx, &d, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));

    /* Genuine overlaps: dK one element into dQ's columns; dV in the next
     * batch's rows (its spans overlap dQ's only through the batch stride). */
    flashcl_tensor bad = pdk;
    bad.offset = rowq - 1;
    ck_assert_int_eq(flashcl_backward(ctx, &d, &tq, &tk, &tv, &to, &tl, &tdo, &pdq, &bad, &pdv, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "overlaps"));
    bad = pdv;
    bad.offset = sb;
    ck_assert_int_eq(flashcl_backward(ctx, &d, &tq, &tk, &tv, &to, &tl, &tdo, &pdq, &pdk, &bad, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    float *untouched = read_floats(ctx, dqkv, room);
    for (size_t i = 0; i < room; ++i) ck_assert_msg(ts_is_poison(untouched[i]), "a refused call wrote element %zu", i);
    free(untouched);

    ck_assert_msg(flashcl_backward(ctx, &d, &tq, &tk, &tv, &to, &tl, &tdo, &sdq, &sdk, &sdv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward(ctx, &d, &tq, &tk, &tv, &to, &tl, &tdo, &pdq, &pdk, &pdv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "packed dQKV refused: %s", flashcl_last_error(ctx));
    float *p = read_floats(ctx, dqkv, room), *gq = read_floats(ctx, dq, nq), *gk = read_floats(ctx, dk, nkv),
          *gv = read_floats(ctx, dv, nkv);
    for (size_t r = 0; r < (size_t)batch * seqlen; ++r) {
        const float *at = p + r * row;
        ck_assert_msg(memcmp(at, gq + r * rowq, rowq * sizeof(float)) == 0, "dQ of packed row %zu differs", r);
        ck_assert_msg(memcmp(at + rowq, gk + r * rowkv, rowkv * sizeof(float)) == 0, "dK of packed row %zu differs", r);
        ck_assert_msg(memcmp(at + rowq + rowkv, gv + r * rowkv, rowkv * sizeof(float)) == 0,
                      "dV of packed row %zu differs", r);
    }
    for (size_t i = 0; i < packed; ++i) ck_assert_msg(isfinite(p[i]), "packed element %zu not written", i);
    for (size_t i = packed; i < room; ++i) ck_assert_msg(ts_is_poison(p[i]), "element %zu past the views written", i);
    free(p), free(gq), free(gk), free(gv);
    cl_mem all[] = {qkv, dout, dqkv, o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    free(host), free(dout_host);
    flashcl_context_free(ctx);
}
END_TEST

/* The overlap test of outputs sharing one buffer with the same strides is
 * exact: random interleavings (strides with room for three rows side by
 * side, offsets in or across those slots) are refused exactly when two of
 * dQ, dK, dV share an element, as counted element by element here. Loop:
 * Hq = Hkv, then GQA. */
START_TEST(test_interleaved_outputs_overlap_exactly) {
    const int batch = 2, hq = 2, hkv = 2 - _i, seqlen = 3, dim = 4;
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, batch, hq, seqlen, seqlen, dim);
    d.heads_kv = hkv;
    const size_t nq = (size_t)batch * hq * seqlen * dim, nkv = (size_t)batch * hkv * seqlen * dim;
    float *zeros = calloc(nq, sizeof *zeros);
    ck_assert_ptr_nonnull(zeros);
    cl_mem in_q = buffer_of(ctx, zeros, nq), in_kv = buffer_of(ctx, zeros, nkv),
           in_lse = buffer_of(ctx, zeros, (size_t)batch * hq * seqlen);
    free(zeros);
    const flashcl_tensor tq = flashcl_tensor_contiguous(in_q, FLASHCL_LAYOUT_BHSD, hq, seqlen, dim),
                         tkv = flashcl_tensor_contiguous(in_kv, FLASHCL_LAYOUT_BHSD, hkv, seqlen, dim),
                         tl = flashcl_tensor_lse(in_lse, hq, seqlen);
    ts_rng rng = {777u + (uint64_t)_i};
#define RANDOM(n) ts_index(&rng, (size_t)(n))
    int refused = 0, accepted = 0;
    for (int trial = 0; trial < 80; ++trial) {
        /* Strides in a random nesting order of (batch, head, seq), each past the span of the inner ones. */
        const size_t sizes[3] = {(size_t)batch, (size_t)hq, (size_t)seqlen};
        size_t order[3] = {0, 1, 2};
        for (int i = 2; i > 0; --i) {
            const size_t j = RANDOM(i + 1), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        size_t strides[3], inner = 3 * (size_t)dim + RANDOM(4), span = 0;
        for (int i = 0; i < 3; ++i) {
            strides[order[i]] = inner;
            span = inner * (sizes[order[i]] - 1) + (i == 0 ? inner : span);
            inner = span + RANDOM(6);
        }
        /* Mostly one of three dim-wide slots of the innermost stride (side
         * by side: no overlap unless two share a slot), sometimes shifted
         * within a row or by a whole stride. */
        size_t offsets[3];
        for (int v = 0; v < 3; ++v) {
            offsets[v] = RANDOM(3) * (size_t)dim;
            if (RANDOM(3) == 0) offsets[v] += RANDOM(dim);
            if (RANDOM(4) == 0) offsets[v] += strides[order[RANDOM(3)]];
        }
        const size_t heads[3] = {(size_t)hq, (size_t)hkv, (size_t)hkv};
        size_t capacity = 0;
        for (int v = 0; v < 3; ++v) {
            const size_t last = offsets[v] + (batch - 1) * strides[0] + (heads[v] - 1) * strides[1] +
                                (seqlen - 1) * strides[2] + dim;
            if (last > capacity) capacity = last;
        }
        /* Which view owns each element; a second owner is an overlap. */
        unsigned char *owner = calloc(capacity, 1);
        ck_assert_ptr_nonnull(owner);
        int overlap = 0;
        for (int v = 0; v < 3; ++v)
            for (size_t b = 0; b < (size_t)batch; ++b)
                for (size_t h = 0; h < heads[v]; ++h)
                    for (size_t r = 0; r < (size_t)seqlen; ++r)
                        for (size_t e = 0; e < (size_t)dim; ++e) {
                            unsigned char *at =
                                &owner[offsets[v] + b * strides[0] + h * strides[1] + r * strides[2] + e];
                            if (*at && *at != v + 1) overlap = 1;
                            *at = (unsigned char)(v + 1);
                        }
        free(owner);
        cl_mem shared = buffer_of(ctx, NULL, capacity);
        flashcl_tensor views[3];
        for (int v = 0; v < 3; ++v) views[v] = (flashcl_tensor){shared, offsets[v], strides[0], strides[1], strides[2]};
        const flashcl_status st = flashcl_backward(ctx, &d, &tq, &tkv, &tkv, &tq, &tl, &tq, &views[0], &views[1],
                                                   &views[2], 0, NULL, NULL);
        ck_assert_msg(st == (overlap ? FLASHCL_ERROR_ALIASING : FLASHCL_SUCCESS),
                      "trial %d: strides %zu/%zu/%zu, offsets %zu/%zu/%zu: overlap %d but status %s (%s)", trial,
                      strides[0], strides[1], strides[2], offsets[0], offsets[1], offsets[2], overlap,
                      flashcl_status_string(st), flashcl_last_error(ctx));
        ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
        clReleaseMemObject(shared);
        if (overlap) ++refused;
        else ++accepted;
    }
#undef RANDOM
    /* Both outcomes occur, so neither direction of the test is vacuous. */
    ck_assert_msg(refused >= 5 && accepted >= 5, "refused %d, accepted %d", refused, accepted);
    cl_mem all[] = {in_q, in_kv, in_lse};
    for (size_t i = 0; i < 3; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

/* On an out-of-order queue the kernels are chained by events and the one
 * returned event covers them all. rusticl offers no out-of-order queues:
 * there the test checks that the device indeed says so. */
START_TEST(test_out_of_order_queue) {
    flashcl_context *probe = ts_context();
    cl_command_queue_properties props = 0;
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(probe), CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props,
                                     NULL),
                     CL_SUCCESS);
    if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
        cl_int err;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
        cl_command_queue q = clCreateCommandQueue(flashcl_context_cl_context(probe), flashcl_context_device(probe),
                                                  CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
        ck_assert_msg(err != CL_SUCCESS, "device creates out-of-order queues it does not report");
        if (q) clReleaseCommandQueue(q);
        flashcl_context_free(probe);
        return;
    }
    cl_int err;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    cl_command_queue queue = clCreateCommandQueue(flashcl_context_cl_context(probe), flashcl_context_device(probe),
                                                  CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create_from_queue(&ctx, queue, NULL), FLASHCL_SUCCESS);
    clReleaseCommandQueue(queue);
    const bwd_case *c = &small_case;
    bwd_host h;
    bwd_host_alloc(c, 5, &h);
    ck_assert_int_eq(flashcl_backward_host(ctx, &(flashcl_attention_desc){0}, c->layout, h.q, h.k, h.v, h.dout, h.o,
                                           NULL, h.dq, h.dk, h.dv),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    ck_assert_msg(flashcl_backward_host(ctx, &desc, c->layout, h.q, h.k, h.v, h.dout, h.o, h.lse, h.dq, h.dk, h.dv) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    /* The host form takes c's layout for every array; the check wants BHSD. */
    bwd_case bhsd = *c;
    bhsd.layout = FLASHCL_LAYOUT_BHSD;
    bwd_host b;
    bwd_host_alloc(&bhsd, 5, &b);
    const ts_case *s = &c->shape;
    flashcl_reference_bshd_to_bhsd(h.dq, b.dq, s->batch, s->seqlen_q, s->heads_q, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.dk, b.dk, s->batch, s->seqlen_k, s->heads_kv, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.dv, b.dv, s->batch, s->seqlen_k, s->heads_kv, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.q, b.q, s->batch, s->seqlen_q, s->heads_q, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.k, b.k, s->batch, s->seqlen_k, s->heads_kv, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.v, b.v, s->batch, s->seqlen_k, s->heads_kv, s->head_dim);
    flashcl_reference_bshd_to_bhsd(h.dout, b.dout, s->batch, s->seqlen_q, s->heads_q, s->head_dim);
    memcpy(b.lse, h.lse, ts_case_lse_count(&c->shape) * sizeof(float));
    bwd_check_gradients(&bhsd, &b);
    bwd_host_free(&b);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
    flashcl_context_free(probe);
}
END_TEST

/* The host form: the same gradients as the device form on the same data
 * (bit for bit: both run the same plans), NULL lse accepted, NULL outputs not. */
START_TEST(test_host_form) {
    bwd_case c = small_case;
    c.layout = FLASHCL_LAYOUT_BHSD;
    c.offset = 0;
    fixture f;
    setup(&f, &c);
    ck_assert_int_eq(bwd_run_backward(f.ctx, &c, &f.d), FLASHCL_SUCCESS);
    bwd_read_results(f.ctx, &f.d, &f.h);
    bwd_check_gradients(&c, &f.h);
    const size_t nq = ts_case_q_count(&c.shape), nkv = ts_case_kv_count(&c.shape);
    float *o = malloc(nq * sizeof(float)), *dq = malloc(nq * sizeof(float));
    float *dk = malloc(nkv * sizeof(float)), *dv = malloc(nkv * sizeof(float));
    ck_assert(o && dq && dk && dv);
    ck_assert_int_eq(flashcl_backward_host(f.ctx, &f.desc, FLASHCL_LAYOUT_BHSD, f.h.q, f.h.k, f.h.v, f.h.dout, o, NULL,
                                           dq, dk, dv),
                     FLASHCL_SUCCESS);
    ck_assert(memcmp(o, f.h.o, nq * sizeof(float)) == 0);
    ck_assert(memcmp(dq, f.h.dq, nq * sizeof(float)) == 0);
    ck_assert(memcmp(dk, f.h.dk, nkv * sizeof(float)) == 0);
    ck_assert(memcmp(dv, f.h.dv, nkv * sizeof(float)) == 0);
    ck_assert_int_eq(flashcl_backward_host(f.ctx, &f.desc, FLASHCL_LAYOUT_BHSD, f.h.q, f.h.k, f.h.v, f.h.dout, o, NULL,
                                           NULL, dk, dv),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_backward_host(NULL, &f.desc, FLASHCL_LAYOUT_BHSD, f.h.q, f.h.k, f.h.v, f.h.dout, o, NULL,
                                           dq, dk, dv),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    free(o), free(dq), free(dk), free(dv);
    teardown(&f);
}
END_TEST

/* loss(q, k, v) = sum(dO * O) in double through the reference forward: its
 * gradient is exactly what the backward computes for that dO. */
static double loss(const flashcl_attention_desc *desc, const float *q, const float *k, const float *v,
                   const float *dout, double *o_scratch) {
    ck_assert_int_eq(flashcl_reference_forward(desc, FLASHCL_REF_DOUBLE, q, k, v, o_scratch, NULL), 0);
    const size_t n = (size_t)desc->batch * desc->heads_q * desc->seqlen_q * desc->head_dim;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += (double)dout[i] * o_scratch[i];
    return sum;
}

/* Central differences of one input against a gradient. The step's two ends
 * are rounded to float like the inputs, and the quotient uses the step
 * actually taken. In double the loss carries ~1e-16 of rounding, so the
 * error is the O(h^2) truncation, ~1e-7 for h = 2^-10: far below the 1e-5
 * tolerance, and far above float noise, which is why the loss is not taken
 * from the float kernels. */
static void check_fd(const char *name, const flashcl_attention_desc *desc, float *x, size_t n, const float *grad,
                     const double *ref_grad, float *q, float *k, float *v, const float *dout, double *o_scratch) {
    const float h = 1.0f / 1024.0f;
    double magnitude = 0.0;
    for (size_t i = 0; i < n; ++i) magnitude = fmax(magnitude, fabs(ref_grad[i]));
    ck_assert_msg(magnitude > 1e-3, "%s: the case is too degenerate to check", name);
    for (size_t i = 0; i < n; ++i) {
        const float saved = x[i];
        const float up = saved + h, down = saved - h;
        x[i] = up;
        const double l_up = loss(desc, q, k, v, dout, o_scratch);
        x[i] = down;
        const double l_down = loss(desc, q, k, v, dout, o_scratch);
        x[i] = saved;
        const double fd = (l_up - l_down) / ((double)up - (double)down);
        ck_assert_msg(fabs(fd - grad[i]) <= 1e-5 * magnitude + 1e-7, "%s[%zu]: flashcl %.9g, finite difference %.9g",
                      name, i, (double)grad[i], fd);
        ck_assert_msg(fabs(fd - ref_grad[i]) <= 1e-5 * magnitude + 1e-7,
                      "%s[%zu]: reference %.9g, finite difference %.9g", name, i, ref_grad[i], fd);
    }
}

START_TEST(test_finite_differences) {
    /* Tiny, causal with seqlen_q > seqlen_k (two fully masked rows), GQA. */
    const bwd_case c = {"finite differences", {1, 2, 1, 5, 3, 4, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0};
    fixture f;
    setup(&f, &c);
    ck_assert_int_eq(bwd_run_backward(f.ctx, &c, &f.d), FLASHCL_SUCCESS);
    bwd_read_results(f.ctx, &f.d, &f.h);
    const size_t nq = ts_case_q_count(&c.shape), nkv = ts_case_kv_count(&c.shape);
    double *ref = malloc(sizeof(double) * (nq + 2 * nkv)), *o = malloc(sizeof(double) * nq);
    ck_assert(ref && o);
    ck_assert_int_eq(flashcl_reference_backward(&f.desc, FLASHCL_REF_DOUBLE, f.h.q, f.h.k, f.h.v, f.h.dout, ref,
                                                ref + nq, ref + nq + nkv),
                     0);
    check_fd("dq", &f.desc, f.h.q, nq, f.h.dq, ref, f.h.q, f.h.k, f.h.v, f.h.dout, o);
    check_fd("dk", &f.desc, f.h.k, nkv, f.h.dk, ref + nq, f.h.q, f.h.k, f.h.v, f.h.dout, o);
    check_fd("dv", &f.desc, f.h.v, nkv, f.h.dv, ref + nq + nkv, f.h.q, f.h.k, f.h.v, f.h.dout, o);
    free(ref);
    free(o);
    teardown(&f);
}
END_TEST

/* Synthetic devices: every head dim gets a backward plan within the
 * device's local memory and work-group limits, with at most 32 head-dim
 * columns per work-item (the rusticl limit). */
START_TEST(test_planner_fits_every_device) {
#define LIMITS(local, group, multiple, units) {sizeof(flashcl_device_limits), local, group, multiple, units, 0}
    const flashcl_device_limits devices[] = {
        LIMITS(32 * 1024, 1024, 32, 8), LIMITS(48 * 1024, 1024, 32, 16), LIMITS(64 * 1024, 256, 64, 32),
        LIMITS(1024 * 1024, 4096, 1, 2), LIMITS(32 * 1024, 64, 1, 1),
    };
#undef LIMITS
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i)
        for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d) {
            flashcl_plan p;
            ck_assert_msg(flashcl_plan_choose(&devices[i], FLASHCL_PASS_BACKWARD, d, FLASHCL_DTYPE_F32, d & 1, &p) ==
                              FLASHCL_SUCCESS,
                          "no backward plan for head_dim %d on device %zu", d, i);
            ck_assert(p.local_mem_bytes > 0 && p.local_mem_bytes <= devices[i].local_mem_bytes);
            ck_assert(p.work_group_size >= 1 && p.work_group_size <= devices[i].max_work_group_size);
            ck_assert_int_le((d + p.threads_q - 1) / p.threads_q, 32);
            flashcl_plan again = p;
            ck_assert_int_eq(flashcl_plan_check(&devices[i], FLASHCL_PASS_BACKWARD, d, FLASHCL_DTYPE_F32, &again,
                                                NULL, 0),
                             FLASHCL_SUCCESS);
            ck_assert_uint_eq(again.local_mem_bytes, p.local_mem_bytes);
        }
    /* The backward needs more local memory than the forward for one tile shape. */
    const flashcl_device_limits big = {sizeof(flashcl_device_limits), 1 << 20, 1024, 1, 1, 0};
    flashcl_plan fwd = {32, 32, 8, 8, 0, 0}, bwd = fwd;
    ck_assert_int_eq(flashcl_plan_check(&big, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &fwd, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_plan_check(&big, FLASHCL_PASS_BACKWARD, 64, FLASHCL_DTYPE_F32, &bwd, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_uint_gt(bwd.local_mem_bytes, fwd.local_mem_bytes);
    char reason[128];
    flashcl_plan wide = {8, 8, 4, 2, 0, 0}; /* 64 columns of head_dim 256 per work-item */
    ck_assert_int_eq(flashcl_plan_check(&big, FLASHCL_PASS_BACKWARD, 256, FLASHCL_DTYPE_F32, &wide, reason,
                                        sizeof reason),
                     FLASHCL_ERROR_PLAN);
    ck_assert_str_ne(reason, "");
    const flashcl_device_limits small = {sizeof(flashcl_device_limits), 32 * 1024, 1024, 1, 1, 0};
    flashcl_plan large = {16, 16, 8, 8, 0, 0}; /* 4 x 16 x 257 floats alone exceed 32 KiB */
    ck_assert_int_eq(flashcl_plan_check(&small, FLASHCL_PASS_BACKWARD, 256, FLASHCL_DTYPE_F32, &large, NULL, 0),
                     FLASHCL_ERROR_PLAN);
}
END_TEST

static Suite *backward_api_suite(void) {
    Suite *s = suite_create("backward_api");
    TCase *tc = tcase_create("bad_inputs");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_missing_lse);
    tcase_add_test(tc, test_dq_aliasing_q);
    tcase_add_test(tc, test_dk_overlapping_dv);
    tcase_add_loop_test(tc, test_packed_dqkv, 0, 2);
    tcase_add_loop_test(tc, test_interleaved_outputs_overlap_exactly, 0, 2);
    tcase_add_test(tc, test_buffer_too_small);
    tcase_add_test(tc, test_bad_desc_and_plan);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_memory_budget);
    tcase_add_test(tc, test_scratch_is_linear);
    suite_add_tcase(s, tc);
    tc = tcase_create("calls");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_wait_list_and_event);
    tcase_add_test(tc, test_out_of_order_queue);
    tcase_add_test(tc, test_host_form);
    tcase_add_test(tc, test_finite_differences);
    suite_add_tcase(s, tc);
    tc = tcase_create("planner");
    tcase_add_test(tc, test_planner_fits_every_device);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(backward_api_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* test_planner.c: the tile planner as a pure function, on synthetic devices (no OpenCL device needed). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"

static const size_t local_sizes[] = {16 * 1024, 32 * 1024, 48 * 1024, 64 * 1024, 1024 * 1024};
static const size_t group_sizes[] = {64, 256, 1024, 4096};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static flashcl_device_limits device(size_t local_bytes, size_t max_group) {
    flashcl_device_limits l = {sizeof(flashcl_device_limits), local_bytes, max_group, 1, 8, 0};
    return l;
}

/* 1 if some power-of-two tile shape passes flashcl_plan_check: the space the
 * planner searches, so a planner failure must mean this is 0. */
static int any_plan_fits(const flashcl_device_limits *limits, flashcl_pass pass, int head_dim, flashcl_dtype dtype) {
    for (int bq = 1; bq <= 1024; bq *= 2)
        for (int bk = 1; bk <= 1024; bk *= 2)
            for (int tq = 1; tq <= bq; tq *= 2)
                for (int tk = 1; tk <= bk; tk *= 2) {
                    flashcl_plan p = {bq, bk, tq, tk, 0, 0};
                    if (flashcl_plan_check(limits, pass, head_dim, dtype, &p, NULL, 0) == FLASHCL_SUCCESS) return 1;
                }
    return 0;
}

/* Every plan the planner picks passes its own check, fits the device and
 * divides evenly; where it finds none, none exists. Run per pass and dtype. */
static void check_all_choices(flashcl_pass pass, flashcl_dtype dtype) {
    int found = 0, none = 0;
    for (int m = 0; m < COUNT(local_sizes); ++m)
        for (int g = 0; g < COUNT(group_sizes); ++g) {
            const flashcl_device_limits limits = device(local_sizes[m], group_sizes[g]);
            for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d)
                for (int causal = 0; causal < 2; ++causal) {
                    flashcl_plan plan;
                    memset(&plan, 0xff, sizeof plan);
                    flashcl_status s = flashcl_plan_choose(&limits, pass, d, dtype, causal, &plan);
                    if (s == FLASHCL_ERROR_PLAN) {
                        ck_assert_msg(!any_plan_fits(&limits, pass, d, dtype),
                                      "pass %d D %d on %zu B / %zu: the planner found nothing but a plan fits", pass,
                                      d, local_sizes[m], group_sizes[g]);
                        ++none;
                        continue;
                    }
                    ck_assert_msg(s == FLASHCL_SUCCESS, "pass %d D %d: status %s", pass, d,
                                  flashcl_status_string(s));
                    ++found;
                    flashcl_plan again = plan;
                    char reason[256];
                    ck_assert_msg(flashcl_plan_check(&limits, pass, d, dtype, &again, reason, sizeof reason) ==
                                      FLASHCL_SUCCESS,
                                  "pass %d D %d on %zu B / %zu: chosen plan %dx%d (%dx%d) fails its check: %s", pass,
                                  d, local_sizes[m], group_sizes[g], plan.block_q, plan.block_k, plan.threads_q,
                                  plan.threads_k, reason);
                    ck_assert_msg(again.local_mem_bytes == plan.local_mem_bytes &&
                                      again.work_group_size == plan.work_group_size,
                                  "the planner's derived fields differ from flashcl_plan_check's");
                    ck_assert_uint_le(plan.local_mem_bytes, limits.local_mem_bytes);
                    ck_assert_uint_ge(plan.local_mem_bytes, 1);
                    ck_assert_uint_le(plan.work_group_size, limits.max_work_group_size);
                    ck_assert_uint_eq(plan.work_group_size, (size_t)plan.threads_q * (size_t)plan.threads_k);
                    ck_assert_int_eq(plan.block_q % plan.threads_q, 0);
                    ck_assert_int_eq(plan.block_k % plan.threads_k, 0);
                }
        }
    ck_assert_int_gt(found, 0);
    fprintf(stderr, "pass %d dtype %d: %d problems planned, %d with no possible plan\n", (int)pass, (int)dtype,
            found, none);
}

START_TEST(test_forward_choices_fit) { check_all_choices(FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F32); }
END_TEST

START_TEST(test_forward_choices_fit_half) { check_all_choices(FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F16); }
END_TEST

START_TEST(test_backward_choices_fit) { check_all_choices(FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F32); }
END_TEST

/* The project's two devices (32 KiB and 1 MiB of local memory) and the
 * common GPU sizes must run the forward pass at every head dim. */
START_TEST(test_forward_always_plans_from_32k) {
    for (int m = 1; m < COUNT(local_sizes); ++m)
        for (int g = 0; g < COUNT(group_sizes); ++g) {
            const flashcl_device_limits limits = device(local_sizes[m], group_sizes[g]);
            for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d) {
                flashcl_plan plan;
                ck_assert_msg(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, d, FLASHCL_DTYPE_F32, 0, &plan) ==
                                  FLASHCL_SUCCESS,
                              "no forward plan for D %d on %zu B / %zu", d, local_sizes[m], group_sizes[g]);
            }
        }
}
END_TEST

/* More local memory buys larger resident query blocks (fewer K/V re-reads). */
START_TEST(test_choice_follows_local_memory) {
    static const int dims[] = {64, 128};
    for (int i = 0; i < COUNT(dims); ++i) {
        const flashcl_device_limits small = device(32 * 1024, 1024), large = device(1024 * 1024, 1024);
        flashcl_plan ps, pl;
        ck_assert_int_eq(flashcl_plan_choose(&small, FLASHCL_PASS_FORWARD, dims[i], FLASHCL_DTYPE_F32, 0, &ps),
                         FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_plan_choose(&large, FLASHCL_PASS_FORWARD, dims[i], FLASHCL_DTYPE_F32, 0, &pl),
                         FLASHCL_SUCCESS);
        ck_assert_msg(pl.block_q > ps.block_q, "D %d: block_q %d on 1 MiB is not larger than %d on 32 KiB", dims[i],
                      pl.block_q, ps.block_q);
        ck_assert_uint_gt(pl.local_mem_bytes, ps.local_mem_bytes);
    }
}
END_TEST

/* NVIDIA's static local memory past the reported size (static_local_mem_bytes): flashcl_plan_check takes forward
 * and backward plans up to it (both kernels' arrays are static), and flashcl_plan_choose answers as if it were not
 * there (larger blocks come only from measurements: the tuned plans). */
START_TEST(test_static_local_memory) {
    flashcl_device_limits reported = device(48 * 1024, 1024), nvidia = reported;
    nvidia.static_local_mem_bytes = 196 * 1024;
    flashcl_plan big = {64, 32, 16, 8, 0, 0}; /* d128 float: 79 KB, past 48 KiB, within 64 and 196 */
    char why[192];
    ck_assert_int_eq(flashcl_plan_check(&reported, FLASHCL_PASS_FORWARD, 128, FLASHCL_DTYPE_F32, &big, why, sizeof why),
                     FLASHCL_ERROR_PLAN);
    ck_assert_ptr_nonnull(strstr(why, "local memory"));
    ck_assert_int_eq(flashcl_plan_check(&nvidia, FLASHCL_PASS_FORWARD, 128, FLASHCL_DTYPE_F32, &big, why, sizeof why),
                     FLASHCL_SUCCESS);
    ck_assert_uint_gt(big.local_mem_bytes, 48 * 1024);
    ck_assert_uint_le(big.local_mem_bytes, 196 * 1024);
    /* Past the static size too: refused. */
    nvidia.static_local_mem_bytes = 72 * 1024;
    ck_assert_int_eq(flashcl_plan_check(&nvidia, FLASHCL_PASS_FORWARD, 128, FLASHCL_DTYPE_F32, &big, NULL, 0),
                     FLASHCL_ERROR_PLAN);
    nvidia.static_local_mem_bytes = 196 * 1024;
    /* The backward: d128 float with 64 resident rows, 82 KB. */
    flashcl_plan backward = {8, 64, 8, 16, 0, 0};
    ck_assert_int_eq(flashcl_plan_check(&reported, FLASHCL_PASS_BACKWARD, 128, FLASHCL_DTYPE_F32, &backward, why,
                                        sizeof why),
                     FLASHCL_ERROR_PLAN);
    ck_assert_ptr_nonnull(strstr(why, "local memory"));
    ck_assert_int_eq(flashcl_plan_check(&nvidia, FLASHCL_PASS_BACKWARD, 128, FLASHCL_DTYPE_F32, &backward, why,
                                        sizeof why),
                     FLASHCL_SUCCESS);
    ck_assert_uint_gt(backward.local_mem_bytes, 48 * 1024);
    ck_assert_uint_le(backward.local_mem_bytes, 196 * 1024);
    nvidia.static_local_mem_bytes = 72 * 1024;
    ck_assert_int_eq(flashcl_plan_check(&nvidia, FLASHCL_PASS_BACKWARD, 128, FLASHCL_DTYPE_F32, &backward, NULL, 0),
                     FLASHCL_ERROR_PLAN);
    nvidia.static_local_mem_bytes = 196 * 1024;
    for (int pass = FLASHCL_PASS_FORWARD; pass <= FLASHCL_PASS_BACKWARD; ++pass) {
        flashcl_plan a, b;
        ck_assert_int_eq(flashcl_plan_choose(&reported, (flashcl_pass)pass, 128, FLASHCL_DTYPE_F32, 0, &a),
                         FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_plan_choose(&nvidia, (flashcl_pass)pass, 128, FLASHCL_DTYPE_F32, 0, &b),
                         FLASHCL_SUCCESS);
        ck_assert(memcmp(&a, &b, sizeof a) == 0);
    }
}
END_TEST

/* The planner is a function: the same question, the same answer. */
START_TEST(test_choice_is_pure) {
    const flashcl_device_limits limits = device(48 * 1024, 256);
    flashcl_plan a, b;
    ck_assert_int_eq(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, 80, FLASHCL_DTYPE_F32, 1, &a), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, 80, FLASHCL_DTYPE_F32, 1, &b), FLASHCL_SUCCESS);
    ck_assert(memcmp(&a, &b, sizeof a) == 0);
}
END_TEST

/* Nothing fits: an error status, never a crash or a bogus plan. */
START_TEST(test_nothing_fits) {
    flashcl_plan plan;
    flashcl_device_limits tiny = device(256, 1024);
    ck_assert_int_eq(flashcl_plan_choose(&tiny, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_PLAN);
    ck_assert_int_eq(flashcl_plan_choose(&tiny, FLASHCL_PASS_BACKWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_PLAN);
    flashcl_device_limits no_groups = device(1024 * 1024, 0);
    ck_assert_int_eq(flashcl_plan_choose(&no_groups, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_PLAN);
    flashcl_device_limits zero_memory = device(0, 1024);
    ck_assert_int_eq(flashcl_plan_choose(&zero_memory, FLASHCL_PASS_FORWARD, 1, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_PLAN);
    const flashcl_device_limits ok = device(64 * 1024, 256);
    ck_assert_int_eq(flashcl_plan_choose(&ok, FLASHCL_PASS_FORWARD, 0, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_int_eq(flashcl_plan_choose(&ok, FLASHCL_PASS_FORWARD, 257, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_int_eq(flashcl_plan_choose(&ok, FLASHCL_PASS_FORWARD, 64, (flashcl_dtype)7, 0, &plan),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_plan_choose(NULL, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_plan_choose(&ok, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

typedef struct bad_plan {
    flashcl_plan plan;
    int head_dim;
    const char *reason_word; /* a word the reason must contain */
} bad_plan;

/* Plans that violate one constraint each, on a 32 KiB / 256 device. */
static const bad_plan bad_plans[] = {
    {{0, 16, 1, 4, 0, 0}, 64, "1..1024"},
    {{16, 16, 4, 0, 0, 0}, 64, "1..1024"},
    {{2048, 16, 16, 4, 0, 0}, 64, "1..1024"},
    {{16, 12, 4, 3, 0, 0}, 64, "power of two"},
    {{18, 16, 4, 4, 0, 0}, 64, "threads_q"},
    {{16, 18, 4, 4, 0, 0}, 64, "threads_k"},
    {{64, 64, 32, 16, 0, 0}, 64, "work-group"},
    {{4, 4, 4, 1, 0, 0}, 64, "columns"},
    {{64, 16, 2, 8, 0, 0}, 64, "register"},
    {{64, 16, 16, 16, 0, 0}, 256, "local memory"},
};

START_TEST(test_check_rejects_bad_plans) {
    const flashcl_device_limits limits = device(32 * 1024, 256);
    const bad_plan *b = &bad_plans[_i];
    flashcl_plan p = b->plan;
    char reason[256] = "";
    flashcl_status s = flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, b->head_dim, FLASHCL_DTYPE_F32, &p, reason,
                                          sizeof reason);
    ck_assert_msg(s == FLASHCL_ERROR_PLAN, "bad plan %d accepted (status %s)", _i, flashcl_status_string(s));
    ck_assert_msg(strstr(reason, b->reason_word) != NULL, "bad plan %d: reason \"%s\" does not mention \"%s\"", _i,
                  reason, b->reason_word);
    /* Without a reason buffer, and with a tiny one, the same verdict. */
    p = b->plan;
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, b->head_dim, FLASHCL_DTYPE_F32, &p, NULL, 0),
                     FLASHCL_ERROR_PLAN);
    char small[4] = "xyz";
    p = b->plan;
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, b->head_dim, FLASHCL_DTYPE_F32, &p, small,
                                        sizeof small),
                     FLASHCL_ERROR_PLAN);
    ck_assert_uint_lt(strlen(small), sizeof small);
}
END_TEST

/* A good plan is accepted with its derived fields filled, and the local
 * memory it needs grows with each block. */
START_TEST(test_check_fills_derived_fields) {
    const flashcl_device_limits limits = device(1024 * 1024, 1024);
    flashcl_plan p = {32, 16, 8, 8, 0, 0};
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &p, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_uint_eq(p.work_group_size, 64);
    ck_assert_uint_gt(p.local_mem_bytes, (32 + 16) * 64 * sizeof(float));
    flashcl_plan wider_q = {64, 16, 16, 8, 0, 0}, wider_k = {32, 32, 8, 8, 0, 0};
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &wider_q, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &wider_k, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_uint_gt(wider_q.local_mem_bytes, p.local_mem_bytes);
    ck_assert_uint_gt(wider_k.local_mem_bytes, p.local_mem_bytes);
    /* The check of a plan does not depend on what the caller put in the derived fields. */
    flashcl_plan lying = {32, 16, 8, 8, 1, 1};
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &lying, NULL, 0),
                     FLASHCL_SUCCESS);
    ck_assert_uint_eq(lying.local_mem_bytes, p.local_mem_bytes);
    /* Arguments outside the plan. */
    char reason[128];
    ck_assert_int_eq(flashcl_plan_check(NULL, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &p, reason, sizeof reason),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_plan_check(&limits, FLASHCL_PASS_FORWARD, 300, FLASHCL_DTYPE_F32, &p, reason,
                                        sizeof reason),
                     FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_int_eq(flashcl_plan_check(&limits, (flashcl_pass)5, 64, FLASHCL_DTYPE_F32, &p, reason, sizeof reason),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(reason[0] != '\0');
}
END_TEST

static Suite *planner_suite(void) {
    Suite *s = suite_create("planner");
    TCase *tc = tcase_create("planner");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_forward_choices_fit);
    tcase_add_test(tc, test_forward_choices_fit_half);
    tcase_add_test(tc, test_backward_choices_fit);
    tcase_add_test(tc, test_forward_always_plans_from_32k);
    tcase_add_test(tc, test_choice_follows_local_memory);
    tcase_add_test(tc, test_choice_is_pure);
    tcase_add_test(tc, test_static_local_memory);
    tcase_add_test(tc, test_nothing_fits);
    tcase_add_loop_test(tc, test_check_rejects_bad_plans, 0, COUNT(bad_plans));
    tcase_add_test(tc, test_check_fills_derived_fields);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(planner_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* test_struct_sizes_device.c: the struct_size protocol through the public calls that need a context: the
 * README's path (structs from the _init functions) runs as before; a struct from a newer header runs the
 * same when its unknown tail is zero and is refused when it is not; structs without a version are refused
 * with a message before anything is enqueued; filled structs are written up to the caller's size. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { B = 1, H = 2, SQ = 5, SK = 9, D = 8 };
#define Q_COUNT (B * H * SQ * D)
#define KV_COUNT (B * H * SK * D)

typedef struct inputs {
    float q[Q_COUNT], k[KV_COUNT], v[KV_COUNT], dout[Q_COUNT];
} inputs;

static void fill(inputs *in) {
    for (int i = 0; i < Q_COUNT; ++i) in->q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < KV_COUNT; ++i) in->k[i] = (float)((i * 11) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < KV_COUNT; ++i) in->v[i] = (float)((i * 7) % 19) / 19.0f - 0.5f;
    for (int i = 0; i < Q_COUNT; ++i) in->dout[i] = (float)((i * 5) % 23) / 23.0f - 0.5f;
}

/* A newer header's structs as this library sees them: its own fields, then ones it does not know. */
typedef struct newer_desc {
    flashcl_attention_desc known;
    uint64_t added;
} newer_desc;
typedef struct newer_stats {
    flashcl_call_stats known;
    uint64_t added[2];
} newer_stats;
typedef struct newer_limits {
    flashcl_device_limits known;
    uint64_t added;
} newer_limits;

/* The README's path, unchanged: _init, a forward, a backward, the stats. */
START_TEST(readme_path_runs) {
    flashcl_context *ctx = ts_context();
    static inputs in;
    fill(&in);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, H, SQ, SK, D);
    desc.causal = 1;
    float o[Q_COUNT], lse[B * H * SQ], dq[Q_COUNT], dk[KV_COUNT], dv[KV_COUNT];
    ck_assert_msg(flashcl_forward_host(ctx, &desc, FLASHCL_LAYOUT_BSHD, in.q, in.k, in.v, o, lse) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_host(ctx, &desc, FLASHCL_LAYOUT_BSHD, in.q, in.k, in.v, in.dout, NULL, NULL, dq,
                                        dk, dv) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_uint_eq(stats.struct_size, sizeof stats);
    ck_assert_int_eq(stats.pass, FLASHCL_PASS_BACKWARD);
    flashcl_device_limits limits;
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    ck_assert_uint_eq(limits.struct_size, sizeof limits);
    ck_assert_uint_gt(limits.local_mem_bytes, 0);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(newer_desc_with_zero_tail_gives_same_bits) {
    flashcl_context *ctx = ts_context();
    static inputs in;
    fill(&in);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, H, SQ, SK, D);
    newer_desc newer;
    flashcl_attention_desc_init_sized(&newer.known, sizeof newer, B, H, SQ, SK, D);
    ck_assert(newer.added == 0);
    float o[Q_COUNT], lse[B * H * SQ], o2[Q_COUNT], lse2[B * H * SQ];
    ck_assert_int_eq(flashcl_forward_host(ctx, &desc, FLASHCL_LAYOUT_BHSD, in.q, in.k, in.v, o, lse),
                     FLASHCL_SUCCESS);
    ck_assert_msg(flashcl_forward_host(ctx, &newer.known, FLASHCL_LAYOUT_BHSD, in.q, in.k, in.v, o2, lse2) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(memcmp(o, o2, sizeof o), 0);
    ck_assert_int_eq(memcmp(lse, lse2, sizeof lse), 0);

    newer.added = 42; /* a field this library does not have, asking for something */
    ck_assert_int_eq(flashcl_forward_host(ctx, &newer.known, FLASHCL_LAYOUT_BHSD, in.q, in.k, in.v, o2, lse2),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "newer flashcl header"), "%s", flashcl_last_error(ctx));
    flashcl_context_free(ctx);
}
END_TEST

/* Structs without a version (zero-filled, or garbage in struct_size) are refused by every call that reads
 * one, with the struct's name, before anything is enqueued. */
START_TEST(unversioned_structs_are_refused) {
    flashcl_context *ctx = ts_context();
    static inputs in;
    fill(&in);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, H, SQ, SK, D);
    desc.struct_size = 0;
    float o[Q_COUNT], lse[B * H * SQ], dq[Q_COUNT], dk[KV_COUNT], dv[KV_COUNT];
    ck_assert_int_eq(flashcl_forward_host(ctx, &desc, FLASHCL_LAYOUT_BHSD, in.q, in.k, in.v, o, lse),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "flashcl_attention_desc.struct_size is 0"));
    ck_assert_int_eq(flashcl_backward_host(ctx, &desc, FLASHCL_LAYOUT_BHSD, in.q, in.k, in.v, in.dout, NULL, NULL,
                                           dq, dk, dv),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "flashcl_attention_desc.struct_size is 0"));
    double bytes;
    desc.struct_size = 12345;
    ck_assert_int_eq(flashcl_predict_global_bytes(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_FORWARD, &desc, &bytes),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "struct_size is 12345"));

    flashcl_attention_desc_init(&desc, B, H, SQ, SK, D);
    flashcl_attention_extras extras;
    memset(&extras, 0, sizeof extras); /* not from flashcl_attention_extras_init */
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, &extras, &stats),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(ctx), "flashcl_attention_extras.struct_size is 0") &&
                      strstr(flashcl_last_error(ctx), "flashcl_attention_extras_init"),
                  "%s", flashcl_last_error(ctx));
    flashcl_attention_extras_init(&extras);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, &extras, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_last_call_stats_sized(ctx, &stats, 7), FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_context_free(ctx);
}
END_TEST

/* Filled structs from a newer header: the known part is what the plain struct gets, the tail is zeroed. */
START_TEST(newer_filled_structs_get_zero_tail) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, H, SQ, SK, D);
    flashcl_call_stats plain;
    newer_stats newer;
    memset(&newer, 0xee, sizeof newer);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &plain), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_explain_call_sized(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &newer.known, sizeof newer),
                     FLASHCL_SUCCESS);
    ck_assert_uint_eq(newer.known.struct_size, sizeof newer);
    newer.known.struct_size = plain.struct_size;
    ck_assert_int_eq(memcmp(&newer.known, &plain, sizeof plain), 0);
    ck_assert(newer.added[0] == 0 && newer.added[1] == 0);

    flashcl_device_limits limits;
    newer_limits more;
    memset(&more, 0xee, sizeof more);
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_limits_sized(ctx, &more.known, sizeof more), FLASHCL_SUCCESS);
    ck_assert_uint_eq(more.known.struct_size, sizeof more);
    ck_assert_uint_eq(more.known.local_mem_bytes, limits.local_mem_bytes);
    ck_assert_uint_eq(more.known.compute_units, limits.compute_units);
    ck_assert(more.added == 0);
    /* Such a struct is then accepted as planner input (its tail is zero). */
    flashcl_plan plan;
    ck_assert_int_eq(flashcl_plan_choose(&more.known, FLASHCL_PASS_FORWARD, D, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_SUCCESS);
    flashcl_context_free(ctx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("struct_sizes_device");
    TCase *c = tcase_create("public");
    tcase_set_timeout(c, TS_CASE_TIMEOUT);
    tcase_add_test(c, readme_path_runs);
    tcase_add_test(c, newer_desc_with_zero_tail_gives_same_bits);
    tcase_add_test(c, unversioned_structs_are_refused);
    tcase_add_test(c, newer_filled_structs_get_zero_tail);
    suite_add_tcase(s, c);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

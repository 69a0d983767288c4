/* test_struct_sizes.c: the struct_size protocol without an OpenCL device. The _init functions give what they
 * gave before plus struct_size; sizes that are no version are refused with a message; and, through tables
 * with an older version made up for the test (flashcl has released only one so far), an older, smaller
 * struct is read only up to its size with this library's defaults for the rest, and written only up to it. */
#include <check.h>
#include <stddef.h>
#include <string.h>

#include "struct_abi.h"

/* ---- today's _init path ------------------------------------------------- */

START_TEST(init_functions_set_size_and_defaults) {
    flashcl_attention_desc desc;
    memset(&desc, 0x5a, sizeof desc);
    flashcl_attention_desc_init(&desc, 2, 4, 24, 40, 16);
    ck_assert_uint_eq(desc.struct_size, sizeof desc);
    ck_assert_int_eq(desc.batch, 2);
    ck_assert_int_eq(desc.heads_q, 4);
    ck_assert_int_eq(desc.heads_kv, 4);
    ck_assert_int_eq(desc.seqlen_q, 24);
    ck_assert_int_eq(desc.seqlen_k, 40);
    ck_assert_int_eq(desc.head_dim, 16);
    ck_assert_int_eq(desc.dtype, FLASHCL_DTYPE_F32);
    ck_assert(desc.scale == 0.0f && desc.dropout_p == 0.0f);
    ck_assert_int_eq(desc.causal, 0);
    ck_assert_int_eq(desc.sliding_window, 0);
    ck_assert_int_eq(desc.window_left, -1);
    ck_assert_int_eq(desc.window_right, -1);
    ck_assert(desc.dropout_seed == 0 && desc.dropout_offset == 0);

    flashcl_attention_extras extras;
    memset(&extras, 0x5a, sizeof extras);
    flashcl_attention_extras_init(&extras);
    ck_assert_uint_eq(extras.struct_size, sizeof extras);
    ck_assert_ptr_null(extras.block_mask);
    ck_assert_ptr_null(extras.cu_seqlens_q_host);
    ck_assert_int_eq(extras.block_size, 0);

    flashcl_context_options options;
    memset(&options, 0x5a, sizeof options);
    flashcl_context_options_init(&options);
    ck_assert_uint_eq(options.struct_size, sizeof options);
    ck_assert_ptr_null(options.device);
    ck_assert_ptr_null(options.kernel_dir);
    ck_assert_int_eq(options.enable_profiling, 0);

    flashcl_device_limits limits;
    memset(&limits, 0x5a, sizeof limits);
    flashcl_device_limits_init(&limits);
    ck_assert_uint_eq(limits.struct_size, sizeof limits);
    ck_assert_uint_eq(limits.local_mem_bytes, 0);
    ck_assert_uint_eq(limits.compute_units, 0);
}
END_TEST

/* A desc from _init passes the import unchanged. */
START_TEST(init_desc_imports_unchanged) {
    flashcl_attention_desc desc, full;
    flashcl_attention_desc_init(&desc, 1, 8, 3, 1000, 64);
    desc.heads_kv = 2;
    desc.causal = 1;
    const flashcl_attention_desc *use = &desc;
    ck_assert_int_eq(flashcl_import_desc(NULL, &use, &full), FLASHCL_SUCCESS);
    ck_assert_ptr_eq(use, &full);
    ck_assert_int_eq(memcmp(&full, &desc, sizeof desc), 0);
}
END_TEST

/* ---- sizes that are no version ------------------------------------------ */

START_TEST(zero_size_is_refused_with_message) {
    flashcl_attention_desc desc, full;
    memset(&desc, 0, sizeof desc);
    desc.batch = desc.heads_q = desc.heads_kv = desc.seqlen_q = desc.seqlen_k = 1;
    desc.head_dim = 8;
    const flashcl_attention_desc *use = &desc;
    ck_assert_int_eq(flashcl_import_desc(NULL, &use, &full), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(use, &desc);
    ck_assert_msg(strstr(flashcl_last_error(NULL), "flashcl_attention_desc.struct_size is 0") &&
                      strstr(flashcl_last_error(NULL), "flashcl_attention_desc_init"),
                  "%s", flashcl_last_error(NULL));
}
END_TEST

START_TEST(unknown_sizes_are_refused_with_message) {
    const size_t bad[] = {1, sizeof(size_t), sizeof(flashcl_attention_desc) - 4, FLASHCL_STRUCT_SIZE_LIMIT + 1,
                          (size_t)-1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        flashcl_attention_desc desc, full;
        flashcl_attention_desc_init(&desc, 1, 1, 1, 1, 8);
        desc.struct_size = bad[i];
        const flashcl_attention_desc *use = &desc;
        ck_assert_int_eq(flashcl_import_desc(NULL, &use, &full), FLASHCL_ERROR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(flashcl_last_error(NULL), "no size of flashcl_attention_desc"), "%zu: %s", bad[i],
                      flashcl_last_error(NULL));
    }
    /* The _init_sized functions refuse them too, and leave a struct every call refuses. */
    _Alignas(flashcl_attention_extras) unsigned char bytes[sizeof(flashcl_attention_extras) + 16];
    memset(bytes, 0x77, sizeof bytes);
    ck_assert_int_eq(flashcl_attention_extras_init_sized((flashcl_attention_extras *)(void *)bytes, 24),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "flashcl_attention_extras.struct_size is 24"));
    size_t recorded;
    memcpy(&recorded, bytes, sizeof recorded);
    ck_assert_uint_eq(recorded, 24);
    ck_assert_int_eq(bytes[23], 0);
    ck_assert_int_eq(bytes[24], 0x77); /* nothing past the stated size */
    ck_assert_int_eq(flashcl_attention_desc_init_sized(NULL, sizeof(flashcl_attention_desc), 1, 1, 1, 1, 8),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

/* The public context-free calls refuse a bad struct_size before doing anything else. */
START_TEST(public_calls_refuse_bad_sizes) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.struct_size = 3;
    flashcl_context *ctx = (flashcl_context *)&options; /* must be overwritten with NULL */
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "flashcl_context_options.struct_size is 3"));

    /* A positional initializer written for the old layout puts local_mem_bytes into struct_size. */
    const flashcl_device_limits old_style = {48 * 1024, 1024, 32, 132, 0, 0};
    flashcl_plan plan;
    ck_assert_int_eq(flashcl_plan_choose(&old_style, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "flashcl_device_limits.struct_size is 49152"));
    char reason[512];
    flashcl_plan p = {16, 16, 4, 4, 0, 0};
    ck_assert_int_eq(flashcl_plan_check(&old_style, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &p, reason,
                                        sizeof reason),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(reason, "flashcl_device_limits.struct_size is 49152"), "%s", reason);

    flashcl_device_limits limits;
    flashcl_device_limits_init(&limits);
    limits.local_mem_bytes = 48 * 1024;
    limits.max_work_group_size = 1024;
    limits.preferred_work_group_multiple = 32;
    limits.compute_units = 132;
    ck_assert_int_eq(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &plan),
                     FLASHCL_SUCCESS);
}
END_TEST

/* ---- a newer header: a larger struct ------------------------------------ */

/* What a newer header's desc looks like to this library: the same fields, then one it does not know. */
typedef struct newer_desc {
    flashcl_attention_desc known;
    uint64_t added;
} newer_desc;

START_TEST(newer_struct_with_zero_tail_is_read) {
    newer_desc n;
    memset(&n, 0, sizeof n);
    flashcl_attention_desc_init_sized(&n.known, sizeof n, 2, 4, 8, 8, 32);
    ck_assert_uint_eq(n.known.struct_size, sizeof n);
    n.known.causal = 1;
    flashcl_attention_desc full;
    const flashcl_attention_desc *use = &n.known;
    ck_assert_int_eq(flashcl_import_desc(NULL, &use, &full), FLASHCL_SUCCESS);
    ck_assert_uint_eq(full.struct_size, sizeof full);
    ck_assert_int_eq(full.causal, 1);
    ck_assert_int_eq(full.head_dim, 32);
    ck_assert_int_eq(full.window_left, -1);
}
END_TEST

START_TEST(newer_struct_with_unknown_field_set_is_refused) {
    newer_desc n;
    memset(&n, 0, sizeof n);
    flashcl_attention_desc_init_sized(&n.known, sizeof n, 2, 4, 8, 8, 32);
    n.added = 1;
    flashcl_attention_desc full;
    const flashcl_attention_desc *use = &n.known;
    ck_assert_int_eq(flashcl_import_desc(NULL, &use, &full), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(flashcl_last_error(NULL), "from a newer flashcl header") &&
                      strstr(flashcl_last_error(NULL), "is not zero"),
                  "%s", flashcl_last_error(NULL));
}
END_TEST

/* A filled struct from a newer header: the known part written, the unknown tail zeroed, struct_size kept. */
typedef struct newer_stats {
    flashcl_call_stats known;
    uint64_t added[3];
} newer_stats;

START_TEST(newer_struct_is_written_with_zero_tail) {
    flashcl_call_stats full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.kv_splits = 7;
    strcpy(full.program, "forward.cl");
    newer_stats n;
    memset(&n, 0xee, sizeof n);
    ck_assert_int_eq(flashcl_struct_export(NULL, &flashcl_abi_call_stats, &full, &n, sizeof n), FLASHCL_SUCCESS);
    ck_assert_uint_eq(n.known.struct_size, sizeof n);
    ck_assert_int_eq(n.known.kv_splits, 7);
    ck_assert_str_eq(n.known.program, "forward.cl");
    for (int i = 0; i < 3; ++i) ck_assert(n.added[i] == 0);
}
END_TEST

/* ---- an older header: a smaller struct ---------------------------------- */

/* flashcl_attention_desc as if version 1 had ended before dropout (version 2 adding dropout_p, dropout_seed
 * and dropout_offset), with this library's real defaults. */
static flashcl_struct_abi desc_with_older_version(size_t versions[2]) {
    flashcl_struct_abi abi = flashcl_abi_attention_desc;
    versions[0] = offsetof(flashcl_attention_desc, dropout_p);
    versions[1] = sizeof(flashcl_attention_desc);
    abi.versions = versions;
    abi.version_count = 2;
    return abi;
}

START_TEST(older_struct_is_read_up_to_its_size_with_defaults) {
    size_t versions[2];
    const flashcl_struct_abi abi = desc_with_older_version(versions);
    /* The older caller's struct ends at dropout_p; what lies after it in memory is not its own. */
    unsigned char memory[sizeof(flashcl_attention_desc)];
    memset(memory, 0xab, sizeof memory);
    flashcl_attention_desc older;
    flashcl_attention_desc_init(&older, 3, 6, 5, 9, 16);
    older.heads_kv = 3;
    older.sliding_window = 1;
    older.window_left = 4;
    older.struct_size = versions[0];
    memcpy(memory, &older, versions[0]);
    flashcl_attention_desc full;
    ck_assert_int_eq(flashcl_struct_import(NULL, &abi, memory, &full), FLASHCL_SUCCESS);
    ck_assert_uint_eq(full.struct_size, sizeof full);
    ck_assert_int_eq(full.batch, 3);
    ck_assert_int_eq(full.heads_kv, 3);
    ck_assert_int_eq(full.window_left, 4);
    ck_assert_int_eq(full.window_right, -1);
    /* The fields past its size have this library's defaults, not the 0xab beyond it. */
    ck_assert(full.dropout_p == 0.0f);
    ck_assert(full.dropout_seed == 0 && full.dropout_offset == 0);
    /* A size between the versions is still refused. */
    older.struct_size = versions[0] + 4;
    memcpy(memory, &older, sizeof older);
    ck_assert_int_eq(flashcl_struct_import(NULL, &abi, memory, &full), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(NULL), "(version 1)"));
}
END_TEST

START_TEST(older_struct_is_written_up_to_its_size) {
    flashcl_struct_abi abi = flashcl_abi_call_stats;
    const size_t versions[2] = {offsetof(flashcl_call_stats, kv_splits), sizeof(flashcl_call_stats)};
    abi.versions = versions;
    abi.version_count = 2;
    flashcl_call_stats full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.kernel = FLASHCL_KERNEL_DECODE;
    full.kv_splits = 5;
    unsigned char memory[sizeof(flashcl_call_stats)];
    memset(memory, 0xcd, sizeof memory);
    ck_assert_int_eq(flashcl_struct_export(NULL, &abi, &full, memory, versions[0]), FLASHCL_SUCCESS);
    flashcl_call_stats seen;
    memcpy(&seen, memory, sizeof seen);
    ck_assert_uint_eq(seen.struct_size, versions[0]);
    ck_assert_int_eq(seen.kernel, FLASHCL_KERNEL_DECODE);
    for (size_t i = versions[0]; i < sizeof memory; ++i) ck_assert_int_eq(memory[i], 0xcd);
}
END_TEST

int main(void) {
    Suite *s = suite_create("struct_sizes");
    TCase *init = tcase_create("init");
    tcase_add_test(init, init_functions_set_size_and_defaults);
    tcase_add_test(init, init_desc_imports_unchanged);
    suite_add_tcase(s, init);
    TCase *refused = tcase_create("refused");
    tcase_add_test(refused, zero_size_is_refused_with_message);
    tcase_add_test(refused, unknown_sizes_are_refused_with_message);
    tcase_add_test(refused, public_calls_refuse_bad_sizes);
    suite_add_tcase(s, refused);
    TCase *newer = tcase_create("newer");
    tcase_add_test(newer, newer_struct_with_zero_tail_is_read);
    tcase_add_test(newer, newer_struct_with_unknown_field_set_is_refused);
    tcase_add_test(newer, newer_struct_is_written_with_zero_tail);
    suite_add_tcase(s, newer);
    TCase *older = tcase_create("older");
    tcase_add_test(older, older_struct_is_read_up_to_its_size_with_defaults);
    tcase_add_test(older, older_struct_is_written_up_to_its_size);
    suite_add_tcase(s, older);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

/* test_sweep_split.c: the rule that shares a sweep's pairs between the two CPU implementations
 * (support_case.h, FLASHCL_TEST_SWEEP). If it broke, the device suites would pass while running less than they
 * say, so it is checked here on its own: unset runs every pair; "diagonal" and "complement" run disjoint sets whose
 * union is every pair; where the variant follows the case each side still meets every variant; the older
 * ts_sweep_takes_variant keeps running every pair outside "diagonal". */
#include <check.h>
#include <stdlib.h>

#include "support_case.h"

enum { CASES = 12, MAX_VARIANTS = 4 };

/* taken[i][v] under the given FLASHCL_TEST_SWEEP value (NULL: unset). */
static void takes(const char *mode, int variants, int taken[CASES][MAX_VARIANTS]) {
    if (mode)
        ck_assert_int_eq(setenv("FLASHCL_TEST_SWEEP", mode, 1), 0);
    else
        ck_assert_int_eq(unsetenv("FLASHCL_TEST_SWEEP"), 0);
    for (int i = 0; i < CASES; ++i)
        for (int v = 0; v < variants; ++v) taken[i][v] = ts_split_takes(i, v, variants);
}

START_TEST(split_partitions_every_pair) {
    const int variants = 2 + _i; /* 2, 3, 4 */
    int all[CASES][MAX_VARIANTS], diagonal[CASES][MAX_VARIANTS], complement[CASES][MAX_VARIANTS];
    takes(NULL, variants, all);
    takes("diagonal", variants, diagonal);
    takes("complement", variants, complement);
    int seen_diagonal[MAX_VARIANTS] = {0}, seen_complement[MAX_VARIANTS] = {0};
    for (int i = 0; i < CASES; ++i)
        for (int v = 0; v < variants; ++v) {
            ck_assert_int_eq(all[i][v], 1);
            ck_assert_msg(diagonal[i][v] + complement[i][v] == 1, "pair (%d, %d) of %d runs %d times", i, v, variants,
                          diagonal[i][v] + complement[i][v]);
            ck_assert_int_eq(diagonal[i][v], i % variants == v);
            seen_diagonal[v] += diagonal[i][v];
            seen_complement[v] += complement[i][v];
        }
    for (int v = 0; v < variants; ++v) {
        ck_assert_msg(seen_diagonal[v] > 0, "variant %d never runs on the diagonal side", v);
        ck_assert_msg(seen_complement[v] > 0, "variant %d never runs on the complement side", v);
    }
}
END_TEST

/* A list split as variants = 2, variant 0: even cases on one side, odd ones on the other. */
START_TEST(lists_alternate) {
    ck_assert_int_eq(setenv("FLASHCL_TEST_SWEEP", "diagonal", 1), 0);
    for (int i = 0; i < CASES; ++i) ck_assert_int_eq(ts_split_takes(i, 0, 2), i % 2 == 0);
    ck_assert_int_eq(setenv("FLASHCL_TEST_SWEEP", "complement", 1), 0);
    for (int i = 0; i < CASES; ++i) ck_assert_int_eq(ts_split_takes(i, 0, 2), i % 2 == 1);
}
END_TEST

/* ts_sweep_takes_variant thins only under "diagonal"; "complement" and unset run the whole sweep. */
START_TEST(older_rule_thins_only_the_diagonal) {
    static const char *const modes[] = {NULL, "complement", "anything else"};
    for (int m = 0; m < 3; ++m) {
        if (modes[m])
            ck_assert_int_eq(setenv("FLASHCL_TEST_SWEEP", modes[m], 1), 0);
        else
            ck_assert_int_eq(unsetenv("FLASHCL_TEST_SWEEP"), 0);
        for (int i = 0; i < CASES; ++i)
            for (int v = 0; v < 3; ++v) ck_assert_int_eq(ts_sweep_takes_variant(i, v, 3), 1);
    }
    ck_assert_int_eq(setenv("FLASHCL_TEST_SWEEP", "diagonal", 1), 0);
    for (int i = 0; i < CASES; ++i)
        for (int v = 0; v < 3; ++v) ck_assert_int_eq(ts_sweep_takes_variant(i, v, 3), i % 3 == v);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sweep_split");
    TCase *tc = tcase_create("rule");
    tcase_add_loop_test(tc, split_partitions_every_pair, 0, 3);
    tcase_add_test(tc, lists_alternate);
    tcase_add_test(tc, older_rule_thins_only_the_diagonal);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_set_fork_status(runner, CK_FORK); /* each case sets FLASHCL_TEST_SWEEP in a child of its own */
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

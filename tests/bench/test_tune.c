/* test_tune.c: runs `flashcl tune` on tiny problems and checks its ranking, JSON and refusals. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_records.h"
#include "run_program.h"

static const char *g_workdir;
static char **g_command; /* the tune command: program and "tune", NULL-terminated */

static int run_tune(const char *prefix, char *const *args) {
    char output_prefix[1024];
    snprintf(output_prefix, sizeof output_prefix, "%s/%s", g_workdir, prefix);
    return run_program(g_command, args, output_prefix, NULL);
}

static char *captured(const char *prefix, const char *stream) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s", g_workdir, prefix, stream);
    return read_text_file(path);
}

static const json_field *field(const json_record *r, const char *name) {
    const json_field *f = json_find(r, name);
    ck_assert_msg(f != NULL, "record lacks field %s", name);
    return f;
}

/* Two listed plans plus the default one: each is run, agrees with the
 * default plan, is timed and lands in the JSON; the table names the fastest
 * as a tuned_plans.c line. Forward and backward, odd sizes, causal. */
START_TEST(test_listed_plans_ranked) {
    static const char *const passes[] = {"forward", "backward"};
    const char *pass = passes[_i];
    char json[1024], prefix[64];
    snprintf(prefix, sizeof prefix, "listed_%s", pass);
    snprintf(json, sizeof json, "%s/%s.json", g_workdir, prefix);
    char *args[] = {"--pass", (char *)pass, "--head-dim", "24", "--seqlen", "37", "--batch", "1", "--heads", "2",
                    "--causal", "--repeat", "2", "--warmup", "0", "--plans", "16,16,4,8:32,16,8,4", "--json", json,
                    NULL};
    const int status = run_tune(prefix, args);
    char *out = captured(prefix, "out"), *err = captured(prefix, "err");
    ck_assert_msg(status == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", status, out, err);
    ck_assert_msg(strstr(out, "fastest: ") != NULL, "no fastest line:\n%s", out);
    ck_assert_msg(strstr(out, "src/tuned_plans.c entry: ") != NULL, "no tuned_plans line:\n%s", out);
    ck_assert_msg(strstr(out, "(default)") != NULL, "default plan not in the ranking:\n%s", out);

    json_record *records = NULL;
    char error[256];
    const int count = json_read_records(json, &records, error, sizeof error);
    ck_assert_msg(count >= 0, "%s: %s", json, error);
    ck_assert_msg(count == 2 || count == 3, "%d records (two listed plans plus the default one)", count);
    int seen[2] = {0, 0};
    for (int i = 0; i < count; ++i) {
        const json_record *r = &records[i];
        ck_assert_str_eq(field(r, "pass")->text, pass);
        ck_assert_int_eq(field(r, "ok")->type, JSON_BOOL);
        ck_assert_msg(field(r, "ok")->number == 1.0, "plan %d: %s", i, field(r, "status")->text);
        ck_assert_int_eq(field(r, "median_ms")->type, JSON_NUMBER);
        ck_assert(field(r, "median_ms")->number > 0.0);
        ck_assert(field(r, "max_abs_err")->number <= 1e-4);
        const int bq = (int)field(r, "block_q")->number, bk = (int)field(r, "block_k")->number;
        const int tq = (int)field(r, "threads_q")->number, tk = (int)field(r, "threads_k")->number;
        if (bq == 16 && bk == 16 && tq == 4 && tk == 8) seen[0] = 1;
        if (bq == 32 && bk == 16 && tq == 8 && tk == 4) seen[1] = 1;
        if (i > 0) ck_assert(field(r, "median_ms")->number >= field(&records[i - 1], "median_ms")->number);
    }
    ck_assert_msg(seen[0] && seen[1], "a listed plan is missing from the JSON");
    free(records);
    free(out);
    free(err);
}
END_TEST

/* A listed plan the device cannot run is refused by name, with the reason. */
START_TEST(test_plan_that_does_not_fit) {
    char *args[] = {"--seqlen", "16", "--batch", "1", "--heads", "1", "--plans", "16,16,4,8:8,8,1,1", NULL};
    const int status = run_tune("misfit", args);
    char *err = captured("misfit", "err");
    ck_assert_int_eq(status, 1); /* a failure, not a usage error: the list parsed */
    ck_assert_msg(strstr(err, "8,8,1,1 does not fit this device") != NULL, "stderr:\n%s", err);
    /* refused before any plan ran: the default plan included */
    ck_assert_msg(strstr(err, "tune: plan ") == NULL, "a plan ran before the refusal:\n%s", err);
    free(err);
}
END_TEST

START_TEST(test_bad_options) {
    char *bad_pass[] = {"--pass", "sideways", NULL};
    ck_assert_int_eq(run_tune("bad_pass", bad_pass), 2);
    /* A malformed list is a usage error, found while parsing: before a context exists or the default plan runs
     * (which at the default sizes takes half a minute on a CPU device). */
    char *bad_plan[] = {"--plans", "16,16,4", NULL};
    ck_assert_int_eq(run_tune("bad_plan", bad_plan), 2);
    char *err = captured("bad_plan", "err");
    ck_assert_msg(strstr(err, "is not BQ,BK,TQ,TK") != NULL, "stderr:\n%s", err);
    ck_assert_msg(strstr(err, "tune: plan ") == NULL, "a plan ran before the refusal:\n%s", err);
    free(err);
    char *no_plan[] = {"--plans", ":", NULL};
    ck_assert_int_eq(run_tune("no_plan", no_plan), 2);
    err = captured("no_plan", "err");
    ck_assert_msg(strstr(err, "lists no plan") != NULL, "stderr:\n%s", err);
    free(err);
}
END_TEST

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_tune WORKDIR PROGRAM [ARGS...]\n");
        return EXIT_FAILURE;
    }
    g_workdir = argv[1];
    g_command = argv + 2;
    Suite *s = suite_create("tune");
    TCase *tc = tcase_create("tune");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_listed_plans_ranked, 0, 2);
    tcase_add_test(tc, test_plan_that_does_not_fit);
    tcase_add_test(tc, test_bad_options);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* test_disk_cache.c: the on-disk program cache. A second context and a second process read the programs from
 * disk instead of compiling them, with the same bits as a fresh build; damaged entries (cut short, flipped
 * bytes, another key, a binary the driver refuses) are ignored and rewritten; an unwritable directory means no
 * caching and no error; a missing one is created; FLASHCL_CACHE_DIR=off writes nothing; the XDG and HOME
 * defaults; processes writing the same entries at once leave valid files.
 *
 * Run as `test_disk_cache --first-call` it times one context's creation and first forward with the cache
 * directory of the environment instead (docs/perf.md, "On-disk program cache"). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk_cache_support.h"
#include "support_context.h"

static dc_result first, second, third, fresh; /* static: a result is ~10 KB */

static void run_ok(dc_result *r) {
    dc_run(r);
    ck_assert_msg(r->status == FLASHCL_SUCCESS, "%s: %s", flashcl_status_string(r->status),
                  flashcl_last_error(NULL));
}

static char *cache_in_scratch(void) {
    char *dir = dc_scratch_dir();
    ck_assert_ptr_nonnull(dir);
    ck_assert_int_eq(setenv("FLASHCL_CACHE_DIR", dir, 1), 0);
    return dir;
}

/* The run with no disk cache at all: what every cached run must match bit for bit. */
static void fresh_build(dc_result *r) {
    const char *saved = getenv("FLASHCL_CACHE_DIR");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("FLASHCL_CACHE_DIR", "off", 1);
    run_ok(r);
    ck_assert_int_eq(r->stats.disk_enabled, 0);
    if (copy) setenv("FLASHCL_CACHE_DIR", copy, 1);
    else unsetenv("FLASHCL_CACHE_DIR");
    free(copy);
}

static void assert_same_bits(const dc_result *a, const dc_result *b, const char *what) {
    ck_assert_msg(memcmp(a->o, b->o, sizeof a->o) == 0, "%s: O differs", what);
    ck_assert_msg(memcmp(a->lse, b->lse, sizeof a->lse) == 0, "%s: LSE differs", what);
}

/* A first run on an empty cache: builds every program and writes each; their count. */
static uint64_t populate(const char *dir, dc_result *r) {
    run_ok(r);
    const uint64_t n = r->stats.source_builds;
    ck_assert_uint_gt(n, 0);
    ck_assert_int_eq(r->stats.disk_enabled, 1);
    ck_assert_uint_eq(r->stats.disk_hits, 0);
    ck_assert_uint_eq(r->stats.disk_rejects, 0);
    ck_assert_msg(r->stats.disk_writes == n, "wrote %llu of %llu programs (%s)",
                  (unsigned long long)r->stats.disk_writes, (unsigned long long)n, r->stats.note);
    ck_assert_int_eq(dc_count_entries(dir), (int)n);
    ck_assert_int_eq(dc_count_temporaries(dir), 0);
    return n;
}

static void assert_all_from_disk(const dc_result *r, uint64_t n) {
    ck_assert_msg(r->stats.disk_hits == n && r->stats.source_builds == 0,
                  "%llu disk hits, %llu source builds of %llu programs (%s)", (unsigned long long)r->stats.disk_hits,
                  (unsigned long long)r->stats.source_builds, (unsigned long long)n, r->stats.note);
    ck_assert_uint_eq(r->stats.disk_writes, 0);
    ck_assert_uint_eq(r->stats.disk_rejects, 0);
}

START_TEST(second_context_reads_disk) {
    char *dir = cache_in_scratch();
    const uint64_t n = populate(dir, &first);
    run_ok(&second);
    assert_all_from_disk(&second, n);
    fresh_build(&fresh);
    assert_same_bits(&first, &fresh, "first context");
    assert_same_bits(&second, &fresh, "second context (from disk)");
    free(dir);
}
END_TEST

START_TEST(second_process_reads_disk) {
    char *dir = cache_in_scratch(), *outputs = dc_scratch_dir();
    char out[1100];
    snprintf(out, sizeof out, "%s/child.bin", outputs);
    ck_assert_int_eq(dc_wait_child(dc_spawn_child(out), out, &first), 0);
    const uint64_t n = first.stats.source_builds;
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(first.stats.disk_writes, n);
    ck_assert_int_eq(dc_wait_child(dc_spawn_child(out), out, &second), 0);
    assert_all_from_disk(&second, n);
    fresh_build(&fresh);
    assert_same_bits(&first, &fresh, "first process");
    assert_same_bits(&second, &fresh, "second process (from disk)");
    free(dir);
    free(outputs);
}
END_TEST

/* What the note says about each damage: the check that caught it. */
static const char *const damage_notes[DC_DAMAGE_COUNT] = {
    [DC_TRUNCATE] = "wrong length",       [DC_EMPTY] = "wrong length",
    [DC_FLIP_MAGIC] = "bad magic",        [DC_FLIP_VERSION] = "other format version",
    [DC_FLIP_KEY] = "other key",          [DC_FLIP_BINARY] = "checksum mismatch",
    [DC_GARBAGE_BINARY] = "driver refused",
};

/* Mesa's rusticl (22.3) panics, ending the process, on a binary whose header it does not know instead of
 * refusing it: the reason the library hands a driver only bytes whose key and checksum match what that very
 * driver wrote. The forged binary is therefore tried on the other implementations only. */
static int driver_aborts_on_garbage(void) {
    flashcl_context *ctx = ts_context();
    char name[256] = "";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    flashcl_context_free(ctx);
    return strstr(name, "llvmpipe") != NULL;
}

START_TEST(damaged_entries_are_rebuilt) {
    const dc_damage damage = (dc_damage)_i;
    if (damage == DC_GARBAGE_BINARY && driver_aborts_on_garbage()) return;
    char *dir = cache_in_scratch();
    const uint64_t n = populate(dir, &first);
    ck_assert_int_eq(dc_damage_entries(dir, damage), (int)n);
    run_ok(&second);
    ck_assert_msg(second.stats.disk_rejects == n && second.stats.source_builds == n && second.stats.disk_hits == 0,
                  "damage %d: %llu rejects, %llu builds, %llu hits of %llu programs (%s)", (int)damage,
                  (unsigned long long)second.stats.disk_rejects, (unsigned long long)second.stats.source_builds,
                  (unsigned long long)second.stats.disk_hits, (unsigned long long)n, second.stats.note);
    ck_assert_msg(strstr(second.stats.note, damage_notes[damage]) != NULL, "damage %d: note \"%s\"", (int)damage,
                  second.stats.note);
    ck_assert_uint_eq(second.stats.disk_writes, n); /* overwritten */
    assert_same_bits(&second, &first, "rebuilt after damage");
    run_ok(&third);
    assert_all_from_disk(&third, n);
    assert_same_bits(&third, &first, "the rewritten entries");
    ck_assert_int_eq(dc_count_temporaries(dir), 0);
    free(dir);
}
END_TEST

/* A path under a regular file can never become a directory, whoever runs the test. */
START_TEST(unwritable_directory_means_no_caching) {
    char *scratch = dc_scratch_dir();
    ck_assert_ptr_nonnull(scratch);
    char blocker[1100], dir[1200];
    snprintf(blocker, sizeof blocker, "%s/a-file", scratch);
    FILE *f = fopen(blocker, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/cache", blocker);
    setenv("FLASHCL_CACHE_DIR", dir, 1);
    run_ok(&first);
    const uint64_t n = first.stats.source_builds;
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(first.stats.disk_writes, 0);
    ck_assert_uint_eq(first.stats.disk_write_failures, n);
    ck_assert_uint_eq(first.stats.disk_rejects, 0); /* no directory is no file, not a bad one */
    ck_assert_msg(strstr(first.stats.note, "not stored") != NULL, "note \"%s\"", first.stats.note);
    fresh_build(&fresh);
    assert_same_bits(&first, &fresh, "unwritable cache");
    free(scratch);
}
END_TEST

/* A directory without write permission; root writes anyway, so there only the call's success is checked. */
START_TEST(read_only_directory_means_no_caching) {
    char *dir = cache_in_scratch();
    ck_assert_int_eq(chmod(dir, 0555), 0);
    run_ok(&first);
    if (geteuid() != 0) {
        ck_assert_uint_eq(first.stats.disk_writes, 0);
        ck_assert_uint_eq(first.stats.disk_write_failures, first.stats.source_builds);
        ck_assert_int_eq(dc_count_all(dir), 0);
    }
    fresh_build(&fresh);
    assert_same_bits(&first, &fresh, "read-only cache");
    chmod(dir, 0700);
    free(dir);
}
END_TEST

START_TEST(missing_directory_is_created) {
    char *scratch = dc_scratch_dir();
    ck_assert_ptr_nonnull(scratch);
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/not/yet/there", scratch);
    setenv("FLASHCL_CACHE_DIR", dir, 1);
    populate(dir, &first);
    free(scratch);
}
END_TEST

START_TEST(off_writes_nothing) {
    char *scratch = dc_scratch_dir();
    ck_assert_ptr_nonnull(scratch);
    char xdg[1100], home[1100];
    snprintf(xdg, sizeof xdg, "%s/xdg", scratch);
    snprintf(home, sizeof home, "%s/home", scratch);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    setenv("FLASHCL_CACHE_DIR", "off", 1);
    run_ok(&first);
    ck_assert_int_eq(first.stats.disk_enabled, 0);
    ck_assert_uint_gt(first.stats.source_builds, 0);
    ck_assert_uint_eq(first.stats.disk_writes + first.stats.disk_hits + first.stats.disk_write_failures, 0);
    ck_assert_msg(strstr(first.stats.note, "off") != NULL, "note \"%s\"", first.stats.note);
    /* Only flashcl's own directories: Mesa keeps its shader cache under XDG_CACHE_HOME too. */
    char flashcl_dir[1200];
    snprintf(flashcl_dir, sizeof flashcl_dir, "%s/flashcl", xdg);
    ck_assert_int_eq(access(flashcl_dir, F_OK), -1);
    snprintf(flashcl_dir, sizeof flashcl_dir, "%s/.cache/flashcl", home);
    ck_assert_int_eq(access(flashcl_dir, F_OK), -1);
    free(scratch);
}
END_TEST

START_TEST(default_locations) {
    char *scratch = dc_scratch_dir();
    ck_assert_ptr_nonnull(scratch);
    char xdg[1100], home[1100], expected[1200];
    snprintf(xdg, sizeof xdg, "%s/xdg", scratch);
    snprintf(home, sizeof home, "%s/home", scratch);
    unsetenv("FLASHCL_CACHE_DIR");
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    snprintf(expected, sizeof expected, "%s/flashcl", xdg);
    populate(expected, &first);
    unsetenv("XDG_CACHE_HOME");
    snprintf(expected, sizeof expected, "%s/.cache/flashcl", home);
    populate(expected, &second);
    free(scratch);
}
END_TEST

#define WRITERS 4

START_TEST(concurrent_writers_leave_valid_files) {
    char *dir = cache_in_scratch(), *outputs = dc_scratch_dir();
    char out[WRITERS][1100];
    pid_t pids[WRITERS];
    for (int i = 0; i < WRITERS; ++i) {
        snprintf(out[i], sizeof out[i], "%s/child%d.bin", outputs, i);
        pids[i] = dc_spawn_child(out[i]);
    }
    static dc_result children[WRITERS];
    for (int i = 0; i < WRITERS; ++i) ck_assert_int_eq(dc_wait_child(pids[i], out[i], &children[i]), 0);
    /* Each child built what it did not find; all see the same programs. */
    const uint64_t n = children[0].stats.source_builds + children[0].stats.disk_hits;
    for (int i = 0; i < WRITERS; ++i) {
        ck_assert_uint_eq(children[i].stats.source_builds + children[i].stats.disk_hits, n);
        ck_assert_uint_eq(children[i].stats.disk_write_failures, 0);
        assert_same_bits(&children[i], &children[0], "concurrent writers");
    }
    ck_assert_int_eq(dc_count_entries(dir), (int)n);
    ck_assert_int_eq(dc_count_temporaries(dir), 0);
    run_ok(&first);
    assert_all_from_disk(&first, n);
    assert_same_bits(&first, &children[0], "after concurrent writers");
    free(dir);
    free(outputs);
}
END_TEST

START_TEST(stats_refuse_null) {
    flashcl_cache_stats stats;
    ck_assert_int_eq(flashcl_context_cache_stats(NULL, &stats), FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_cache_stats(ctx, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_context_cache_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_uint_eq(stats.source_builds + stats.disk_hits, 0); /* nothing built before a call */
    flashcl_context_free(ctx);
}
END_TEST

/* With POCL's own cache on the library leaves its disk cache off (off_where_pocl_caches_itself), so the
 * other tests run with POCL_KERNEL_CACHE=0 to test the disk cache on POCL too. POCL reads that variable once,
 * when its devices are first listed, and the library at every context creation: listing the devices first
 * keeps POCL's cache on for this process, which keeps its repeated builds cheap (without it the suite takes
 * a minute on POCL instead of seconds). Run in each test's own process (a checked fixture: POCL's threads do
 * not survive a fork, so the parent must not start it) and in each --child. */
static void keep_pocl_cache_but_test_ours(void) {
    unsetenv("POCL_KERNEL_CACHE");
    cl_platform_id platforms[16];
    cl_uint count = 0;
    if (clGetPlatformIDs(16, platforms, &count) == CL_SUCCESS) {
        for (cl_uint i = 0; i < count && i < 16; ++i) {
            cl_uint devices = 0;
            (void)clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 0, NULL, &devices);
        }
    }
    setenv("POCL_KERNEL_CACHE", "0", 1);
}

/* POCL keeps every build in a cache of its own (on unless POCL_KERNEL_CACHE=0), and storing a program of
 * ours makes POCL compile all its kernels a second time: with POCL's cache on, the disk cache stays off and
 * says why. (main sets POCL_KERNEL_CACHE=0 for the other tests, so that they test the cache on POCL too.) */
START_TEST(off_where_pocl_caches_itself) {
    char *dir = cache_in_scratch();
    unsetenv("POCL_KERNEL_CACHE");
    flashcl_context *ctx = ts_context();
    cl_platform_id id = NULL;
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_PLATFORM, sizeof id, &id, NULL),
                     CL_SUCCESS);
    char platform[64] = "";
    ck_assert_int_eq(clGetPlatformInfo(id, CL_PLATFORM_NAME, sizeof platform - 1, platform, NULL), CL_SUCCESS);
    const int pocl = strcmp(platform, "Portable Computing Language") == 0;
    flashcl_cache_stats stats;
    ck_assert_int_eq(flashcl_context_cache_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.disk_enabled, !pocl);
    if (pocl) ck_assert_msg(strstr(stats.note, "POCL") != NULL, "note: %s", stats.note);
    flashcl_context_free(ctx);
    setenv("POCL_KERNEL_CACHE", "1", 1); /* said explicitly: the same */
    ctx = ts_context();
    ck_assert_int_eq(flashcl_context_cache_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.disk_enabled, !pocl);
    flashcl_context_free(ctx);
    setenv("POCL_KERNEL_CACHE", "0", 1);
    ctx = ts_context();
    ck_assert_int_eq(flashcl_context_cache_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.disk_enabled, 1);
    flashcl_context_free(ctx);
    free(dir);
}
END_TEST

static Suite *disk_cache_suite(void) {
    Suite *s = suite_create("disk_cache");
    TCase *tc = tcase_create("disk_cache");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_checked_fixture(tc, keep_pocl_cache_but_test_ours, NULL);
    tcase_add_test(tc, second_context_reads_disk);
    tcase_add_test(tc, second_process_reads_disk);
    tcase_add_loop_test(tc, damaged_entries_are_rebuilt, 0, DC_DAMAGE_COUNT);
    tcase_add_test(tc, unwritable_directory_means_no_caching);
    tcase_add_test(tc, read_only_directory_means_no_caching);
    tcase_add_test(tc, missing_directory_is_created);
    tcase_add_test(tc, off_writes_nothing);
    tcase_add_test(tc, default_locations);
    tcase_add_test(tc, concurrent_writers_leave_valid_files);
    tcase_add_test(tc, stats_refuse_null);
    tcase_add_test(tc, off_where_pocl_caches_itself);
    suite_add_tcase(s, tc);
    return s;
}

/* --first-call: one context and forward with the environment's cache, timed. */
static int first_call_main(void) {
    dc_run(&first);
    if (first.status != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", flashcl_status_string(first.status), flashcl_last_error(NULL));
        return 1;
    }
    printf("first call %.3f s: %llu source builds, %llu disk hits, %llu disk writes%s%s\n", first.seconds,
           (unsigned long long)first.stats.source_builds, (unsigned long long)first.stats.disk_hits,
           (unsigned long long)first.stats.disk_writes, first.stats.note[0] ? "; " : "", first.stats.note);
    return 0;
}

int main(int argc, char **argv) {
    dc_self = argv[0];
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        keep_pocl_cache_but_test_ours();
        return dc_child_main(argv[2]);
    }
    if (argc == 2 && strcmp(argv[1], "--first-call") == 0) return first_call_main();
    SRunner *runner = srunner_create(disk_cache_suite());
    /* Cases here set environment variables: each runs in a child of its own, also where the tests' environment
     * turns Check's forking off (CK_FORK=no, top-level CMakeLists.txt), so none leaks into the next case. */
    srunner_set_fork_status(runner, CK_FORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

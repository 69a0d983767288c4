/* test_threads.c: what include/flashcl.h promises about threads, exercised by two threads at once.
 *
 * The header's promise: "A context must not be used by two threads at the same time" (README: "use
 * one per thread"), and flashcl_last_error(NULL) holds "the last failure in this thread". So:
 *   - own_contexts: two threads create a context each at the same moment and run forwards
 *     concurrently on different problems; every result is checked against the CPU reference, so
 *     state leaking from one context (or thread) into the other shows as a wrong answer;
 *   - handed_over_context: one context used by two threads in turn, never at the same time (a
 *     mutex around each call), which the header allows;
 *   - last_error_per_thread: context creations that fail at the same moment in two threads (and
 *     the main thread) each leave their own message in flashcl_last_error(NULL).
 * Built normally it runs in the main suite; tools/ci_sanitize.sh also builds it with
 * -fsanitize=thread, where a data race in flashcl (or between flashcl and a driver's threads)
 * fails the run. Failures inside a worker thread are recorded and asserted by the main thread
 * (Check's assertions are not for other threads). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "flashcl.h"

/* Seconds per Check test: a cold kernel build under TSan, two contexts building at once. */
#define CASE_TIMEOUT 480
#define THREADS 2
#define CALLS_PER_THREAD 3
/* Far above float rounding on these sizes (d = 32, inputs in [-1, 1]); far below what another
 * problem's data would give. */
#define TOLERANCE 1e-3

typedef struct problem {
    int batch, heads, seqlen_q, seqlen_k, head_dim, causal;
} problem;

typedef struct worker {
    int index;
    problem prob;
    flashcl_context *shared;      /* NULL: the worker creates its own context */
    pthread_mutex_t *shared_lock; /* held around every use of shared */
    pthread_barrier_t *start;     /* all workers pass it together */
    int calls_done;
    char failure[512]; /* empty: passed */
} worker;

/* Both problems use head_dim 32 and float32, so the two contexts build the same kernel at once. */
static const problem problems[THREADS] = {
    {1, 2, 37, 53, 32, 0},
    {2, 1, 64, 29, 32, 1},
};

static uint64_t next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_uniform(uint64_t *state, float *x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)(2.0 * ((double)(next_u64(state) >> 11) * 0x1.0p-53) - 1.0);
}

/* Compares o and lse with the double reference; returns 0 or fills w->failure. */
static int check_result(worker *w, int call, const flashcl_attention_desc *desc, const float *q, const float *k,
                        const float *v, const float *o, const float *lse) {
    const size_t rows = (size_t)desc->batch * (size_t)desc->heads_q * (size_t)desc->seqlen_q;
    const size_t n_o = rows * (size_t)desc->head_dim;
    double *o_ref = malloc(n_o * sizeof *o_ref);
    double *lse_ref = malloc(rows * sizeof *lse_ref);
    int bad = 0;
    if (!o_ref || !lse_ref || flashcl_reference_forward(desc, FLASHCL_REF_DOUBLE, q, k, v, o_ref, lse_ref) != 0) {
        snprintf(w->failure, sizeof w->failure, "thread %d: the reference ran out of memory", w->index);
        bad = 1;
    }
    for (size_t i = 0; !bad && i < n_o; ++i) {
        if (!(fabs((double)o[i] - o_ref[i]) <= TOLERANCE)) {
            snprintf(w->failure, sizeof w->failure, "thread %d, call %d: O[%zu] = %.9g, reference %.9g", w->index,
                     call, i, (double)o[i], o_ref[i]);
            bad = 1;
        }
    }
    for (size_t i = 0; !bad && i < rows; ++i) {
        const int both_masked = isinf(lse_ref[i]) && isinf(lse[i]) && lse_ref[i] < 0 && lse[i] < 0;
        if (!both_masked && !(fabs((double)lse[i] - lse_ref[i]) <= TOLERANCE)) {
            snprintf(w->failure, sizeof w->failure, "thread %d, call %d: LSE[%zu] = %.9g, reference %.9g",
                     w->index, call, i, (double)lse[i], lse_ref[i]);
            bad = 1;
        }
    }
    free(o_ref);
    free(lse_ref);
    return bad ? -1 : 0;
}

static void *run_forwards(void *arg) {
    worker *w = arg;
    const problem *p = &w->prob;
    /* Together: the context creations (device enumeration, queue creation) and then the
     * forwards and their kernel builds overlap. */
    pthread_barrier_wait(w->start);
    flashcl_context *ctx = w->shared;
    if (!ctx) {
        const flashcl_status status = flashcl_context_create(&ctx, NULL);
        if (status != FLASHCL_SUCCESS || !ctx) {
            snprintf(w->failure, sizeof w->failure, "thread %d: flashcl_context_create: %s: %s", w->index,
                     flashcl_status_string(status), flashcl_last_error(NULL));
            return NULL;
        }
    }
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, p->batch, p->heads, p->seqlen_q, p->seqlen_k, p->head_dim);
    desc.causal = p->causal;
    const size_t n_q = (size_t)p->batch * (size_t)p->heads * (size_t)p->seqlen_q * (size_t)p->head_dim;
    const size_t n_kv = (size_t)p->batch * (size_t)p->heads * (size_t)p->seqlen_k * (size_t)p->head_dim;
    const size_t rows = (size_t)p->batch * (size_t)p->heads * (size_t)p->seqlen_q;
    float *q = malloc(n_q * sizeof *q), *k = malloc(n_kv * sizeof *k), *v = malloc(n_kv * sizeof *v);
    float *o = malloc(n_q * sizeof *o), *lse = malloc(rows * sizeof *lse);
    uint64_t rng = 0x5EED0000u + (uint64_t)w->index;
    if (!q || !k || !v || !o || !lse) {
        snprintf(w->failure, sizeof w->failure, "thread %d: out of host memory", w->index);
    } else {
        for (int call = 0; call < CALLS_PER_THREAD; ++call) {
            fill_uniform(&rng, q, n_q);
            fill_uniform(&rng, k, n_kv);
            fill_uniform(&rng, v, n_kv);
            if (w->shared_lock) pthread_mutex_lock(w->shared_lock);
            const flashcl_status status = flashcl_forward_host(ctx, &desc, FLASHCL_LAYOUT_BHSD, q, k, v, o, lse);
            if (status != FLASHCL_SUCCESS)
                snprintf(w->failure, sizeof w->failure, "thread %d, call %d: flashcl_forward_host: %s: %s", w->index,
                         call, flashcl_status_string(status), flashcl_last_error(ctx));
            if (w->shared_lock) pthread_mutex_unlock(w->shared_lock);
            if (status != FLASHCL_SUCCESS || check_result(w, call, &desc, q, k, v, o, lse) != 0) break;
            ++w->calls_done;
        }
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    if (!w->shared) flashcl_context_free(ctx);
    return NULL;
}

/* Runs run_forwards in THREADS threads and asserts that every one did all its calls. */
static void run_workers(flashcl_context *shared, pthread_mutex_t *lock) {
    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, THREADS), 0);
    worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; ++i) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].index = i;
        workers[i].prob = problems[i];
        workers[i].shared = shared;
        workers[i].shared_lock = lock;
        workers[i].start = &start;
        ck_assert_int_eq(pthread_create(&threads[i], NULL, run_forwards, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; ++i) ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; ++i) {
        ck_assert_msg(workers[i].failure[0] == '\0', "%s", workers[i].failure);
        ck_assert_int_eq(workers[i].calls_done, CALLS_PER_THREAD);
    }
}

START_TEST(test_own_contexts) {
    run_workers(NULL, NULL);
}
END_TEST

START_TEST(test_handed_over_context) {
    flashcl_context *ctx = NULL;
    const flashcl_status status = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS && ctx, "flashcl_context_create: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(NULL));
    pthread_mutex_t lock;
    ck_assert_int_eq(pthread_mutex_init(&lock, NULL), 0);
    run_workers(ctx, &lock);
    pthread_mutex_destroy(&lock);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- flashcl_last_error(NULL) is per thread ---------------------------------- */

typedef struct error_worker {
    char device[64];        /* a device name nothing matches, naming the thread */
    pthread_barrier_t *sync; /* passed twice: before the failing call and after it */
    flashcl_status status;
    char message[512]; /* flashcl_last_error(NULL) after both threads failed */
} error_worker;

static void *fail_to_create(void *arg) {
    error_worker *w = arg;
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = w->device;
    flashcl_context *ctx = NULL;
    pthread_barrier_wait(w->sync);
    w->status = flashcl_context_create(&ctx, &options);
    /* Both threads have failed before either reads its message. */
    pthread_barrier_wait(w->sync);
    snprintf(w->message, sizeof w->message, "%s", flashcl_last_error(NULL));
    flashcl_context_free(ctx); /* NULL after a failure; accepted */
    return NULL;
}

START_TEST(test_last_error_per_thread) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = "no-such-device-main-thread";
    flashcl_context *ctx = NULL;
    ck_assert_int_eq(flashcl_context_create(&ctx, &options), FLASHCL_ERROR_DEVICE_NOT_FOUND);

    pthread_barrier_t sync;
    ck_assert_int_eq(pthread_barrier_init(&sync, NULL, THREADS), 0);
    error_worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; ++i) {
        memset(&workers[i], 0, sizeof workers[i]);
        snprintf(workers[i].device, sizeof workers[i].device, "no-such-device-thread-%d", i);
        workers[i].sync = &sync;
        ck_assert_int_eq(pthread_create(&threads[i], NULL, fail_to_create, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; ++i) ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&sync);
    for (int i = 0; i < THREADS; ++i) {
        ck_assert_int_eq(workers[i].status, FLASHCL_ERROR_DEVICE_NOT_FOUND);
        ck_assert_msg(strstr(workers[i].message, workers[i].device) != NULL,
                      "thread %d: flashcl_last_error(NULL) is '%s', which does not name its own '%s'", i,
                      workers[i].message, workers[i].device);
        ck_assert_msg(strstr(workers[i].message, workers[1 - i].device) == NULL,
                      "thread %d: flashcl_last_error(NULL) names the other thread's device: '%s'", i,
                      workers[i].message);
    }
    /* The main thread's own message survived both threads' failures. */
    ck_assert_msg(strstr(flashcl_last_error(NULL), "no-such-device-main-thread") != NULL,
                  "main thread: flashcl_last_error(NULL) is '%s'", flashcl_last_error(NULL));
}
END_TEST

static Suite *threads_suite(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, CASE_TIMEOUT);
    tcase_add_test(tc, test_last_error_per_thread);
    tcase_add_test(tc, test_own_contexts);
    tcase_add_test(tc, test_handed_over_context);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(threads_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

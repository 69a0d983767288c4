/* disk_cache_support.h: what test_disk_cache.c needs around the library: one small forward run with the cache
 * counters it caused, the same run in a child process (this test binary run again with --child), scratch
 * directories in the build tree, and ways to damage cache files. */
#ifndef FLASHCL_DISK_CACHE_SUPPORT_H
#define FLASHCL_DISK_CACHE_SUPPORT_H

#include <stddef.h>
#include <sys/types.h>

#include "flashcl.h"

/* The problem every run computes: small, so that the kernels' build is all that costs. */
#define DC_BATCH 1
#define DC_HEADS 2
#define DC_SEQLEN_Q 37
#define DC_SEQLEN_K 53
#define DC_HEAD_DIM 32
#define DC_Q_COUNT (DC_BATCH * DC_HEADS * DC_SEQLEN_Q * DC_HEAD_DIM)
#define DC_KV_COUNT (DC_BATCH * DC_HEADS * DC_SEQLEN_K * DC_HEAD_DIM)
#define DC_LSE_COUNT (DC_BATCH * DC_HEADS * DC_SEQLEN_Q)

typedef struct dc_result {
    flashcl_status status;     /* of the context's creation, then of the forward */
    flashcl_cache_stats stats; /* after the forward */
    double seconds;            /* context creation and the first forward (the builds) */
    float o[DC_Q_COUNT];
    float lse[DC_LSE_COUNT];
} dc_result;

/* One context (with the environment as it is now), one forward, the counters; never asserts, so that a child
 * process can run it outside Check. */
void dc_run(dc_result *result);

/* This test binary, as main saw it (set by main before the suite runs). */
extern const char *dc_self;

/* Starts `dc_self --child out_path` with the current environment. */
pid_t dc_spawn_child(const char *out_path);
/* Waits for a child started by dc_spawn_child and reads its result; 0 on success. */
int dc_wait_child(pid_t pid, const char *out_path, dc_result *result);
/* The child's side: dc_run and write the result to out_path; the process's exit status. */
int dc_child_main(const char *out_path);

/* A new empty directory under the build tree's scratch directory, malloc'd. */
char *dc_scratch_dir(void);

/* Files directly in dir: cache entries (*.clbin), temporary files of a writer (*.tmp.*), anything. */
int dc_count_entries(const char *dir);
int dc_count_temporaries(const char *dir);
int dc_count_all(const char *dir);

typedef enum dc_damage {
    DC_TRUNCATE,           /* the last bytes cut off */
    DC_EMPTY,              /* zero bytes */
    DC_FLIP_MAGIC,         /* the first byte changed */
    DC_FLIP_VERSION,       /* another format version */
    DC_FLIP_KEY,           /* one byte of the stored key changed: an entry of another key */
    DC_FLIP_BINARY,        /* one byte of the binary changed: checksum mismatch */
    DC_GARBAGE_BINARY,     /* a binary of garbage with a matching checksum: the driver must refuse it */
    DC_DAMAGE_COUNT
} dc_damage;

/* Applies damage to every cache entry (*.clbin) in dir; the number of files changed. */
int dc_damage_entries(const char *dir, dc_damage damage);

#endif

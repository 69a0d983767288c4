/* internal.h: the context structure and helpers shared by the library's source files. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "device_caps.h"
#include "flashcl.h"

#define FLASHCL_ERROR_CAPACITY 1024

typedef struct flashcl_program_entry flashcl_program_entry; /* program_cache.c */
typedef struct flashcl_disk_cache flashcl_disk_cache;       /* disk_cache.c */

struct flashcl_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    int queue_in_order;         /* 1 unless the queue executes out of order (queried once: it cannot change) */
    flashcl_device_caps caps;   /* what the dispatcher knows of the device */
    char *kernel_dir;           /* NULL: embedded sources */
    flashcl_program_entry *programs; /* cache of built programs, keyed by source and options */
    flashcl_disk_cache *disk_cache;  /* the on-disk program cache; NULL: off */
    flashcl_cache_stats cache_stats; /* what the two caches did (flashcl_context_cache_stats) */
    int forced_plan_set[2];
    flashcl_plan forced_plan[2];
    flashcl_impl impl;          /* which implementation flashcl_forward/backward run */
    flashcl_tensor_cores tensor_cores; /* when calls use the tensor-core kernels */
    flashcl_f32_precision f32_precision; /* whether fp32 forwards may use 3xTF32 */
    size_t memory_budget;       /* cap on extra device bytes per call, 0 = none */
    int kv_splits;              /* split-KV forward: 0 automatic, 1 never, n forced */
    int decode_off;             /* 1: no decode kernel (flashcl_context_set_decode_kernel) */
    int wgmma;                  /* when forwards run the Hopper kernel: FLASHCL_WGMMA_* (wgmma_plan.h) */
    flashcl_call_stats last_stats;
    int last_stats_valid;
    char error[FLASHCL_ERROR_CAPACITY];
    char *build_log;            /* of the last failed build, owned */
    /* The device copy of the last host ALiBi slopes (feature_score_mods.c), reused while they repeat. */
    cl_mem alibi_cache;
    float *alibi_cache_values;
    size_t alibi_cache_count;
    /* The split-KV partials of the last split forward (launch_forward.c), kept for the next one on an in-order
     * queue: allocating them per call cost about 50 us on the H100 once they reach 2 MB, a fifth of a decode
     * call. Grow-only; released by flashcl_context_free. */
    cl_mem split_cache_o, split_cache_stats;
    size_t split_cache_o_bytes, split_cache_stats_bytes;
};

/* Releases the kept split-KV partials (launch_forward.c). */
void flashcl_split_cache_free(flashcl_context *ctx);

/* Records a formatted message as ctx's last error (or the thread's when ctx
 * is NULL) and returns status, so error paths read `return fail(...)`. */
flashcl_status flashcl_fail(flashcl_context *ctx, flashcl_status status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The OpenCL error code's symbolic name ("CL_OUT_OF_RESOURCES"). */
const char *flashcl_cl_error_name(cl_int code);

/* Maps an OpenCL error of call `what` to a status with a message. */
flashcl_status flashcl_fail_cl(flashcl_context *ctx, cl_int code, const char *what);

/* Clears ctx's last error at the start of a public call. */
void flashcl_clear_error(flashcl_context *ctx);

/* device_select.c: finds the device a spec names (see flashcl_context_options). */
flashcl_status flashcl_select_device(const char *spec, cl_platform_id *platform, cl_device_id *device,
                                     char *error, size_t error_size);

/* program_cache.c: the kernel `kernel_name` from cl/<file> (after common.cl),
 * built with `options`; cached per context so later calls pay no compile. */
flashcl_status flashcl_get_kernel(flashcl_context *ctx, const char *file, const char *kernel_name,
                                  const char *options, cl_kernel *kernel);
/* The same, for a program whose source is common.cl, the files of prelude
 * (NULL-terminated; NULL: none), then cl/<file>. */
flashcl_status flashcl_get_program_kernel(flashcl_context *ctx, const char *const *prelude, const char *file,
                                          const char *kernel_name, const char *options, cl_kernel *kernel);
void flashcl_program_cache_free(flashcl_context *ctx);

/* io_model.c: predicted global-memory bytes of one call (plan ignored for the
 * standard implementation). */
double flashcl_io_model_bytes(const flashcl_attention_desc *desc, flashcl_impl impl, flashcl_pass pass,
                              const flashcl_plan *plan);
/* The IO model's bytes of an additive bias (f: the call's features; 0 without one): the entries each (batch, query
 * head) may see (causal counted, a window not: an upper bound there), read once by the forward and once by each
 * backward kernel, as the kernels request them (a broadcast plane is read again for every head that uses it;
 * caches may serve the repeats), and the backward's dBias: every entry of (B, Hq, Sq, Sk) written in the bias's
 * type, or through a float scratch written, read back and reduced into the bias's shape (io_model.c). */
struct flashcl_features;
double flashcl_io_model_bias_bytes(const flashcl_attention_desc *desc, const struct flashcl_features *f,
                                   flashcl_pass pass);

/* Default scale when desc->scale is 0. */
float flashcl_effective_scale(const flashcl_attention_desc *desc);

#endif /* FLASHCL_INTERNAL_H */

/* internal.h: the context structure and helpers shared by the library's source files. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "flashcl.h"

#define FLASHCL_ERROR_CAPACITY 1024

typedef struct flashcl_program_entry flashcl_program_entry; /* program_cache.c */

struct flashcl_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    flashcl_device_limits limits;
    char device_name[256];
    char *kernel_dir;           /* NULL: embedded sources */
    flashcl_program_entry *programs; /* cache of built programs, keyed by source and options */
    int forced_plan_set[2];
    flashcl_plan forced_plan[2];
    flashcl_impl impl;          /* which implementation flashcl_forward/backward run */
    flashcl_tensor_cores tensor_cores; /* when the forward uses cl/forward_mma.cl */
    int has_ptx_mma;            /* NVIDIA device of compute capability >= 8.0 */
    int loop_limited;           /* Mesa llvmpipe: 65535 loop iterations per work-item (forward_mma.c) */
    flashcl_f32_precision f32_precision; /* whether fp32 forwards may use 3xTF32 */
    size_t memory_budget;       /* cap on extra device bytes per call, 0 = none */
    int used_clblast;           /* CLBlast holds a reference to this context in its cache */
    flashcl_call_stats last_stats;
    int last_stats_valid;
    char error[FLASHCL_ERROR_CAPACITY];
    char *build_log;            /* of the last failed build, owned */
};

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

/* The plan for a problem on ctx: the forced one (checked) or the planner's. */
flashcl_status flashcl_resolve_plan(flashcl_context *ctx, flashcl_pass pass,
                                    const flashcl_attention_desc *desc, flashcl_plan *plan);

/* tuned_plans.c: 1 and *plan set if a measured plan exists for ctx's device
 * and this problem, else 0. */
int flashcl_tuned_plan(const flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan);

/* program_cache.c: the kernel `kernel_name` from cl/<file> (after common.cl),
 * built with `options`; cached per context so later calls pay no compile. */
flashcl_status flashcl_get_kernel(flashcl_context *ctx, const char *file, const char *kernel_name,
                                  const char *options, cl_kernel *kernel);
void flashcl_program_cache_free(flashcl_context *ctx);

/* forward_mma.c: which tensor-core kernel a forward call can use: 0 none
 * (the portable kernel runs), 1 on matrix units, 2 emulated. features is
 * the call's (call_features.h), passed as its "any feature" flag. */
int flashcl_forward_mma_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                             const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                             const flashcl_tensor *o, flashcl_plan *plan);
/* Enqueues the tensor-core forward (mode 1 or 2, plan from flashcl_forward_mma_mode) and records its stats. */
flashcl_status flashcl_forward_mma(flashcl_context *ctx, int mode, const flashcl_plan *plan,
                                   const flashcl_attention_desc *desc,
                                   const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                   const flashcl_tensor *o, const flashcl_tensor *lse, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event);

/* backward.c: the three kernels of one backward program (portable or
 * tensor-core), and their launch: delta, then dkdv and dq (both need delta). */
typedef struct flashcl_backward_kernels {
    cl_kernel delta, dkdv, dq;
} flashcl_backward_kernels;
flashcl_status flashcl_backward_enqueue(flashcl_context *ctx, const flashcl_backward_kernels *kernels,
                                        const size_t delta_global[1], const size_t delta_local[1],
                                        const size_t dkdv_global[2], const size_t dq_global[2], size_t work_group,
                                        cl_uint num_events, const cl_event *wait_list, cl_event *event);

/* forward_mma.c: the tensor-core mode a call of `pass` may use before its
 * tensors and tiles are looked at: 0 none (ctx's mode, impl, a forced plan
 * for the pass, a feature, fp32 without 3xTF32, head_dim), 1 matrix units,
 * 2 emulated. */
int flashcl_mma_call_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                          flashcl_pass pass);
/* forward_mma.c: 1 if t's row starts suit the tensor-core kernels' 16-byte
 * loads (8 half values, 4 floats). */
int flashcl_mma_aligned(const flashcl_tensor *t, flashcl_dtype dtype);

/* backward_mma.c: as flashcl_forward_mma_mode, for a backward call. */
int flashcl_backward_mma_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                              const flashcl_tensor *const tensors[7], flashcl_plan *plan);
/* Enqueues the tensor-core backward (mode 1 or 2) and records its stats. */
flashcl_status flashcl_backward_mma(flashcl_context *ctx, int mode, const flashcl_plan *plan,
                                    const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                    const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                    const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                    const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event);

/* The -D options that specialise a kernel for desc and plan (forward.c). */
int flashcl_format_kernel_options(char *out, size_t size, const flashcl_attention_desc *desc,
                                  const flashcl_plan *plan);

/* standard_forward.c / standard_backward.c: the CLBlast-based standard
 * attention, called by flashcl_forward / flashcl_backward after validation. */
flashcl_status flashcl_standard_forward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                        const flashcl_tensor *o, const flashcl_tensor *lse, cl_uint num_events,
                                        const cl_event *wait_list, cl_event *event);
flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                         const flashcl_tensor *o, const flashcl_tensor *lse,
                                         const flashcl_tensor *dout, const flashcl_tensor *dq,
                                         const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events,
                                         const cl_event *wait_list, cl_event *event);

/* io_model.c: predicted global-memory bytes of one call (plan ignored for the
 * standard implementation). */
double flashcl_io_model_bytes(const flashcl_attention_desc *desc, flashcl_impl impl, flashcl_pass pass,
                              const flashcl_plan *plan);

/* Records the stats flashcl_last_call_stats reports. */
void flashcl_record_stats(flashcl_context *ctx, flashcl_impl impl, flashcl_pass pass,
                          const flashcl_attention_desc *desc, const flashcl_plan *plan, size_t extra_device_bytes);

/* Default scale when desc->scale is 0. */
float flashcl_effective_scale(const flashcl_attention_desc *desc);

#endif /* FLASHCL_INTERNAL_H */

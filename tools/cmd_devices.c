/* cmd_devices.c: `flashcl devices` -- every OpenCL platform and device, its limits and the tile plans flashcl picks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

/* The same caps and order as the library's device selection
 * (src/device_select.c), so the printed index is the one --device N takes. */
#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

static void print_help(FILE *out) {
    fprintf(out,
            "usage: flashcl devices [--device SPEC]\n\n"
            "Lists every OpenCL platform and device. The [N] index is what --device N and\n"
            "FLASHCL_DEVICE=N select. The device flashcl picks by default (FLASHCL_DEVICE,\n"
            "else the first GPU, else the first device) is marked (default); with --device\n"
            "SPEC the device SPEC selects is marked instead. For each device: its limits,\n"
            "including the static local memory a kernel's own __local arrays may take (on\n"
            "NVIDIA more than the reported local memory, found by test builds), and what a call\n"
            "would run with default settings (the kernel, its matrix-unit backend if any,\n"
            "and its tiles), for float32 and float16, head dims 64 and 128, forward and\n"
            "backward.\n");
}

/* The device a context created with `spec` would use, or NULL (with the reason in why). */
static cl_device_id default_device(const char *spec, char *why, size_t why_size) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = spec;
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, &options);
    if (status != FLASHCL_SUCCESS) {
        snprintf(why, why_size, "%s: %s", flashcl_status_string(status), flashcl_last_error(NULL));
        return NULL;
    }
    cl_device_id device = flashcl_context_device(ctx);
    flashcl_context_free(ctx);
    return device;
}

/* A flashcl context on device (its own OpenCL context and queue), or NULL. */
static flashcl_context *context_on(cl_device_id device) {
    cl_int err;
    cl_context cl_ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return NULL;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    cl_command_queue queue = clCreateCommandQueue(cl_ctx, device, 0, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    flashcl_context *ctx = NULL;
    if (err == CL_SUCCESS) {
        if (flashcl_context_create_from_queue(&ctx, queue, NULL) != FLASHCL_SUCCESS) ctx = NULL;
        clReleaseCommandQueue(queue); /* the flashcl context holds its own references */
    }
    clReleaseContext(cl_ctx);
    return ctx;
}

/* What a call would run on the device with default settings (the library's
 * dispatcher, flashcl_explain_call): kernel, backend and tiles per dtype,
 * head dim and pass. */
static void print_plans(cl_device_id device) {
    flashcl_context *ctx = context_on(device);
    if (!ctx) {
        printf("      plans: n/a (%s)\n", flashcl_last_error(NULL));
        return;
    }
    static const flashcl_dtype dtypes[] = {FLASHCL_DTYPE_F32, FLASHCL_DTYPE_F16};
    static const int head_dims[] = {64, 128};
    static const struct {
        flashcl_pass pass;
        const char *name;
    } passes[] = {{FLASHCL_PASS_FORWARD, "forward"}, {FLASHCL_PASS_BACKWARD, "backward"}};
    for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; ++t)
        for (size_t d = 0; d < sizeof head_dims / sizeof head_dims[0]; ++d)
            for (size_t p = 0; p < sizeof passes / sizeof passes[0]; ++p) {
                flashcl_attention_desc desc;
                flashcl_attention_desc_init(&desc, 1, 1, 4096, 4096, head_dims[d]);
                desc.dtype = dtypes[t];
                flashcl_call_stats stats;
                const flashcl_status status = flashcl_explain_call(ctx, passes[p].pass, &desc, NULL, &stats);
                char text[200], plan[160];
                if (status == FLASHCL_SUCCESS) {
                    cli_format_plan(&stats.plan, plan, sizeof plan);
                    if (stats.backend[0])
                        snprintf(text, sizeof text, "%s (%s), %s", flashcl_kernel_kind_name(stats.kernel),
                                 stats.backend, plan);
                    else
                        snprintf(text, sizeof text, "%s, %s", flashcl_kernel_kind_name(stats.kernel), plan);
                } else {
                    snprintf(text, sizeof text, "n/a (%s)", flashcl_status_string(status));
                }
                printf("      plan %-3s d=%-3d %s: %s\n", dtypes[t] == FLASHCL_DTYPE_F32 ? "f32" : "f16",
                       head_dims[d], passes[p].name, text);
            }
    flashcl_context_free(ctx);
}

static void print_device(cl_device_id device, unsigned index, int is_default, const char *marker) {
    char name[256] = "?", version[256] = "?", type_text[64], bytes_text[32];
    cl_device_type type = 0;
    cl_uint units = 0;
    cl_ulong global_mem = 0, local_mem = 0;
    size_t max_wg = 0;
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetDeviceInfo(device, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL);
    clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    printf("  [%u] %s%s%s\n", index, name, is_default ? "  " : "", is_default ? marker : "");
    cli_format_device_type(type, type_text, sizeof type_text);
    printf("      type: %s\n", type_text);
    printf("      OpenCL version: %s\n", version);
    printf("      compute units: %u\n", units);
    cli_format_bytes(global_mem, bytes_text, sizeof bytes_text);
    printf("      global memory: %s\n", bytes_text);
    cli_format_bytes(local_mem, bytes_text, sizeof bytes_text);
    printf("      local memory: %s (%llu bytes)\n", bytes_text, (unsigned long long)local_mem);
    /* What a kernel's own __local arrays may take: more than the above on NVIDIA (the library's test builds). */
    flashcl_device_limits limits;
    if (flashcl_query_device_limits(device, &limits) == FLASHCL_SUCCESS) {
        cli_format_bytes(limits.static_local_mem_bytes, bytes_text, sizeof bytes_text);
        printf("      static local memory: %s (%zu bytes)%s\n", bytes_text, limits.static_local_mem_bytes,
               limits.static_local_mem_bytes > limits.local_mem_bytes ? ", found by test builds" : "");
    }
    printf("      max work-group size: %zu\n", max_wg);
    print_plans(device);
}

int flashcl_cmd_devices(int argc, char **argv) {
    const char *spec = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *value;
        int matched;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return FLASHCL_EXIT_OK;
        }
        if ((matched = cli_option_value(argc, argv, &i, "--device", &value)) != 0) {
            if (matched < 0) return FLASHCL_EXIT_USAGE;
            spec = value;
            continue;
        }
        fprintf(stderr, "flashcl devices: unknown option '%s'\n\n", argv[i]);
        print_help(stderr);
        return FLASHCL_EXIT_USAGE;
    }

    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint num_platforms = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &num_platforms);
    if (err != CL_SUCCESS || num_platforms == 0) {
        fprintf(stderr, "flashcl devices: no OpenCL platform found (clGetPlatformIDs returned %d); "
                        "is an OpenCL ICD installed?\n", (int)err);
        return FLASHCL_EXIT_FAILURE;
    }
    if (num_platforms > MAX_PLATFORMS) num_platforms = MAX_PLATFORMS;

    char why[1200] = "";
    const cl_device_id chosen = default_device(spec, why, sizeof why);
    const char *marker = spec ? "(selected by --device)" : "(default)";
    unsigned index = 0;
    for (cl_uint p = 0; p < num_platforms; ++p) {
        char name[256] = "?", vendor[256] = "?";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
        clGetPlatformInfo(platforms[p], CL_PLATFORM_VENDOR, sizeof vendor - 1, vendor, NULL);
        cl_device_id devices[MAX_DEVICES];
        cl_uint num_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &num_devices) != CL_SUCCESS ||
            num_devices == 0) {
            printf("platform %u: %s (%s): no devices\n", p, name, vendor);
            continue;
        }
        if (num_devices > MAX_DEVICES) num_devices = MAX_DEVICES;
        printf("platform %u: %s (%s)\n", p, name, vendor);
        for (cl_uint d = 0; d < num_devices; ++d, ++index) print_device(devices[d], index, devices[d] == chosen, marker);
    }
    if (!chosen) {
        const char *env = getenv("FLASHCL_DEVICE");
        if (spec) {
            fprintf(stderr, "flashcl devices: --device %s selects no device (%s)\n", spec, why);
            return FLASHCL_EXIT_FAILURE;
        }
        if (env && *env)
            printf("note: FLASHCL_DEVICE=%s selects no device (%s)\n", env, why);
        else
            printf("note: no default device (%s)\n", why);
    }
    return FLASHCL_EXIT_OK;
}

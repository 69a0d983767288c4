/* cli_util.c: option, number and plan parsing plus the library-error report every subcommand uses. */
#include "cli_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *arg = argv[*i];
    const size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "flashcl: option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int cli_parse_int(const char *text, long min, long max, int *out) {
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_double(const char *text, double *out) {
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_plan(const char *text, flashcl_plan *plan) {
    int values[4];
    const char *at = text;
    for (int i = 0; i < 4; ++i) {
        char part[16];
        const char *comma = strchr(at, ',');
        const size_t len = comma ? (size_t)(comma - at) : strlen(at);
        if (len == 0 || len >= sizeof part || (i < 3) != (comma != NULL)) return -1;
        memcpy(part, at, len);
        part[len] = '\0';
        if (cli_parse_int(part, 1, 1 << 20, &values[i]) != 0) return -1;
        at = comma ? comma + 1 : at + len;
    }
    memset(plan, 0, sizeof *plan);
    plan->block_q = values[0];
    plan->block_k = values[1];
    plan->threads_q = values[2];
    plan->threads_k = values[3];
    return 0;
}

void cli_format_plan(const flashcl_plan *p, char *out, size_t out_size) {
    snprintf(out, out_size, "block %dx%d, threads %dx%d (work-group %zu, local memory %zu B)", p->block_q,
             p->block_k, p->threads_q, p->threads_k, p->work_group_size, p->local_mem_bytes);
}

void cli_format_bytes(unsigned long long bytes, char *out, size_t out_size) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    if (u == 0 || v == floor(v))
        snprintf(out, out_size, "%.0f %s", v, units[u]);
    else
        snprintf(out, out_size, "%.1f %s", v, units[u]);
}

void cli_format_device_type(cl_device_type type, char *out, size_t out_size) {
    static const struct {
        cl_device_type bit;
        const char *name;
    } names[] = {{CL_DEVICE_TYPE_CPU, "CPU"},
                 {CL_DEVICE_TYPE_GPU, "GPU"},
                 {CL_DEVICE_TYPE_ACCELERATOR, "accelerator"},
                 {CL_DEVICE_TYPE_CUSTOM, "custom"},
                 {CL_DEVICE_TYPE_DEFAULT, "default"}};
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if ((type & names[i].bit) && used < out_size)
            used += (size_t)snprintf(out + used, out_size - used, "%s%s", used ? "+" : "", names[i].name);
    if (used == 0) snprintf(out, out_size, "unknown");
}

void cli_report_library_error(const char *command, const char *what, const flashcl_context *ctx,
                              flashcl_status status) {
    const char *detail = flashcl_last_error(ctx);
    fprintf(stderr, "flashcl %s: %s: %s%s%s\n", command, what, flashcl_status_string(status),
            detail && *detail ? ": " : "", detail ? detail : "");
    if (status == FLASHCL_ERROR_BUILD_FAILED && ctx) {
        const char *log = flashcl_last_build_log(ctx);
        if (log && *log) fprintf(stderr, "build log:\n%s\n", log);
    }
}

void cli_describe_device(cl_device_id device, char *out, size_t out_size) {
    char name[256] = "?", platform_name[256] = "?";
    cl_platform_id platform = NULL;
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL) == CL_SUCCESS)
        clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof platform_name - 1, platform_name, NULL);
    snprintf(out, out_size, "%s (%s)", name, platform_name);
}

/* device_select.c: finds the OpenCL device a user's spec names, across all platforms. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

static int contains_ignoring_case(const char *haystack, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 1;
    for (const char *h = haystack; *h; ++h) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) ++i;
        if (i == n) return 1;
    }
    return 0;
}

static int parse_index(const char *spec, unsigned *index) {
    if (!*spec) return 0;
    for (const char *c = spec; *c; ++c)
        if (!isdigit((unsigned char)*c)) return 0;
    *index = (unsigned)strtoul(spec, NULL, 10);
    return 1;
}

flashcl_status flashcl_select_device(const char *spec, cl_platform_id *platform_out, cl_device_id *device_out,
                                     char *error, size_t error_size) {
    if (!spec || !*spec) spec = getenv("FLASHCL_DEVICE");
    if (spec && !*spec) spec = NULL;

    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint num_platforms = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &num_platforms);
    if (err != CL_SUCCESS || num_platforms == 0) {
        snprintf(error, error_size, "no OpenCL platform found (clGetPlatformIDs: %s); is an ICD installed?",
                 flashcl_cl_error_name(err));
        return FLASHCL_ERROR_DEVICE_NOT_FOUND;
    }
    if (num_platforms > MAX_PLATFORMS) num_platforms = MAX_PLATFORMS;

    unsigned wanted_index = 0;
    int by_index = spec && parse_index(spec, &wanted_index);
    unsigned running_index = 0;
    cl_platform_id first_platform = NULL, gpu_platform = NULL;
    cl_device_id first_device = NULL, gpu_device = NULL;

    for (cl_uint p = 0; p < num_platforms; ++p) {
        /* Name and vendor together: POCL is "Portable Computing Language" by "The pocl project". */
        char platform_name[512] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, 255, platform_name, NULL);
        size_t used = strlen(platform_name);
        platform_name[used++] = ' ';
        clGetPlatformInfo(platforms[p], CL_PLATFORM_VENDOR, 255, platform_name + used, NULL);
        cl_device_id devices[MAX_DEVICES];
        cl_uint num_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &num_devices) != CL_SUCCESS)
            continue; /* a platform without devices (rusticl unless enabled) is normal */
        if (num_devices > MAX_DEVICES) num_devices = MAX_DEVICES;
        for (cl_uint d = 0; d < num_devices; ++d, ++running_index) {
            char device_name[256] = "";
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof device_name - 1, device_name, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            int match;
            if (by_index)
                match = running_index == wanted_index;
            else if (spec)
                match = contains_ignoring_case(platform_name, spec) || contains_ignoring_case(device_name, spec);
            else
                match = 0;
            if (match) {
                *platform_out = platforms[p];
                *device_out = devices[d];
                return FLASHCL_SUCCESS;
            }
            if (!first_device) {
                first_platform = platforms[p];
                first_device = devices[d];
            }
            if (!gpu_device && (type & CL_DEVICE_TYPE_GPU)) {
                gpu_platform = platforms[p];
                gpu_device = devices[d];
            }
        }
    }
    if (spec) {
        snprintf(error, error_size,
                 "no OpenCL device matches \"%s\" (a substring of a platform or device name, or an index; "
                 "`flashcl devices` lists them)",
                 spec);
        return FLASHCL_ERROR_DEVICE_NOT_FOUND;
    }
    if (gpu_device) {
        *platform_out = gpu_platform;
        *device_out = gpu_device;
        return FLASHCL_SUCCESS;
    }
    if (first_device) {
        *platform_out = first_platform;
        *device_out = first_device;
        return FLASHCL_SUCCESS;
    }
    snprintf(error, error_size, "OpenCL platforms were found but none has a device");
    return FLASHCL_ERROR_DEVICE_NOT_FOUND;
}

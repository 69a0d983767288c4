/* fuzz_npy.c: libFuzzer target for the .npy reader (tools/npy.c), built with
 * -fsanitize=fuzzer,address,undefined (tests/fuzz/CMakeLists.txt, FLASHCL_FUZZ=ON).
 *
 * npy_read takes a path, so each input is written to an in-memory file
 * (memfd) and read back through /proc/self/fd/N: no disk traffic. Beyond
 * "no crash, no sanitizer report", every input checks npy.h's contract:
 *   - failure: -1, *out left empty, a non-empty NUL-terminated message that
 *     fits the error buffer;
 *   - success: a rank of 0..NPY_MAX_RANK, count the product of the shape, and
 *     data exactly the input's last count * element-size bytes (the reader
 *     refuses trailing bytes), read in full so ASan checks the allocation;
 *     then npy_write of the array and npy_read of that file give the same
 *     dtype, shape and bytes back.
 * A broken promise aborts, which libFuzzer reports as a crash with the input. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "npy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int input_fd = -1, output_fd = -1;
static char input_path[64], output_path[64];

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_npy: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static int open_memfd(const char *name, char *path, size_t path_size) {
    const int fd = memfd_create(name, 0);
    if (fd < 0) die("memfd_create failed", NULL);
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    input_fd = open_memfd("fuzz_npy_input", input_path, sizeof input_path);
    output_fd = open_memfd("fuzz_npy_output", output_path, sizeof output_path);
    return 0;
}

static void set_contents(int fd, const uint8_t *data, size_t size) {
    if (ftruncate(fd, 0) != 0) die("ftruncate failed", NULL);
    size_t done = 0;
    while (done < size) {
        const ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) die("pwrite failed", NULL);
        done += (size_t)n;
    }
}

static void check_message(const char *error, size_t error_size, const char *call) {
    if (memchr(error, '\0', error_size) == NULL) die(call, "error message not NUL-terminated");
    if (error[0] == '\0') die(call, "failed without a message");
}

static int is_empty(const npy_array *a) {
    if (a->data != NULL || a->rank != 0 || a->count != 0) return 0;
    for (int i = 0; i < NPY_MAX_RANK; ++i)
        if (a->shape[i] != 0) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    set_contents(input_fd, data, size);
    npy_array a;
    char error[256];
    memset(error, 'x', sizeof error);
    if (npy_read(input_path, &a, error, sizeof error) != 0) {
        check_message(error, sizeof error, "npy_read");
        if (!is_empty(&a)) die("npy_read failed but left data in *out", error);
        return 0;
    }

    if (a.rank < 0 || a.rank > NPY_MAX_RANK) die("npy_read: rank out of range", NULL);
    size_t count = 1;
    for (int i = 0; i < a.rank; ++i) count *= a.shape[i]; /* the reader has checked for overflow */
    if (count != a.count) die("npy_read: count is not the product of the shape", NULL);
    const size_t element = npy_dtype_size(a.dtype);
    if (element == 0) die("npy_read: unknown dtype", NULL);
    const size_t bytes = a.count * element;
    if (bytes > size) die("npy_read: more data than the input holds", NULL);
    if (a.data == NULL) die("npy_read: success without a data pointer", NULL);
    if (bytes && memcmp(a.data, data + size - bytes, bytes) != 0) die("npy_read: data differ from the file's", NULL);
    char shape[NPY_MAX_RANK * 24 + 8];
    npy_format_shape(a.rank, a.shape, shape, sizeof shape);
    if (shape[0] != '(') die("npy_format_shape: bad text", shape);

    /* Round trip through the writer. */
    memset(error, 'x', sizeof error);
    if (npy_write(output_path, a.dtype, a.rank, a.shape, a.data, error, sizeof error) != 0) {
        check_message(error, sizeof error, "npy_write");
        die("npy_write refused an array npy_read accepted", error);
    }
    npy_array b;
    memset(error, 'x', sizeof error);
    if (npy_read(output_path, &b, error, sizeof error) != 0) die("npy_read refused npy_write's file", error);
    if (b.dtype != a.dtype || b.rank != a.rank || b.count != a.count) die("round trip changed dtype, rank or count", shape);
    for (int i = 0; i < a.rank; ++i)
        if (b.shape[i] != a.shape[i]) die("round trip changed the shape", shape);
    if (bytes && memcmp(a.data, b.data, bytes) != 0) die("round trip changed the data", shape);
    npy_free(&b);
    npy_free(&a);
    if (!is_empty(&a)) die("npy_free did not empty the array", NULL);
    return 0;
}

/* test_npy.c: Check suite for tools/npy.c -- round trips, header layout, and every malformed-file rejection. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

/* Each test gets a fresh directory; the fork of each test keeps them apart. */
static char temp_dir[256];

static void make_temp_dir(void) {
    snprintf(temp_dir, sizeof temp_dir, "/tmp/flashcl_npy_test_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(temp_dir));
}

static void remove_temp_dir(void) {
    DIR *dir = opendir(temp_dir);
    if (!dir) return;
    struct dirent *entry;
    char path[512];
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", temp_dir, entry->d_name);
        remove(path);
    }
    closedir(dir);
    rmdir(temp_dir);
}

static const char *temp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", temp_dir, name);
    return path;
}

static void write_file(const char *path, const void *bytes, size_t count) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, count, f), count);
    ck_assert_int_eq(fclose(f), 0);
}

static unsigned char *read_file(const char *path, size_t *count) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char buffer[1 << 16];
    *count = fread(buffer, 1, sizeof buffer, f);
    fclose(f);
    return buffer;
}

/* A version major.0 file whose header is `dict` padded with spaces to
 * `header_length` bytes (at least strlen(dict) + 1), then `data`. */
static void write_npy_raw(const char *path, int major, const char *dict, size_t header_length, const void *data,
                          size_t data_bytes) {
    static unsigned char buffer[1 << 16];
    const size_t prefix = major == 1 ? 10 : 12;
    ck_assert_uint_le(prefix + header_length + data_bytes, sizeof buffer);
    memcpy(buffer, "\x93NUMPY", 6);
    buffer[6] = (unsigned char)major;
    buffer[7] = 0;
    for (size_t i = 0; i < prefix - 8; ++i) buffer[8 + i] = (unsigned char)(header_length >> (8 * i));
    memset(buffer + prefix, ' ', header_length);
    memcpy(buffer + prefix, dict, strlen(dict));
    buffer[prefix + header_length - 1] = '\n';
    if (data_bytes) memcpy(buffer + prefix + header_length, data, data_bytes);
    write_file(path, buffer, prefix + header_length + data_bytes);
}

/* ------------------------------------------------------------------------ */

static const struct {
    int rank;
    size_t shape[NPY_MAX_RANK];
} SHAPES[] = {
    {0, {0}},          {1, {1}},          {1, {7}},           {2, {3, 4}},
    {3, {2, 0, 3}},    {4, {2, 3, 4, 5}}, {4, {1, 37, 4, 59}}, {8, {1, 1, 2, 1, 3, 1, 1, 2}},
    {2, {1000, 13}},
};
#define NUM_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])
static const npy_dtype DTYPES[] = {NPY_DTYPE_F32, NPY_DTYPE_F16, NPY_DTYPE_U16};

/* _i runs over every (dtype, shape) pair. */
START_TEST(round_trip_keeps_dtype_shape_and_bytes) {
    const npy_dtype dtype = DTYPES[_i / NUM_SHAPES];
    const int s = _i % NUM_SHAPES;
    make_temp_dir();
    size_t count = 1;
    for (int d = 0; d < SHAPES[s].rank; ++d) count *= SHAPES[s].shape[d];
    const size_t bytes = count * npy_dtype_size(dtype);
    unsigned char *data = malloc(bytes + 1);
    ck_assert_ptr_nonnull(data);
    for (size_t i = 0; i < bytes; ++i) data[i] = (unsigned char)(i * 131 + 17); /* arbitrary bit patterns */

    char error[256] = "";
    ck_assert_msg(npy_write(temp_path("a.npy"), dtype, SHAPES[s].rank, SHAPES[s].shape, data, error, sizeof error) == 0,
                  "%s", error);
    npy_array a;
    ck_assert_msg(npy_read(temp_path("a.npy"), &a, error, sizeof error) == 0, "%s", error);
    ck_assert_int_eq(a.dtype, dtype);
    ck_assert_int_eq(a.rank, SHAPES[s].rank);
    for (int d = 0; d < a.rank; ++d) ck_assert_uint_eq(a.shape[d], SHAPES[s].shape[d]);
    ck_assert_uint_eq(a.count, count);
    ck_assert_int_eq(memcmp(a.data, data, bytes), 0);
    npy_free(&a);
    ck_assert_ptr_null(a.data);
    free(data);
    remove_temp_dir();
}
END_TEST

/* np.save's layout: version 1.0, a header ending in '\n' and padded with
 * spaces so the data starts at a multiple of 64, shape tuples in Python
 * syntax ("(7,)" for one dimension). */
START_TEST(written_header_is_padded_to_64_bytes) {
    make_temp_dir();
    const int s = _i;
    size_t count = 1;
    for (int d = 0; d < SHAPES[s].rank; ++d) count *= SHAPES[s].shape[d];
    float *data = calloc(count + 1, sizeof(float));
    ck_assert_ptr_nonnull(data);
    char error[256];
    ck_assert(npy_write(temp_path("h.npy"), NPY_DTYPE_F32, SHAPES[s].rank, SHAPES[s].shape, data, error,
                        sizeof error) == 0);
    free(data);
    size_t size;
    const unsigned char *file = read_file(temp_path("h.npy"), &size);
    ck_assert_int_eq(memcmp(file, "\x93NUMPY\x01\x00", 8), 0);
    const size_t header_length = file[8] | (size_t)file[9] << 8;
    ck_assert_uint_eq((10 + header_length) % 64, 0);
    ck_assert_uint_eq(size, 10 + header_length + count * 4);
    ck_assert_int_eq(file[10 + header_length - 1], '\n');
    char shape_text[200];
    npy_format_shape(SHAPES[s].rank, SHAPES[s].shape, shape_text, sizeof shape_text);
    char expected[300];
    snprintf(expected, sizeof expected, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
    ck_assert_int_eq(memcmp(file + 10, expected, strlen(expected)), 0);
    for (size_t i = 10 + strlen(expected); i < 10 + header_length - 1; ++i) ck_assert_int_eq(file[i], ' ');
    remove_temp_dir();
}
END_TEST

START_TEST(shape_text_uses_python_tuple_syntax) {
    char text[64];
    const size_t one[1] = {7}, two[2] = {2, 3};
    npy_format_shape(0, NULL, text, sizeof text);
    ck_assert_str_eq(text, "()");
    npy_format_shape(1, one, text, sizeof text);
    ck_assert_str_eq(text, "(7,)");
    npy_format_shape(2, two, text, sizeof text);
    ck_assert_str_eq(text, "(2, 3)");
}
END_TEST

/* Headers as other writers produce them: versions 2.0 and 3.0 (4-byte
 * length), the old 16-byte alignment, double quotes, any key order, no
 * trailing comma, Python 2 longs. */
static const struct {
    int major;
    const char *dict;
} ACCEPTED_HEADERS[] = {
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
    {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
    {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
    {1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}"},
    {1, "{'shape': (2,3), 'fortran_order': False, 'descr': '<f4'}"},
    {1, "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }"},
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }"},
};

START_TEST(reads_headers_of_other_writers) {
    make_temp_dir();
    const float data[6] = {1.0f, -2.0f, 3.5f, 0.0f, -0.25f, 1e-30f};
    const size_t dict_length = strlen(ACCEPTED_HEADERS[_i].dict);
    /* Pad to the 16-byte alignment of old NumPy versions for the first one. */
    const size_t prefix = ACCEPTED_HEADERS[_i].major == 1 ? 10 : 12;
    size_t header_length = dict_length + 1;
    const size_t alignment = _i == 0 ? 16 : 64;
    header_length += (alignment - (prefix + header_length) % alignment) % alignment;
    write_npy_raw(temp_path("o.npy"), ACCEPTED_HEADERS[_i].major, ACCEPTED_HEADERS[_i].dict, header_length, data,
                  sizeof data);
    npy_array a;
    char error[256] = "";
    ck_assert_msg(npy_read(temp_path("o.npy"), &a, error, sizeof error) == 0, "%s", error);
    ck_assert_int_eq(a.dtype, NPY_DTYPE_F32);
    ck_assert_int_eq(a.rank, 2);
    ck_assert_uint_eq(a.shape[0], 2);
    ck_assert_uint_eq(a.shape[1], 3);
    ck_assert_int_eq(memcmp(a.data, data, sizeof data), 0);
    npy_free(&a);
    remove_temp_dir();
}
END_TEST

/* One malformed file each, with the words its message must contain. */
static const struct {
    const char *name;
    int major, minor;
    const char *dict; /* NULL: raw bytes below */
    int data_bytes;   /* for a (2, 3) float32 array 24 is right */
    const char *raw;
    int raw_length;
    const char *expected;
} MALFORMED[] = {
    {"empty", 0, 0, NULL, 0, "", 0, "empty file"},
    {"short magic", 0, 0, NULL, 0, "\x93NUM", 4, "bad magic"},
    {"bad magic", 0, 0, NULL, 0, "\x93NUMPX\x01\x00\x10\x00{}              ", 26, "bad magic"},
    {"version cut", 0, 0, NULL, 0, "\x93NUMPY\x01", 7, "truncated header"},
    {"length cut", 0, 0, NULL, 0, "\x93NUMPY\x01\x00\x10", 9, "truncated header"},
    {"header cut", 0, 0, NULL, 0, "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4'", 25, "truncated header"},
    {"version 4.0", 4, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, NULL, 0,
     "unsupported .npy version 4.0"},
    {"version 1.1", 1, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, NULL, 0,
     "unsupported .npy version 1.1"},
    {"not a dict", 1, 0, "['descr', '<f4']", 24, NULL, 0, "bad header"},
    {"missing shape", 1, 0, "{'descr': '<f4', 'fortran_order': False}", 24, NULL, 0, "needs the keys"},
    {"unknown key", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24, NULL, 0,
     "unexpected key 'x'"},
    {"duplicate key", 1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24, NULL, 0,
     "appears twice"},
    {"missing colon", 1, 0, "{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24, NULL, 0, "expected ':'"},
    {"unterminated string", 1, 0, "{'descr': '<f4", 24, NULL, 0, "unterminated string"},
    {"text after dict", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", 24, NULL, 0,
     "unexpected text"},
    {"float64", 1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48, NULL, 0,
     "unsupported dtype '<f8'"},
    {"int64", 1, 0, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", 48, NULL, 0,
     "unsupported dtype '<i8'"},
    {"big-endian", 1, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, NULL, 0, "big-endian"},
    {"structured", 1, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", 24, NULL, 0,
     "structured"},
    {"fortran order", 1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, NULL, 0,
     "Fortran-order"},
    {"order not bool", 1, 0, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24, NULL, 0,
     "True or False"},
    {"negative dim", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24, NULL, 0,
     "negative dimension"},
    {"shape list", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 24, NULL, 0,
     "must be a tuple"},
    {"shape text", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 24, NULL, 0,
     "tuple of integers"},
    {"nine dims", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4, NULL, 0,
     "more than 8 dimensions"},
    {"huge dim", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 3), }", 24, NULL, 0,
     "too large"},
    {"size overflow", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 24, NULL,
     0, "overflows"},
    {"truncated data", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23, NULL, 0,
     "truncated data"},
    {"huge shape, small file", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }", 24, NULL,
     0, "truncated data"},
    {"trailing data", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 25, NULL, 0,
     "unexpected bytes after the data"},
};

START_TEST(rejects_malformed_file_with_a_reason) {
    make_temp_dir();
    const char *path = temp_path("bad.npy");
    if (MALFORMED[_i].dict) {
        static unsigned char buffer[4096];
        const char *dict = MALFORMED[_i].dict;
        const size_t header_length = ((10 + strlen(dict) + 1 + 63) / 64) * 64 - 10;
        memcpy(buffer, "\x93NUMPY", 6);
        buffer[6] = (unsigned char)MALFORMED[_i].major;
        buffer[7] = (unsigned char)MALFORMED[_i].minor;
        buffer[8] = (unsigned char)(header_length & 0xff);
        buffer[9] = (unsigned char)(header_length >> 8);
        memset(buffer + 10, ' ', header_length);
        memcpy(buffer + 10, dict, strlen(dict));
        buffer[10 + header_length - 1] = '\n';
        memset(buffer + 10 + header_length, 0x3f, (size_t)MALFORMED[_i].data_bytes);
        write_file(path, buffer, 10 + header_length + (size_t)MALFORMED[_i].data_bytes);
    } else {
        write_file(path, MALFORMED[_i].raw, (size_t)MALFORMED[_i].raw_length);
    }
    npy_array a;
    memset(&a, 0x55, sizeof a); /* npy_read must empty it on failure */
    char error[256] = "";
    ck_assert_msg(npy_read(path, &a, error, sizeof error) == -1, "%s: accepted", MALFORMED[_i].name);
    ck_assert_msg(strstr(error, MALFORMED[_i].expected) != NULL, "%s: message \"%s\" lacks \"%s\"", MALFORMED[_i].name,
                  error, MALFORMED[_i].expected);
    ck_assert_ptr_null(a.data);
    ck_assert_int_eq(a.rank, 0);
    remove_temp_dir();
}
END_TEST

START_TEST(missing_file_is_reported) {
    npy_array a;
    char error[256] = "";
    ck_assert_int_eq(npy_read("/nonexistent/flashcl/q.npy", &a, error, sizeof error), -1);
    ck_assert_msg(strstr(error, "cannot open") != NULL, "%s", error);
    ck_assert_ptr_null(a.data);
}
END_TEST

START_TEST(write_into_missing_directory_fails) {
    const size_t shape[1] = {2};
    const float data[2] = {1.0f, 2.0f};
    char error[256] = "";
    ck_assert_int_eq(npy_write("/nonexistent/flashcl/o.npy", NPY_DTYPE_F32, 1, shape, data, error, sizeof error), -1);
    ck_assert_msg(strstr(error, "cannot create") != NULL, "%s", error);
}
END_TEST

/* Header text that reaches a message: a crafted file must not put control
 * bytes (a newline and a fake "check: forward passed", a terminal escape,
 * the single-byte CSI 0x9b) on the terminal, nor a long run of text. */
static const struct {
    const char *name;
    const char *dict;
    const char *expected; /* in the message */
} HOSTILE[] = {
    {"newline and ESC in descr", "{'descr': '<f4\ncheck: forward passed\n\x1b[2J', 'fortran_order': False, 'shape': (2,), }",
     "unterminated string"},
    {"ESC in descr", "{'descr': '<f4\x1b[2Jcheck: forward passed', 'fortran_order': False, 'shape': (2,), }",
     "control character in a string"},
    {"ESC in a key", "{'\x1b]0;title\x07': 1, }", "control character in a string"},
    {"C1 CSI in descr", "{'descr': '\x9b" "31mcheck: forward passed', 'fortran_order': False, 'shape': (2,), }",
     "unsupported dtype '\\x9b31mcheck: forward passed'"},
    {"high bytes in a key", "{'\xc3\xa9t\xe9\xff': 1, }", "unexpected key '\\xc3\\xa9t\\xe9\\xff'"},
    {"long descr", "{'descr': 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789', 'fortran_order': False, "
                   "'shape': (2,), }",
     "'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv...'"},
    {"duplicate key", "{'shape': (2,), 'shape': (2,), }", "key 'shape' appears twice"},
};

START_TEST(error_text_is_printable_and_bounded) {
    make_temp_dir();
    const char *path = temp_path("hostile.npy");
    write_npy_raw(path, 1, HOSTILE[_i].dict, ((10 + strlen(HOSTILE[_i].dict) + 1 + 63) / 64) * 64 - 10, "\0\0\0\0\0\0\0",
                  8);
    npy_array a;
    char error[512] = "";
    ck_assert_msg(npy_read(path, &a, error, sizeof error) == -1, "%s: accepted", HOSTILE[_i].name);
    ck_assert_msg(strstr(error, HOSTILE[_i].expected) != NULL, "%s: message \"%s\" lacks \"%s\"", HOSTILE[_i].name,
                  error, HOSTILE[_i].expected);
    for (const char *c = error; *c; ++c)
        ck_assert_msg((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f, "%s: byte 0x%02x in the message",
                      HOSTILE[_i].name, (unsigned char)*c);
    ck_assert_uint_lt(strlen(error), 300);
    remove_temp_dir();
}
END_TEST

START_TEST(stream_writer_matches_file_writer) {
    make_temp_dir();
    const size_t shape[2] = {3, 5};
    float data[15];
    for (int i = 0; i < 15; ++i) data[i] = (float)i * 0.25f;
    char error[256] = "";
    ck_assert_int_eq(npy_write(temp_path("a.npy"), NPY_DTYPE_F32, 2, shape, data, error, sizeof error), 0);
    FILE *f = fopen(temp_path("b.npy"), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(npy_write_stream(f, NPY_DTYPE_F32, 2, shape, data, error, sizeof error), 0);
    ck_assert_int_eq(fclose(f), 0);
    size_t a_count, b_count;
    static unsigned char a_bytes[1 << 16];
    memcpy(a_bytes, read_file(temp_path("a.npy"), &a_count), sizeof a_bytes);
    const unsigned char *b_bytes = read_file(temp_path("b.npy"), &b_count);
    ck_assert_uint_eq(a_count, b_count);
    ck_assert_int_eq(memcmp(a_bytes, b_bytes, a_count), 0);
    remove_temp_dir();
}
END_TEST

static Suite *npy_suite(void) {
    Suite *s = suite_create("npy");
    TCase *round_trip = tcase_create("round trip");
    tcase_add_loop_test(round_trip, round_trip_keeps_dtype_shape_and_bytes, 0, 3 * NUM_SHAPES);
    tcase_add_loop_test(round_trip, written_header_is_padded_to_64_bytes, 0, NUM_SHAPES);
    tcase_add_test(round_trip, shape_text_uses_python_tuple_syntax);
    suite_add_tcase(s, round_trip);
    TCase *reading = tcase_create("reading");
    tcase_add_loop_test(reading, reads_headers_of_other_writers, 0,
                        (int)(sizeof ACCEPTED_HEADERS / sizeof ACCEPTED_HEADERS[0]));
    tcase_add_loop_test(reading, rejects_malformed_file_with_a_reason, 0, (int)(sizeof MALFORMED / sizeof MALFORMED[0]));
    tcase_add_test(reading, missing_file_is_reported);
    tcase_add_test(reading, write_into_missing_directory_fails);
    tcase_add_loop_test(reading, error_text_is_printable_and_bounded, 0, (int)(sizeof HOSTILE / sizeof HOSTILE[0]));
    tcase_add_test(reading, stream_writer_matches_file_writer);
    suite_add_tcase(s, reading);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(npy_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

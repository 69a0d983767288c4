/* npy.c: the .npy file format (magic, version, a Python-dict header, raw C-order data). */
#include "npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
/* NumPy itself refuses headers past 10000 bytes unless told otherwise; a
 * larger limit still keeps a corrupt length from allocating gigabytes. */
#define MAX_HEADER_BYTES (1u << 20)
#define DATA_ALIGNMENT 64

size_t npy_dtype_size(npy_dtype dtype) {
    switch (dtype) {
    case NPY_DTYPE_F32:
        return 4;
    case NPY_DTYPE_F16:
    case NPY_DTYPE_U16:
        return 2;
    case NPY_DTYPE_U8:
        return 1;
    case NPY_DTYPE_I32:
        return 4;
    }
    return 0;
}

const char *npy_dtype_descr(npy_dtype dtype) {
    switch (dtype) {
    case NPY_DTYPE_F32:
        return "<f4";
    case NPY_DTYPE_F16:
        return "<f2";
    case NPY_DTYPE_U16:
        return "<u2";
    case NPY_DTYPE_U8:
        return "|u1";
    case NPY_DTYPE_I32:
        return "<i4";
    }
    return "?";
}

const char *npy_dtype_name(npy_dtype dtype) {
    switch (dtype) {
    case NPY_DTYPE_F32:
        return "float32";
    case NPY_DTYPE_F16:
        return "float16";
    case NPY_DTYPE_U16:
        return "uint16";
    case NPY_DTYPE_U8:
        return "uint8";
    case NPY_DTYPE_I32:
        return "int32";
    }
    return "unknown";
}

/* The data bytes are the host's: the format is little-endian only. */
static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

void npy_format_shape(int rank, const size_t *shape, char *out, size_t out_size) {
    size_t used = 0;
    if (out_size == 0) return;
    out[0] = '\0';
    used += (size_t)snprintf(out, out_size, "(");
    for (int i = 0; i < rank && used < out_size; ++i)
        used += (size_t)snprintf(out + used, out_size - used, i ? ", %zu" : "%zu", shape[i]);
    if (used < out_size) snprintf(out + used, out_size - used, rank == 1 ? ",)" : ")");
}

void npy_free(npy_array *array) {
    if (!array) return;
    free(array->data);
    memset(array, 0, sizeof *array);
}

/* ------------------------------------------------------------------------ */
/* Header parsing: the subset of Python literal syntax np.save writes.       */
/* ------------------------------------------------------------------------ */

typedef struct header_parser {
    const char *at;
    const char *end;
    char *error;
    size_t error_size;
} header_parser;

/* Header text in a message: a crafted file must not be able to put control
 * sequences (terminal escapes, a newline and a fake "check: ... passed"
 * line) on the user's terminal, nor flood it. Printable ASCII is copied,
 * any other byte becomes \xNN and a backslash \\; text past
 * QUOTED_TEXT_LIMIT bytes is cut with "...". QUOTED_SIZE holds the worst
 * case (every byte escaped). */
#define QUOTED_TEXT_LIMIT 48
#define QUOTED_SIZE (4 * QUOTED_TEXT_LIMIT + 8)

static void quote_header_text(const char *text, char *out, size_t out_size) {
    size_t used = 0;
    if (out_size == 0) return;
    for (size_t i = 0; text[i] && used + 5 < out_size; ++i) {
        if (i == QUOTED_TEXT_LIMIT) {
            snprintf(out + used, out_size - used, "...");
            return;
        }
        const unsigned char c = (unsigned char)text[i];
        if (c == '\\')
            used += (size_t)snprintf(out + used, out_size - used, "\\\\");
        else if (c >= 0x20 && c < 0x7f)
            out[used++] = (char)c;
        else
            used += (size_t)snprintf(out + used, out_size - used, "\\x%02x", c);
    }
    out[used] = '\0';
}

static int parse_fail(header_parser *p, const char *message) {
    snprintf(p->error, p->error_size, "bad header: %s", message);
    return -1;
}

static void skip_space(header_parser *p) {
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r')) ++p->at;
}

static int accept_char(header_parser *p, char c) {
    skip_space(p);
    if (p->at < p->end && *p->at == c) {
        ++p->at;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes into out (truncation is an error). */
static int parse_string(header_parser *p, char *out, size_t out_size) {
    skip_space(p);
    if (p->at >= p->end || (*p->at != '\'' && *p->at != '"')) return parse_fail(p, "expected a quoted string");
    const char quote = *p->at++;
    size_t n = 0;
    while (p->at < p->end && *p->at != quote) {
        if (*p->at == '\\') return parse_fail(p, "escape sequences in strings are not supported");
        /* A raw newline ends a Python literal unterminated, and repr (which
         * np.save uses) never writes any control character raw. */
        if (*p->at == '\n') return parse_fail(p, "unterminated string");
        if ((unsigned char)*p->at < 0x20 || *p->at == 0x7f) return parse_fail(p, "control character in a string");
        if (n + 1 >= out_size) return parse_fail(p, "string too long");
        out[n++] = *p->at++;
    }
    if (p->at >= p->end) return parse_fail(p, "unterminated string");
    ++p->at;
    out[n] = '\0';
    return 0;
}

static int parse_bool(header_parser *p, int *value) {
    skip_space(p);
    const size_t left = (size_t)(p->end - p->at);
    if (left >= 4 && memcmp(p->at, "True", 4) == 0) {
        p->at += 4;
        *value = 1;
        return 0;
    }
    if (left >= 5 && memcmp(p->at, "False", 5) == 0) {
        p->at += 5;
        *value = 0;
        return 0;
    }
    return parse_fail(p, "fortran_order must be True or False");
}

static int parse_dim(header_parser *p, size_t *value) {
    skip_space(p);
    if (p->at < p->end && *p->at == '-') return parse_fail(p, "negative dimension in shape");
    if (p->at >= p->end || *p->at < '0' || *p->at > '9') return parse_fail(p, "shape must be a tuple of integers");
    size_t v = 0;
    while (p->at < p->end && *p->at >= '0' && *p->at <= '9') {
        const size_t digit = (size_t)(*p->at - '0');
        if (v > (SIZE_MAX - digit) / 10) return parse_fail(p, "dimension too large");
        v = v * 10 + digit;
        ++p->at;
    }
    if (p->at < p->end && (*p->at == 'L' || *p->at == 'l')) ++p->at; /* Python 2 long */
    *value = v;
    return 0;
}

static int parse_shape(header_parser *p, int *rank, size_t *shape) {
    if (!accept_char(p, '(')) return parse_fail(p, "shape must be a tuple");
    *rank = 0;
    if (accept_char(p, ')')) return 0;
    for (;;) {
        if (*rank == NPY_MAX_RANK) return parse_fail(p, "more than 8 dimensions");
        if (parse_dim(p, &shape[*rank]) != 0) return -1;
        ++*rank;
        if (accept_char(p, ')')) return 0;
        if (!accept_char(p, ',')) return parse_fail(p, "expected ',' or ')' in shape");
        if (accept_char(p, ')')) return 0;
    }
}

static int dtype_from_descr(const char *descr, npy_dtype *dtype, char *error, size_t error_size) {
    char quoted[QUOTED_SIZE];
    quote_header_text(descr, quoted, sizeof quoted);
    if (strcmp(descr, "<f4") == 0)
        *dtype = NPY_DTYPE_F32;
    else if (strcmp(descr, "<f2") == 0)
        *dtype = NPY_DTYPE_F16;
    else if (strcmp(descr, "<u2") == 0)
        *dtype = NPY_DTYPE_U16;
    else if (strcmp(descr, "|u1") == 0 || strcmp(descr, "<u1") == 0)
        *dtype = NPY_DTYPE_U8;
    else if (strcmp(descr, "<i4") == 0)
        *dtype = NPY_DTYPE_I32;
    else if (descr[0] == '>') {
        snprintf(error, error_size, "big-endian dtype '%s' is not supported (use '<f4', '<f2' or '<u2')", quoted);
        return -1;
    } else {
        snprintf(error, error_size,
                 "unsupported dtype '%s' (supported: '<f4' float32, '<f2' float16, '<u2' bfloat16 bits, '|u1' uint8, '<i4' int32)", quoted);
        return -1;
    }
    return 0;
}

static int parse_header(const char *text, size_t length, npy_array *out, char *error, size_t error_size) {
    header_parser p = {text, text + length, error, error_size};
    char key[32], descr[64] = "", quoted[QUOTED_SIZE];
    int fortran_order = 0, seen_descr = 0, seen_order = 0, seen_shape = 0;
    if (!accept_char(&p, '{')) return parse_fail(&p, "does not start with '{'");
    while (!accept_char(&p, '}')) {
        if (parse_string(&p, key, sizeof key) != 0) return -1;
        if (!accept_char(&p, ':')) return parse_fail(&p, "expected ':' after a key");
        int *seen;
        if (strcmp(key, "descr") == 0) {
            skip_space(&p);
            if (p.at < p.end && *p.at == '[')
                return parse_fail(&p, "structured dtypes are not supported");
            if (parse_string(&p, descr, sizeof descr) != 0) return -1;
            seen = &seen_descr;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_bool(&p, &fortran_order) != 0) return -1;
            seen = &seen_order;
        } else if (strcmp(key, "shape") == 0) {
            if (parse_shape(&p, &out->rank, out->shape) != 0) return -1;
            seen = &seen_shape;
        } else {
            quote_header_text(key, quoted, sizeof quoted);
            snprintf(error, error_size, "bad header: unexpected key '%s'", quoted);
            return -1;
        }
        if (*seen) {
            quote_header_text(key, quoted, sizeof quoted);
            snprintf(error, error_size, "bad header: key '%s' appears twice", quoted);
            return -1;
        }
        *seen = 1;
        if (accept_char(&p, '}')) break;
        if (!accept_char(&p, ',')) return parse_fail(&p, "expected ',' or '}' after a value");
    }
    skip_space(&p);
    if (p.at != p.end) return parse_fail(&p, "unexpected text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape)
        return parse_fail(&p, "needs the keys 'descr', 'fortran_order' and 'shape'");
    if (fortran_order) {
        snprintf(error, error_size, "Fortran-order arrays are not supported (save a C-order array)");
        return -1;
    }
    return dtype_from_descr(descr, &out->dtype, error, error_size);
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

static uint32_t read_le(const unsigned char *bytes, int count) {
    uint32_t v = 0;
    for (int i = count - 1; i >= 0; --i) v = (v << 8) | bytes[i];
    return v;
}

/* Element count and byte size of a shape, or -1 on overflow. */
static int shape_bytes(int rank, const size_t *shape, size_t element_size, size_t *count, size_t *bytes) {
    size_t n = 1;
    for (int i = 0; i < rank; ++i) {
        if (shape[i] != 0 && n > SIZE_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    if (n > SIZE_MAX / element_size) return -1;
    *count = n;
    *bytes = n * element_size;
    return 0;
}

static int read_array(FILE *f, npy_array *out, char *error, size_t error_size) {
    unsigned char prefix[12];
    size_t got = fread(prefix, 1, 8, f);
    if (got == 0) {
        snprintf(error, error_size, "empty file");
        return -1;
    }
    if (got < sizeof NPY_MAGIC || memcmp(prefix, NPY_MAGIC, sizeof NPY_MAGIC) != 0) {
        snprintf(error, error_size, "not a .npy file (bad magic)");
        return -1;
    }
    if (got < 8) {
        snprintf(error, error_size, "truncated header (file ends inside the version)");
        return -1;
    }
    const int major = prefix[6], minor = prefix[7];
    if (minor != 0 || major < 1 || major > 3) {
        snprintf(error, error_size, "unsupported .npy version %d.%d (supported: 1.0, 2.0, 3.0)", major, minor);
        return -1;
    }
    const int length_bytes = major == 1 ? 2 : 4;
    if (fread(prefix + 8, 1, (size_t)length_bytes, f) != (size_t)length_bytes) {
        snprintf(error, error_size, "truncated header (file ends inside the header length)");
        return -1;
    }
    const uint32_t header_length = read_le(prefix + 8, length_bytes);
    if (header_length > MAX_HEADER_BYTES) {
        snprintf(error, error_size, "bad header: length %lu is implausibly large", (unsigned long)header_length);
        return -1;
    }
    char *header = malloc(header_length + 1);
    if (!header) {
        snprintf(error, error_size, "out of memory reading the header");
        return -1;
    }
    got = fread(header, 1, header_length, f);
    if (got != header_length) {
        snprintf(error, error_size, "truncated header (expected %lu bytes, found %zu)", (unsigned long)header_length,
                 got);
        free(header);
        return -1;
    }
    header[header_length] = '\0';
    int parsed = parse_header(header, header_length, out, error, error_size);
    free(header);
    if (parsed != 0) return -1;

    size_t bytes;
    if (shape_bytes(out->rank, out->shape, npy_dtype_size(out->dtype), &out->count, &bytes) != 0) {
        snprintf(error, error_size, "bad header: the shape's size overflows");
        return -1;
    }
    /* Compare with the file's size before allocating, so a corrupt shape
     * reports truncation instead of exhausting memory. */
    const long data_start = ftell(f);
    if (data_start < 0 || fseek(f, 0, SEEK_END) != 0) {
        snprintf(error, error_size, "cannot determine the file size: %s", strerror(errno));
        return -1;
    }
    const long file_end = ftell(f);
    if (file_end < data_start || fseek(f, data_start, SEEK_SET) != 0) {
        snprintf(error, error_size, "cannot determine the file size: %s", strerror(errno));
        return -1;
    }
    const size_t available = (size_t)(file_end - data_start);
    if (available < bytes) {
        snprintf(error, error_size, "truncated data (shape needs %zu bytes, file has %zu)", bytes, available);
        return -1;
    }
    if (available > bytes) {
        snprintf(error, error_size, "%zu unexpected bytes after the data (shape needs %zu)", available - bytes, bytes);
        return -1;
    }
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        snprintf(error, error_size, "out of memory (%zu bytes of data)", bytes);
        return -1;
    }
    if (fread(out->data, 1, bytes, f) != bytes) {
        snprintf(error, error_size, "read error: %s", ferror(f) ? strerror(errno) : "file shrank while reading");
        return -1;
    }
    return 0;
}

int npy_read(const char *path, npy_array *out, char *error, size_t error_size) {
    memset(out, 0, sizeof *out);
    if (!host_is_little_endian()) {
        snprintf(error, error_size, "big-endian hosts are not supported");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(error, error_size, "cannot open: %s", strerror(errno));
        return -1;
    }
    int result = read_array(f, out, error, error_size);
    fclose(f);
    if (result != 0) npy_free(out);
    return result;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

/* The header and data size of an array to write; 0, or -1 with a message. */
static int write_plan(npy_dtype dtype, int rank, const size_t *shape, size_t *bytes, char *error, size_t error_size) {
    if (!host_is_little_endian()) {
        snprintf(error, error_size, "big-endian hosts are not supported");
        return -1;
    }
    if (rank < 0 || rank > NPY_MAX_RANK || npy_dtype_size(dtype) == 0) {
        snprintf(error, error_size, "cannot write rank %d / dtype %d", rank, (int)dtype);
        return -1;
    }
    size_t count;
    if (shape_bytes(rank, shape, npy_dtype_size(dtype), &count, bytes) != 0) {
        snprintf(error, error_size, "the shape's size overflows");
        return -1;
    }
    return 0;
}

int npy_write_stream(FILE *f, npy_dtype dtype, int rank, const size_t *shape, const void *data, char *error,
                     size_t error_size) {
    size_t bytes;
    if (write_plan(dtype, rank, shape, &bytes, error, error_size) != 0) return -1;
    char shape_text[NPY_MAX_RANK * 24 + 8];
    npy_format_shape(rank, shape, shape_text, sizeof shape_text);
    char dict[sizeof shape_text + 80];
    const int dict_length = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                                     npy_dtype_descr(dtype), shape_text);
    /* Pad with spaces and end with '\n' so magic + version + length +
     * header is a multiple of 64: the data then starts aligned. With at most
     * 8 dimensions the header stays far below version 1.0's 65535 bytes. */
    const size_t prefix = 10;
    const size_t total = ((prefix + (size_t)dict_length + 1 + DATA_ALIGNMENT - 1) / DATA_ALIGNMENT) * DATA_ALIGNMENT;
    const size_t header_length = total - prefix;
    unsigned char head[10];
    memcpy(head, NPY_MAGIC, sizeof NPY_MAGIC);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(header_length & 0xff);
    head[9] = (unsigned char)(header_length >> 8);

    errno = 0;
    int ok = fwrite(head, 1, prefix, f) == prefix && fwrite(dict, 1, (size_t)dict_length, f) == (size_t)dict_length;
    for (size_t i = (size_t)dict_length; ok && i + 1 < header_length; ++i) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    ok = ok && fflush(f) == 0;
    if (!ok) {
        snprintf(error, error_size, "write failed: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

int npy_write(const char *path, npy_dtype dtype, int rank, const size_t *shape, const void *data, char *error,
              size_t error_size) {
    size_t bytes;
    if (write_plan(dtype, rank, shape, &bytes, error, error_size) != 0) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(error, error_size, "cannot create: %s", strerror(errno));
        return -1;
    }
    int failed = npy_write_stream(f, dtype, rank, shape, data, error, error_size) != 0;
    if (fclose(f) != 0 && !failed) {
        snprintf(error, error_size, "write failed: %s", strerror(errno));
        failed = 1;
    }
    if (failed) remove(path);
    return failed ? -1 : 0;
}

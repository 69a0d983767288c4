/* make_inputs.c: writes random .npy inputs (and malformed files) for the end-to-end tests of `flashcl run`. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_rng.h"
#include "half_float.h"
#include "npy.h"

static void usage(void) {
    fprintf(stderr,
            "usage: cli_make_inputs DIR LAYOUT DTYPE B,Hq,Hkv,Sq,Sk,D SEED [equal-v-rows]\n"
            "         writes DIR/q.npy k.npy v.npy dout.npy (LAYOUT bhsd|bshd, DTYPE f32|f16|bf16);\n"
            "         equal-v-rows: every row of V is the same vector (dQ = dK = 0 exactly)\n"
            "       cli_make_inputs --malformed DIR\n"
            "         writes a valid small problem (good_q/k/v.npy) and malformed variants\n"
            "       cli_make_inputs --paths DIR\n"
            "         writes a small problem and q_symlink.npy, q_hardlink.npy: links to q.npy\n"
            "       cli_make_inputs --block-mask FILE ROWS COLS\n"
            "         writes a random uint8 block mask\n"
            "       cli_make_inputs --slopes FILE N[,M] SEED\n"
            "         writes random float32 ALiBi slopes in [0.02, 0.5], shape (N,) or (N, M)\n"
            "       cli_make_inputs --bias FILE B,H,SQ,SK SEED\n"
            "         writes a random float32 attention bias in [-2, 2], every 11th element and the\n"
            "         first row of the first plane -inf (an empty row)\n"
            "       cli_make_inputs --varlen DIR Hq,Hkv,D LQ:LK,LQ:LK,... SEED\n"
            "         writes a packed float32 batch: q, dout (total_q,Hq,D), k, v (total_k,Hkv,D),\n"
            "         cu_q.npy, cu_k.npy (int32 cumulative lengths)\n");
}

/* Roughly normal (Irwin-Hall of 4), like the randn inputs attention sees in practice. */
static float random_value(void) { return (float)((uniform() + uniform() + uniform() + uniform() - 2.0) * 1.7); }

/* Random values; with equal_rows, each row of `shape[3]` values is the first one again. */
static int write_values(const char *dir, const char *name, const char *dtype, const size_t shape[4], int equal_rows) {
    const size_t count = shape[0] * shape[1] * shape[2] * shape[3];
    const int f32 = strcmp(dtype, "f32") == 0;
    void *data = malloc(count * (f32 ? 4 : 2));
    float *row = malloc(shape[3] * sizeof *row);
    if (!data || !row) return free(data), free(row), -1;
    for (size_t i = 0; equal_rows && i < shape[3]; ++i) row[i] = random_value(); /* only then: other files keep their values */
    for (size_t i = 0; i < count; ++i) {
        const float x = equal_rows ? row[i % shape[3]] : random_value();
        if (f32)
            ((float *)data)[i] = x;
        else
            ((uint16_t *)data)[i] = strcmp(dtype, "f16") == 0 ? float_to_half(x) : float_to_bf16(x);
    }
    const npy_dtype type = f32 ? NPY_DTYPE_F32 : strcmp(dtype, "f16") == 0 ? NPY_DTYPE_F16 : NPY_DTYPE_U16;
    char path[4096], error[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int result = npy_write(path, type, 4, shape, data, error, sizeof error);
    if (result != 0) fprintf(stderr, "cli_make_inputs: %s: %s\n", path, error);
    free(data);
    free(row);
    return result;
}

static int write_random(const char *dir, const char *name, const char *dtype, const size_t shape[4]) {
    return write_values(dir, name, dtype, shape, 0);
}

static int make_problem(int argc, char **argv) {
    const char *dir = argv[1], *layout = argv[2], *dtype = argv[3];
    const int equal_v_rows = argc == 7;
    int b, hq, hkv, sq, sk, d;
    if ((equal_v_rows && strcmp(argv[6], "equal-v-rows") != 0) ||
        sscanf(argv[4], "%d,%d,%d,%d,%d,%d", &b, &hq, &hkv, &sq, &sk, &d) != 6 ||
        (strcmp(layout, "bhsd") != 0 && strcmp(layout, "bshd") != 0) ||
        (strcmp(dtype, "f32") != 0 && strcmp(dtype, "f16") != 0 && strcmp(dtype, "bf16") != 0)) {
        usage();
        return 2;
    }
    rng_state = strtoull(argv[5], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    const int bshd = strcmp(layout, "bshd") == 0;
    const size_t q_shape[4] = {(size_t)b, (size_t)(bshd ? sq : hq), (size_t)(bshd ? hq : sq), (size_t)d};
    const size_t kv_shape[4] = {(size_t)b, (size_t)(bshd ? sk : hkv), (size_t)(bshd ? hkv : sk), (size_t)d};
    return write_random(dir, "q.npy", dtype, q_shape) || write_random(dir, "k.npy", dtype, kv_shape) ||
                   write_values(dir, "v.npy", dtype, kv_shape, equal_v_rows) ||
                   write_random(dir, "dout.npy", dtype, q_shape)
               ? 1
               : 0;
}

/* ------------------------------------------------------------------------ */
/* Malformed files: each breaks one rule of the format or of `flashcl run`.  */
/* ------------------------------------------------------------------------ */

static int write_bytes(const char *dir, const char *name, const void *bytes, size_t count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, count, f) != count) {
        fprintf(stderr, "cli_make_inputs: cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* A version 1.0 file with the given header dict and `data_bytes` bytes of data. */
static int write_with_header(const char *dir, const char *name, const char *dict, size_t data_bytes) {
    unsigned char buffer[4096];
    const size_t dict_length = strlen(dict);
    size_t header_length = dict_length + 1;
    header_length += (64 - (10 + header_length) % 64) % 64;
    if (10 + header_length + data_bytes > sizeof buffer) return -1;
    memcpy(buffer, "\x93NUMPY\x01\x00", 8);
    buffer[8] = (unsigned char)(header_length & 0xff);
    buffer[9] = (unsigned char)(header_length >> 8);
    memset(buffer + 10, ' ', header_length);
    memcpy(buffer + 10, dict, dict_length);
    buffer[10 + header_length - 1] = '\n';
    for (size_t i = 0; i < data_bytes; ++i) buffer[10 + header_length + i] = (unsigned char)(i * 7);
    return write_bytes(dir, name, buffer, 10 + header_length + data_bytes);
}

static int make_malformed(const char *dir) {
    rng_state = 12345;
    /* The valid problem: Q (1,2,5,8), K and V (1,1,7,8), float32, bhsd. */
    const size_t q_shape[4] = {1, 2, 5, 8}, kv_shape[4] = {1, 1, 7, 8};
    const size_t q_bytes = 1 * 2 * 5 * 8 * 4;
    int failed = write_random(dir, "good_q.npy", "f32", q_shape) || write_random(dir, "good_k.npy", "f32", kv_shape) ||
                 write_random(dir, "good_v.npy", "f32", kv_shape);
    /* Shapes that do not fit the valid Q. */
    const size_t v_other_dim[4] = {1, 1, 7, 9}, k_batch[4] = {2, 1, 7, 8}, k_heads3[4] = {1, 3, 7, 8};
    failed = failed || write_random(dir, "v_dim9.npy", "f32", v_other_dim) ||
             write_random(dir, "kv_batch2.npy", "f32", k_batch) || write_random(dir, "kv_heads3.npy", "f32", k_heads3) ||
             write_random(dir, "q_f16.npy", "f16", q_shape) || write_random(dir, "q_u2.npy", "bf16", q_shape);
    failed = failed || write_with_header(dir, "rank3.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 8), }", 2 * 5 * 8 * 4);
    failed = failed || write_with_header(dir, "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 5, 8), }", q_bytes);
    failed = failed || write_with_header(dir, "dtype_f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 5, 8), }", q_bytes * 2);
    failed = failed || write_with_header(dir, "big_endian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2, 5, 8), }", q_bytes);
    failed = failed || write_with_header(dir, "bad_header.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 5, 8 }", q_bytes);
    failed = failed || write_with_header(dir, "truncated_data.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 5, 8), }", q_bytes - 6);
    /* Header length promising more than the file has. */
    static const unsigned char truncated_header[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortr";
    failed = failed || write_bytes(dir, "truncated_header.npy", truncated_header, sizeof truncated_header - 1);
    static const unsigned char bad_magic[] = "\x93NUMPX\x01\x00\x76\x00{'descr': '<f4'}";
    failed = failed || write_bytes(dir, "bad_magic.npy", bad_magic, sizeof bad_magic - 1);
    failed = failed || write_bytes(dir, "empty.npy", "", 0);
    /* Headers crafted to put a fake "check: forward passed" line and
     * terminal escapes (ESC, the single-byte CSI 0x9b) on the terminal
     * through the error message. */
    failed = failed || write_with_header(dir, "crafted_newline.npy",
                                         "{'descr': '<f4\ncheck: forward passed\n\x1b[2J', 'fortran_order': False, "
                                         "'shape': (1, 2, 5, 8), }", q_bytes);
    failed = failed || write_with_header(dir, "crafted_escape.npy",
                                         "{'\x1b[2J\x1b[Hcheck: forward passed': 1, }", q_bytes);
    failed = failed || write_with_header(dir, "crafted_csi.npy",
                                         "{'descr': '\x9b" "2J\x9b" "Hcheck: forward passed', 'fortran_order': False, "
                                         "'shape': (1, 2, 5, 8), }", q_bytes);
    return failed ? 1 : 0;
}

/* dir/name, or "" if it does not fit. */
static const char *join(char *out, size_t size, const char *dir, const char *name) {
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) out[0] = '\0';
    return out;
}

/* A small float32 bhsd problem and two other names of q.npy, a symbolic
 * link and a hard link, for the tests that an output never replaces an input. */
static int make_paths(const char *dir) {
    rng_state = 4242;
    const size_t q_shape[4] = {1, 2, 9, 8}, kv_shape[4] = {1, 1, 11, 8};
    if (write_random(dir, "q.npy", "f32", q_shape) || write_random(dir, "k.npy", "f32", kv_shape) ||
        write_random(dir, "v.npy", "f32", kv_shape) || write_random(dir, "dout.npy", "f32", q_shape))
        return 1;
    char q[4096], symbolic[4096], hard[4096];
    join(q, sizeof q, dir, "q.npy");
    join(symbolic, sizeof symbolic, dir, "q_symlink.npy");
    join(hard, sizeof hard, dir, "q_hardlink.npy");
    unlink(symbolic); /* from an earlier run; absent is fine */
    unlink(hard);
    if (symlink("q.npy", symbolic) != 0 || link(q, hard) != 0) {
        fprintf(stderr, "cli_make_inputs: cannot link %s: %s\n", q, strerror(errno));
        return 1;
    }
    return 0;
}

/* The output directory, created if needed (its parent must exist). */
static int ensure_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    if (mkdir(dir, 0777) == 0) return 0;
    fprintf(stderr, "cli_make_inputs: cannot create directory %s\n", dir);
    return -1;
}

/* A random uint8 block mask (ROWS, COLS), about two thirds on, for --block-mask. */
static int make_block_mask(const char *path, const char *rows_text, const char *cols_text) {
    const size_t shape[2] = {strtoul(rows_text, NULL, 10), strtoul(cols_text, NULL, 10)};
    uint8_t *mask = malloc(shape[0] * shape[1] + 1);
    if (!mask || shape[0] == 0 || shape[1] == 0) return free(mask), 1;
    rng_state = 12345;
    for (size_t i = 0; i < shape[0] * shape[1]; ++i) mask[i] = uniform() < 0.67;
    char error[256];
    const int rc = npy_write(path, NPY_DTYPE_U8, 2, shape, mask, error, sizeof error);
    if (rc != 0) fprintf(stderr, "%s: %s\n", path, error);
    free(mask);
    return rc != 0;
}

/* A packed variable-length batch (tensors written as (1, total, H, D), then relabelled 3-D). */
static int make_varlen(const char *dir, const char *heads, const char *lengths, const char *seed) {
    int hq, hkv, d;
    if (sscanf(heads, "%d,%d,%d", &hq, &hkv, &d) != 3 || hq < 1 || hkv < 1 || d < 1) {
        usage();
        return 2;
    }
    int32_t cu_q[65] = {0}, cu_k[65] = {0};
    size_t n = 0;
    for (const char *p = lengths; *p && n < 64;) {
        int lq, lk, used = 0;
        if (sscanf(p, "%d:%d%n", &lq, &lk, &used) != 2 || lq < 0 || lk < 0) {
            usage();
            return 2;
        }
        cu_q[n + 1] = cu_q[n] + lq;
        cu_k[n + 1] = cu_k[n] + lk;
        ++n;
        p += used;
        if (*p == ',') ++p;
    }
    rng_state = strtoull(seed, NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    const size_t q_shape[4] = {1, (size_t)cu_q[n], (size_t)hq, (size_t)d};
    const size_t kv_shape[4] = {1, (size_t)cu_k[n], (size_t)hkv, (size_t)d};
    const char *names[4] = {"q.npy", "k.npy", "v.npy", "dout.npy"};
    const size_t *shapes[4] = {q_shape, kv_shape, kv_shape, q_shape};
    char path[4096], error[512];
    for (int i = 0; i < 4; ++i) {
        const size_t count = shapes[i][1] * shapes[i][2] * shapes[i][3];
        float *data = malloc((count ? count : 1) * sizeof *data);
        if (!data) return 1;
        for (size_t j = 0; j < count; ++j) data[j] = random_value();
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        const int result = npy_write(path, NPY_DTYPE_F32, 3, shapes[i] + 1, data, error, sizeof error);
        free(data);
        if (result != 0) {
            fprintf(stderr, "cli_make_inputs: %s: %s\n", path, error);
            return 1;
        }
    }
    const size_t cu_shape[1] = {n + 1};
    const int32_t *cus[2] = {cu_q, cu_k};
    const char *cu_names[2] = {"cu_q.npy", "cu_k.npy"};
    for (int i = 0; i < 2; ++i) {
        snprintf(path, sizeof path, "%s/%s", dir, cu_names[i]);
        if (npy_write(path, NPY_DTYPE_I32, 1, cu_shape, cus[i], error, sizeof error) != 0) {
            fprintf(stderr, "cli_make_inputs: %s: %s\n", path, error);
            return 1;
        }
    }
    return 0;
}

/* Random ALiBi slopes of shape "N" or "N,M". */
static int make_slopes(const char *path, const char *shape_text, const char *seed_text) {
    size_t shape[2] = {0, 0};
    char *end = NULL;
    shape[0] = strtoul(shape_text, &end, 10);
    const int rank = end && *end == ',' ? 2 : 1;
    if (rank == 2) shape[1] = strtoul(end + 1, NULL, 10);
    const size_t count = shape[0] * (rank == 2 ? shape[1] : 1);
    float *slopes = malloc(count * sizeof *slopes + 1);
    if (!slopes || count == 0) return free(slopes), 1;
    rng_state = strtoull(seed_text, NULL, 10) | 1;
    for (size_t i = 0; i < count; ++i) slopes[i] = (float)(0.02 + 0.48 * uniform());
    char error[256];
    const int rc = npy_write(path, NPY_DTYPE_F32, rank, shape, slopes, error, sizeof error);
    if (rc != 0) fprintf(stderr, "%s: %s\n", path, error);
    free(slopes);
    return rc != 0;
}

/* A random bias of shape "B,H,SQ,SK" with -inf pairs and one row with no finite key. */
static int make_bias(const char *path, const char *shape_text, const char *seed_text) {
    size_t shape[4] = {0, 0, 0, 0};
    const char *at = shape_text;
    for (int i = 0; i < 4; ++i) {
        char *end = NULL;
        shape[i] = strtoul(at, &end, 10);
        if (!end || (i < 3 && *end != ',')) return 1;
        at = end + 1;
    }
    const size_t count = shape[0] * shape[1] * shape[2] * shape[3];
    float *bias = malloc(count * sizeof *bias + 1);
    if (!bias || count == 0) return free(bias), 1;
    rng_state = strtoull(seed_text, NULL, 10) | 1;
    for (size_t i = 0; i < count; ++i) bias[i] = i % 11 == 5 ? -INFINITY : (float)(-2.0 + 4.0 * uniform());
    for (size_t j = 0; j < shape[3]; ++j) bias[j] = -INFINITY;
    char error[256];
    const int rc = npy_write(path, NPY_DTYPE_F32, 4, shape, bias, error, sizeof error);
    if (rc != 0) fprintf(stderr, "%s: %s\n", path, error);
    free(bias);
    return rc != 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "--varlen") == 0)
        return ensure_dir(argv[2]) != 0 ? 1 : make_varlen(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 5 && strcmp(argv[1], "--block-mask") == 0) return make_block_mask(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "--slopes") == 0) return make_slopes(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "--bias") == 0) return make_bias(argv[2], argv[3], argv[4]);
    if (argc == 3 && (strcmp(argv[1], "--malformed") == 0 || strcmp(argv[1], "--paths") == 0) &&
        ensure_dir(argv[2]) != 0)
        return 1;
    if ((argc == 6 || argc == 7) && ensure_dir(argv[1]) != 0) return 1;
    if (argc == 3 && strcmp(argv[1], "--malformed") == 0) return make_malformed(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--paths") == 0) return make_paths(argv[2]);
    if (argc == 6 || argc == 7) return make_problem(argc, argv);
    usage();
    return 2;
}

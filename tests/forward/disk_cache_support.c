/* disk_cache_support.c: runs, child processes, scratch directories and damaged files for test_disk_cache.c. */
#include "disk_cache_support.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache_file.h" /* the library's layout, to forge a file with a valid checksum */
#include "sha256.h"

const char *dc_self;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Fixed inputs: the same bits in every process. */
static void fill(float *x, size_t count, unsigned seed) {
    unsigned state = seed;
    for (size_t i = 0; i < count; ++i) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

void dc_run(dc_result *result) {
    static float q[DC_Q_COUNT], k[DC_KV_COUNT], v[DC_KV_COUNT];
    fill(q, DC_Q_COUNT, 1);
    fill(k, DC_KV_COUNT, 2);
    fill(v, DC_KV_COUNT, 3);
    memset(result, 0, sizeof *result);
    const double start = now_seconds();
    flashcl_context *ctx = NULL;
    result->status = flashcl_context_create(&ctx, NULL);
    if (result->status != FLASHCL_SUCCESS) return;
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, DC_BATCH, DC_HEADS, DC_SEQLEN_Q, DC_SEQLEN_K, DC_HEAD_DIM);
    result->status = flashcl_forward_host(ctx, &desc, FLASHCL_LAYOUT_BHSD, q, k, v, result->o, result->lse);
    result->seconds = now_seconds() - start;
    flashcl_context_cache_stats(ctx, &result->stats);
    flashcl_context_free(ctx);
}

pid_t dc_spawn_child(const char *out_path) {
    const pid_t pid = fork();
    if (pid == 0) {
        execl(dc_self, dc_self, "--child", out_path, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int dc_wait_child(pid_t pid, const char *out_path, dc_result *result) {
    int wstatus = 0;
    if (pid < 0 || waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) return -1;
    FILE *f = fopen(out_path, "rb");
    if (!f) return -1;
    const int ok = fread(result, sizeof *result, 1, f) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int dc_child_main(const char *out_path) {
    static dc_result result;
    dc_run(&result);
    FILE *f = fopen(out_path, "wb");
    if (!f) return 2;
    const int ok = fwrite(&result, sizeof result, 1, f) == 1;
    return fclose(f) == 0 && ok && result.status == FLASHCL_SUCCESS ? 0 : 1;
}

/* The build tree's scratch directory, or the system's temporary one where the build tree's path does not exist
 * (a build tree copied to another machine, as the GPU runs do): the runs only need a directory of their own. */
static const char *scratch_base(void) {
    if (mkdir(DC_SCRATCH_BASE, 0700) == 0 || errno == EEXIST) return DC_SCRATCH_BASE;
    const char *tmp = getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

char *dc_scratch_dir(void) {
    const char *base = scratch_base();
    char *dir = malloc(strlen(base) + 16);
    if (!dir) return NULL;
    sprintf(dir, "%s/run-XXXXXX", base);
    if (!mkdtemp(dir)) {
        free(dir);
        return NULL;
    }
    return dir;
}

static int ends_with(const char *s, const char *suffix) {
    const size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Files in dir (not . and ..) whose names end with suffix, or contain it when anywhere is set. */
static int count_files(const char *dir, const char *text, int anywhere) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        count += anywhere ? strstr(e->d_name, text) != NULL : ends_with(e->d_name, text);
    }
    closedir(d);
    return count;
}

int dc_count_entries(const char *dir) { return count_files(dir, ".clbin", 0); }
int dc_count_temporaries(const char *dir) { return count_files(dir, ".tmp.", 1); }
int dc_count_all(const char *dir) { return count_files(dir, "", 1); }

static unsigned char *read_whole(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc(*size + 1);
    if (data && fread(data, 1, *size, f) != *size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

static int write_whole(const char *path, const unsigned char *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int damage_file(const char *path, dc_damage damage) {
    size_t size = 0;
    unsigned char *data = read_whole(path, &size);
    if (!data || size < FLASHCL_CACHE_FILE_HEADER_BYTES + 16) {
        free(data);
        return -1;
    }
    const size_t key_length = (size_t)data[12] | (size_t)data[13] << 8;
    const size_t binary_at = FLASHCL_CACHE_FILE_HEADER_BYTES + key_length;
    switch (damage) {
    case DC_TRUNCATE: size -= 7; break;
    case DC_EMPTY: size = 0; break;
    case DC_FLIP_MAGIC: data[0] ^= 0x20; break;
    case DC_FLIP_VERSION: data[8] += 1; break;
    case DC_FLIP_KEY: data[FLASHCL_CACHE_FILE_HEADER_BYTES + key_length / 2] ^= 0x01; break;
    case DC_FLIP_BINARY: data[size - 1] ^= 0x80; break;
    case DC_GARBAGE_BINARY:
        for (size_t i = binary_at; i < size; ++i) data[i] = (unsigned char)(0xA5 ^ (i * 131));
        flashcl_sha256_of(data + binary_at, size - binary_at, data + 24);
        break;
    default: break;
    }
    const int result = write_whole(path, data, size);
    free(data);
    return result;
}

int dc_damage_entries(const char *dir, dc_damage damage) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ends_with(e->d_name, ".clbin")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        count += damage_file(path, damage) == 0;
    }
    closedir(d);
    return count;
}

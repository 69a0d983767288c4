/* cache_fs.c: the POSIX file-system calls of the on-disk program cache (directory, whole-file read, atomic
 * replace). Other platforms get a cache that is always off until someone writes their half of this file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_fs.h"

static char *concat(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

char *flashcl_cache_fs_join(const char *dir, const char *name) {
    const size_t ld = strlen(dir);
    const int slash = ld > 0 && dir[ld - 1] != '/';
    char *path = malloc(ld + (size_t)slash + strlen(name) + 1);
    if (!path) return NULL;
    sprintf(path, "%s%s%s", dir, slash ? "/" : "", name);
    return path;
}

#if defined(_WIN32)

char *flashcl_cache_fs_dir_from_env(const char **why) {
    *why = "the disk cache is not implemented on this platform";
    return NULL;
}
int flashcl_cache_fs_make_dirs(const char *dir) { return (void)dir, ENOSYS; }
int flashcl_cache_fs_read(const char *path, size_t max_bytes, unsigned char **data, size_t *size) {
    (void)path, (void)max_bytes, (void)data, (void)size;
    return ENOSYS;
}
int flashcl_cache_fs_write_atomic(const char *dir, const char *name, const void *const *parts, const size_t *sizes,
                                  int count) {
    (void)dir, (void)name, (void)parts, (void)sizes, (void)count;
    return ENOSYS;
}

#else

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *flashcl_cache_fs_dir_from_env(const char **why) {
    const char *explicit_dir = getenv("FLASHCL_CACHE_DIR");
    if (explicit_dir && *explicit_dir) {
        if (strcmp(explicit_dir, FLASHCL_CACHE_DIR_OFF) == 0) {
            *why = "FLASHCL_CACHE_DIR=off";
            return NULL;
        }
        char *dir = concat(explicit_dir, "");
        if (!dir) *why = "out of host memory";
        return dir;
    }
    /* The XDG base-directory rule: a relative XDG_CACHE_HOME is invalid and ignored. */
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char *dir = NULL;
    if (xdg && xdg[0] == '/') {
        dir = flashcl_cache_fs_join(xdg, "flashcl");
    } else if (home && *home) {
        dir = flashcl_cache_fs_join(home, ".cache/flashcl");
    } else {
        *why = "neither FLASHCL_CACHE_DIR, XDG_CACHE_HOME nor HOME is set";
        return NULL;
    }
    if (!dir) *why = "out of host memory";
    return dir;
}

int flashcl_cache_fs_make_dirs(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    char *path = concat(dir, "");
    if (!path) return ENOMEM;
    /* Each prefix in turn; EEXIST is a directory another process made meanwhile (or already there). */
    int result = 0;
    for (char *p = path + 1;; ++p) {
        if (*p != '/' && *p != '\0') continue;
        const char saved = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            result = errno;
            break;
        }
        *p = saved;
        if (saved == '\0') break;
    }
    free(path);
    if (result == 0 && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) result = ENOTDIR;
    return result;
}

int flashcl_cache_fs_read(const char *path, size_t max_bytes, unsigned char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return errno;
    struct stat st;
    int result = 0;
    if (fstat(fd, &st) != 0) {
        result = errno;
    } else if (!S_ISREG(st.st_mode)) {
        result = EINVAL;
    } else if ((unsigned long long)st.st_size > max_bytes) {
        result = EFBIG;
    } else {
        const size_t want = (size_t)st.st_size;
        unsigned char *buffer = malloc(want > 0 ? want : 1);
        size_t got = 0;
        if (!buffer) result = ENOMEM;
        while (result == 0 && got < want) {
            const ssize_t n = read(fd, buffer + got, want - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) result = n < 0 ? errno : EIO; /* shorter than fstat said: not ours to trust */
            else got += (size_t)n;
        }
        if (result == 0) {
            *data = buffer;
            *size = got;
        } else {
            free(buffer);
        }
    }
    close(fd);
    return result;
}

static int write_all(int fd, const void *data, size_t size) {
    const unsigned char *bytes = data;
    while (size > 0) {
        const ssize_t n = write(fd, bytes, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        bytes += n;
        size -= (size_t)n;
    }
    return 0;
}

/* A temporary name no other writer picks: the process id tells processes apart, the counter this process's
 * threads, the clock a process that reuses the id of one that died and left its file behind. */
static char *temporary_name(const char *dir, const char *name) {
    static atomic_uint counter;
    const unsigned serial = atomic_fetch_add(&counter, 1u);
    struct timespec now = {0, 0};
    clock_gettime(CLOCK_REALTIME, &now);
    char suffix[96];
    snprintf(suffix, sizeof suffix, ".tmp.%ld.%u.%ld", (long)getpid(), serial, (long)now.tv_nsec);
    char *tmp_name = concat(name, suffix);
    if (!tmp_name) return NULL;
    char *path = flashcl_cache_fs_join(dir, tmp_name);
    free(tmp_name);
    return path;
}

int flashcl_cache_fs_write_atomic(const char *dir, const char *name, const void *const *parts, const size_t *sizes,
                                  int count) {
    char *final_path = flashcl_cache_fs_join(dir, name);
    char *tmp_path = temporary_name(dir, name);
    int result = (!final_path || !tmp_path) ? ENOMEM : 0;
    int fd = -1;
    if (result == 0) {
        fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0) result = errno;
    }
    for (int i = 0; result == 0 && i < count; ++i) result = write_all(fd, parts[i], sizes[i]);
    /* No fsync: a file cut short by a crash fails the checks on load and is rebuilt; syncing every entry would
     * cost more than the builds it saves on some file systems. */
    if (fd >= 0 && close(fd) != 0 && result == 0) result = errno;
    if (result == 0 && rename(tmp_path, final_path) != 0) result = errno;
    if (result != 0 && fd >= 0) unlink(tmp_path);
    free(final_path);
    free(tmp_path);
    return result;
}

#endif

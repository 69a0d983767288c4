/* run_files.c: refusing outputs that would replace inputs or each other, and writing the outputs all or none. */
/* realpath() is XSI in glibc's headers: _POSIX_C_SOURCE alone hides it. */
#define _XOPEN_SOURCE 700

#include "run_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"

/* The temporary file's name keeps this much of the output's name, so that
 * ".NAME.XXXXXX" stays within NAME_MAX however long NAME is. */
#define TEMP_NAME_KEEP 200

static run_file *add_file(run_files *files, const char *option, const char *path, int output) {
    if (!path) return NULL;
    run_file *f = &files->files[files->count++];
    f->option = option;
    f->path = path;
    f->output = output;
    return f;
}

/* A cache output, which may name its own input file (an in-place update). */
static void add_cache_output(run_files *files, const char *option, const char *path, const char *input_option) {
    run_file *f = add_file(files, option, path, 1);
    if (f) f->may_replace = input_option;
}

/* Inputs first, so that a clash names the input an output would replace. */
static void list_files(const run_options *o, run_files *files) {
    add_file(files, "--q", o->q_path, 0);
    add_file(files, "--k", o->k_path, 0);
    add_file(files, "--v", o->v_path, 0);
    add_file(files, "--dout", o->dout_path, 0);
    add_file(files, "--block-mask", o->block_mask_path, 0);
    add_file(files, "--bias", o->bias_path, 0);
    add_file(files, "--cu-seqlens-q", o->cu_seqlens_q_path, 0);
    add_file(files, "--cu-seqlens-k", o->cu_seqlens_k_path, 0);
    add_file(files, "--k-cache", o->k_cache_path, 0);
    add_file(files, "--v-cache", o->v_cache_path, 0);
    add_file(files, "--cache-seqlens", o->cache_seqlens_path, 0);
    add_file(files, "--block-table", o->block_table_path, 0);
    add_file(files, "--k-new", o->k_new_path, 0);
    add_file(files, "--v-new", o->v_new_path, 0);
    add_file(files, "--out", o->out_path, 1);
    add_file(files, "--lse", o->lse_path, 1);
    add_file(files, "--dq", o->dq_path, 1);
    add_file(files, "--dk", o->dk_path, 1);
    add_file(files, "--dv", o->dv_path, 1);
    add_file(files, "--dropout-mask", o->dropout_mask_path, 1);
    add_file(files, "--dbias", o->dbias_path, 1);
    add_cache_output(files, "--k-cache-out", o->k_cache_out_path, "--k-cache");
    add_cache_output(files, "--v-cache-out", o->v_cache_out_path, "--v-cache");
}

/* Splits path into a new directory string and a pointer to its last name
 * ("a/b" -> "a", "b"; "b" -> ".", "b"; "/b" -> "/", "b"). NULL if out of memory. */
static char *split_path(const char *path, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    const size_t length = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(length + 1);
    if (!dir) return NULL;
    if (!slash)
        strcpy(dir, ".");
    else
        memcpy(dir, slash == path ? "/" : path, length);
    dir[length] = '\0';
    return dir;
}

/* realpath() of the directory of path, joined with its last name; NULL if
 * the directory does not resolve (errno says why) or out of memory. */
static char *resolve_in_directory(const char *path) {
    const char *name;
    char *dir = split_path(path, &name);
    char *real_dir = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!real_dir) return NULL;
    const size_t length = strlen(real_dir) + 1 + strlen(name) + 1;
    char *joined = malloc(length);
    if (joined) snprintf(joined, length, "%s%s%s", real_dir, strcmp(real_dir, "/") == 0 ? "" : "/", name);
    free(real_dir);
    return joined;
}

/* Fills the identity of one file; an unresolvable path keeps resolved NULL. */
static void resolve(run_file *f) {
    struct stat st;
    errno = 0;
    if (stat(f->path, &st) == 0) {
        f->exists = 1;
        f->regular = S_ISREG(st.st_mode);
        f->device = st.st_dev;
        f->inode = st.st_ino;
        f->mode = st.st_mode;
        f->resolved = realpath(f->path, NULL);
    } else {
        f->resolved = resolve_in_directory(f->path);
    }
    f->resolve_errno = f->resolved ? 0 : errno;
}

/* Whether writing b would replace a. Existing files are compared by
 * device and inode, which sees through symbolic and hard links; a name
 * that does not exist yet by its resolved directory and name. Devices and
 * FIFOs (an output of /dev/null) hold no data to lose and are never a clash. */
static int same_file(const run_file *a, const run_file *b) {
    if (a->exists != b->exists) return 0;
    if (a->exists) return a->regular && b->regular && a->device == b->device && a->inode == b->inode;
    if (a->resolved && b->resolved) return strcmp(a->resolved, b->resolved) == 0;
    return strcmp(a->path, b->path) == 0;
}

static int report_clash(const run_file *output, const run_file *other) {
    fprintf(stderr, "flashcl run: %s %s and %s %s name the same file%s", output->option, output->path,
            other->option, other->path,
            other->output ? ": each output needs a file of its own" : ": an output may not replace an input");
    if (output->may_replace && !other->output) fprintf(stderr, " (other than %s's, in place)", output->may_replace);
    fputc('\n', stderr);
    return FLASHCL_EXIT_USAGE;
}

/* Exit status 2 for the first output that clashes with an earlier file, else 0. */
static int find_clash(const run_files *files) {
    for (int i = 0; i < files->count; ++i) {
        if (!files->files[i].output) continue;
        const run_file *output = &files->files[i];
        for (int j = 0; j < i; ++j) {
            const run_file *other = &files->files[j];
            const int allowed =
                output->may_replace && !other->output && strcmp(other->option, output->may_replace) == 0;
            if (!allowed && same_file(other, output)) return report_clash(output, other);
        }
    }
    return FLASHCL_EXIT_OK;
}

static int output_error(const run_file *f, const char *problem, const char *detail) {
    fprintf(stderr, "flashcl run: %s %s: %s%s%s\n", f->option, f->path, problem, detail ? ": " : "", detail ? detail : "");
    return FLASHCL_EXIT_FAILURE;
}

/* The directory an output's temporary file goes to must let us create and rename files. */
static int check_directory_writable(const run_file *f) {
    const char *name;
    char *dir = split_path(f->resolved, &name);
    if (!dir) return output_error(f, "out of memory", NULL);
    const int writable = access(dir, W_OK | X_OK) == 0;
    const int saved = errno;
    if (!writable)
        fprintf(stderr, "flashcl run: %s %s: cannot write in directory %s: %s\n", f->option, f->path, dir,
                strerror(saved));
    free(dir);
    return writable ? FLASHCL_EXIT_OK : FLASHCL_EXIT_FAILURE;
}

/* Exit status 1 if the output cannot be written where it is named, else 0. */
static int check_writable(const run_file *f) {
    struct stat entry;
    if (f->exists && S_ISDIR(f->mode)) return output_error(f, "is a directory", NULL);
    if (f->exists && !f->regular)
        return access(f->path, W_OK) == 0 ? FLASHCL_EXIT_OK : output_error(f, "cannot write", strerror(errno));
    if (!f->exists && lstat(f->path, &entry) == 0)
        return output_error(f, "is a symbolic link to a missing file", NULL);
    if (!f->resolved) {
        const int e = f->resolve_errno;
        return output_error(f, e == ENOENT ? "its directory does not exist" : "cannot resolve its directory",
                            e == ENOENT ? NULL : strerror(e));
    }
    return check_directory_writable(f);
}

/* The mode fopen would give a new file: 0666 less the umask. The umask can
 * only be read by setting it, so this runs here, before OpenCL has started
 * threads that could create files meanwhile. */
static mode_t new_file_mode(void) {
    const mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

int run_files_check(const run_options *o, run_files *files) {
    memset(files, 0, sizeof *files);
    files->new_file_mode = new_file_mode();
    list_files(o, files);
    for (int i = 0; i < files->count; ++i) resolve(&files->files[i]);
    /* A clash (2) comes first: it is the command line's own contradiction. */
    int status = find_clash(files);
    for (int i = 0; i < files->count && status == FLASHCL_EXIT_OK; ++i)
        if (files->files[i].output) status = check_writable(&files->files[i]);
    return status;
}

void run_files_set(run_files *files, const char *option, npy_dtype dtype, int rank, const size_t *shape,
                   const void *data) {
    for (int i = 0; i < files->count; ++i) {
        run_file *f = &files->files[i];
        if (!f->output || strcmp(f->option, option) != 0) continue;
        f->has_data = 1;
        f->dtype = dtype;
        f->rank = rank;
        memcpy(f->shape, shape, (size_t)rank * sizeof *shape);
        f->data = data;
    }
}

/* An existing device or FIFO (say /dev/null) is written in place: renaming
 * over it would replace the device node itself. */
static int written_in_place(const run_file *f) { return f->exists && !f->regular; }

/* "DIR/.NAME.XXXXXX" beside the output's target, for mkstemp; NULL if out of memory. */
static char *temp_template(const run_file *f) {
    const char *name;
    char *dir = split_path(f->resolved, &name);
    if (!dir) return NULL;
    const size_t length = strlen(dir) + strlen(name) + 16;
    char *temp = malloc(length);
    if (temp)
        snprintf(temp, length, "%s/.%.*s.XXXXXX", strcmp(dir, "/") == 0 ? "" : dir, TEMP_NAME_KEEP, name);
    free(dir);
    return temp;
}

static int write_failed(const run_file *f, const char *what, const char *detail) {
    fprintf(stderr, "flashcl run: %s %s: %s: %s\n", f->option, f->path, what, detail);
    return -1;
}

/* Writes the output's contents into the open stream of fd. The file gets
 * the target's mode (mkstemp makes it 0600), and reaches the disk before
 * the rename publishes it, so a crash leaves the old file or the new one,
 * never an empty one. */
static int fill_temp(const run_file *f, mode_t new_mode, int fd, FILE *stream) {
    char error[512];
    const mode_t mode = f->exists ? (f->mode & 07777) : new_mode;
    if (fchmod(fd, mode) != 0) return write_failed(f, "cannot set the temporary file's mode", strerror(errno));
    if (npy_write_stream(stream, f->dtype, f->rank, f->shape, f->data, error, sizeof error) != 0)
        return write_failed(f, "writing the temporary file", error);
    if (fsync(fd) != 0) return write_failed(f, "writing the temporary file", strerror(errno));
    return 0;
}

/* A complete temporary file beside the target, named in f->temp; on
 * failure none is left and f->temp is NULL. */
static int write_temp(run_file *f, mode_t new_mode) {
    f->temp = temp_template(f);
    if (!f->temp) return write_failed(f, "cannot write", "out of memory");
    const int fd = mkstemp(f->temp);
    FILE *stream = fd >= 0 ? fdopen(fd, "wb") : NULL;
    int failed = !stream;
    if (!stream) write_failed(f, "cannot create a temporary file beside it", strerror(errno));
    failed = failed || fill_temp(f, new_mode, fd, stream) != 0;
    if (stream && fclose(stream) != 0 && !failed) failed = write_failed(f, "writing the temporary file", strerror(errno));
    if (!stream && fd >= 0) close(fd);
    if (failed) {
        if (fd >= 0) unlink(f->temp);
        free(f->temp);
        f->temp = NULL;
    }
    return failed ? -1 : 0;
}

/* A device or FIFO output, written directly (never removed on failure:
 * that could delete a device node). */
static int write_in_place(const run_file *f) {
    char error[512];
    FILE *stream = fopen(f->path, "wb");
    if (!stream) return write_failed(f, "cannot open", strerror(errno));
    int failed = npy_write_stream(stream, f->dtype, f->rank, f->shape, f->data, error, sizeof error) != 0;
    if (failed) write_failed(f, "cannot write", error);
    if (fclose(stream) != 0 && !failed) failed = write_failed(f, "cannot write", strerror(errno));
    return failed ? -1 : 0;
}

static void remove_temps(run_files *files) {
    for (int i = 0; i < files->count; ++i) {
        run_file *f = &files->files[i];
        if (f->temp) unlink(f->temp);
        free(f->temp);
        f->temp = NULL;
    }
}

/* Renames every temporary file onto its target. A failure part-way cannot
 * be undone (the old contents are gone): it names what was replaced. */
static int rename_all(run_files *files) {
    for (int i = 0; i < files->count; ++i) {
        run_file *f = &files->files[i];
        if (!f->temp) continue;
        if (rename(f->temp, f->resolved) != 0) {
            write_failed(f, "cannot rename the temporary file into place", strerror(errno));
            for (int j = 0; j < i; ++j)
                if (files->files[j].has_data)
                    fprintf(stderr, "flashcl run: %s %s was already replaced\n", files->files[j].option,
                            files->files[j].path);
            remove_temps(files);
            return -1;
        }
        free(f->temp);
        f->temp = NULL;
    }
    return 0;
}

int run_files_write(run_files *files) {
    int failed = 0;
    for (int i = 0; i < files->count && !failed; ++i) {
        run_file *f = &files->files[i];
        if (f->has_data && !written_in_place(f)) failed = write_temp(f, files->new_file_mode) != 0;
    }
    for (int i = 0; i < files->count && !failed; ++i) {
        const run_file *f = &files->files[i];
        if (f->has_data && written_in_place(f)) failed = write_in_place(f) != 0;
    }
    if (failed) {
        remove_temps(files);
        return -1;
    }
    return rename_all(files);
}

void run_files_free(run_files *files) {
    remove_temps(files);
    for (int i = 0; i < files->count; ++i) {
        free(files->files[i].resolved);
        files->files[i].resolved = NULL;
    }
    files->count = 0;
}

/* run_files.h: the files `flashcl run` reads and writes. It never destroys data: an output that
 * would replace an input or another output is refused before anything runs, and the outputs are
 * written all or none, each through a temporary file renamed into place. */
#ifndef FLASHCL_TOOLS_RUN_FILES_H
#define FLASHCL_TOOLS_RUN_FILES_H

#include <stddef.h>
#include <sys/types.h>

#include "npy.h"
#include "run_options.h"

/* One file named on the command line. */
typedef struct run_file {
    const char *option; /* "--out" */
    const char *path;   /* as given */
    int output;
    /* The one input option this output may name (an in-place update of a
     * cache: --k-cache-out may be --k-cache's file); NULL: none. The input
     * is read whole before anything runs, and the output still goes
     * through a temporary file renamed into place. */
    const char *may_replace;
    int exists;  /* stat() found it (through symbolic links) */
    int regular; /* ... and it is a regular file */
    dev_t device;
    ino_t inode;
    mode_t mode;
    /* realpath() of the file if it exists, else of its directory followed
     * by "/" and its name; NULL if neither resolves. An output is written
     * here: through a symbolic link, to the file it points to. */
    char *resolved;
    int resolve_errno; /* why resolved is NULL */
    /* An output's contents, recorded by run_files_set. */
    int has_data;
    npy_dtype dtype;
    int rank;
    size_t shape[NPY_MAX_RANK];
    const void *data;
    char *temp; /* its temporary file while run_files_write runs */
} run_file;

/* --q --k --v --dout --block-mask --bias --cu-seqlens-q/-k --k-cache --v-cache --cache-seqlens --block-table
 * --k-new --v-new, --out --lse --dq --dk --dv --dropout-mask --dbias --k-cache-out --v-cache-out. */
#define RUN_FILES_MAX 23

typedef struct run_files {
    run_file files[RUN_FILES_MAX];
    int count;
    mode_t new_file_mode; /* what a created output gets: 0666 less the umask */
} run_files;

/* Resolves every path of the command line and refuses, with a message:
 * an output that is the same file as an input (other than the one it may
 * replace) or as another output (exit
 * status 2: the command line contradicts itself), and an output that
 * cannot be written where it is named: its directory missing or not
 * writable, the name a directory or a dangling symbolic link (status 1, a
 * bad file). Returns FLASHCL_EXIT_OK or the status. Touches no file. */
int run_files_check(const run_options *options, run_files *files);

/* Records what the output of `option` will hold; nothing is written yet,
 * and data must stay valid until run_files_write. */
void run_files_set(run_files *files, const char *option, npy_dtype dtype, int rank, const size_t *shape,
                   const void *data);

/* Writes every recorded output: each to a temporary file beside its
 * target, and only once all are complete renames them into place. Returns
 * 0, or -1 after a message; on failure no temporary file is left and no
 * target has changed, unless a rename itself fails part-way (reported:
 * the outputs renamed before it are then in place). */
int run_files_write(run_files *files);

void run_files_free(run_files *files);

#endif

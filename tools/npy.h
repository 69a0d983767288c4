/* npy.h: reading and writing NumPy .npy files (little-endian, C order, 1-, 2- and 4-byte element types). */
#ifndef FLASHCL_TOOLS_NPY_H
#define FLASHCL_TOOLS_NPY_H

#include <stddef.h>
#include <stdio.h>

/* The element types flashcl exchanges. bfloat16 has no NumPy dtype: such
 * data travels as '<u2' (the raw bits) and the user says what it is. */
typedef enum npy_dtype {
    NPY_DTYPE_F32 = 0, /* '<f4' */
    NPY_DTYPE_F16 = 1, /* '<f2' */
    NPY_DTYPE_U16 = 2, /* '<u2' */
    NPY_DTYPE_U8 = 3,  /* '|u1': block masks and dropout masks */
    NPY_DTYPE_I32 = 4  /* '<i4': cumulative sequence lengths */
} npy_dtype;

#define NPY_MAX_RANK 8

typedef struct npy_array {
    npy_dtype dtype;
    int rank;
    size_t shape[NPY_MAX_RANK];
    size_t count; /* product of shape (1 for rank 0) */
    void *data;   /* count elements, C order, little-endian; malloc'ed */
} npy_array;

/* Size in bytes of one element. */
size_t npy_dtype_size(npy_dtype dtype);
/* The NumPy descr string ("<f4") and a readable name ("float32"). */
const char *npy_dtype_descr(npy_dtype dtype);
const char *npy_dtype_name(npy_dtype dtype);

/* Reads a version 1.0, 2.0 or 3.0 .npy file. Returns 0, or -1 with *out
 * left empty and a one-line message (without the path) in error. */
int npy_read(const char *path, npy_array *out, char *error, size_t error_size);

/* Writes a version 1.0 file whose header is padded so the data starts at a
 * multiple of 64 bytes, as np.save does.
 * Returns 0, or -1 with a message in error; a failed write removes the file. */
int npy_write(const char *path, npy_dtype dtype, int rank, const size_t *shape, const void *data, char *error,
              size_t error_size);

/* The same into an open stream (flushed, not closed): for callers that
 * create the file themselves, such as a temporary file renamed into place. */
int npy_write_stream(FILE *f, npy_dtype dtype, int rank, const size_t *shape, const void *data, char *error,
                     size_t error_size);

/* Formats a shape as "(2, 3)" into out. */
void npy_format_shape(int rank, const size_t *shape, char *out, size_t out_size);

/* Frees the data of an array read by npy_read and empties it; NULL is accepted. */
void npy_free(npy_array *array);

#endif

/* kernel_source.h: access to the OpenCL C sources, embedded or from a directory. */
#ifndef FLASHCL_KERNEL_SOURCE_H
#define FLASHCL_KERNEL_SOURCE_H

typedef struct flashcl_embedded_kernel {
    const char *name; /* file name in cl/, e.g. "forward.cl" */
    const char *text;
} flashcl_embedded_kernel;

/* Generated at build time from the files of cl/; ends with a {NULL, NULL} entry. */
extern const flashcl_embedded_kernel flashcl_embedded_kernels[];

#endif

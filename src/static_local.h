/* static_local.h: the static __local memory one work-group can have on a device, found once per device. */
#ifndef FLASHCL_STATIC_LOCAL_H
#define FLASHCL_STATIC_LOCAL_H

#include "device_caps.h"

/* The candidates probed on an NVIDIA device, in bytes, ascending. A device's answer is the largest that builds.
 * The last is Hopper's: on the H100 (driver 580) a static array of up to 227 KiB - 16 bytes builds and runs, the
 * compiler adding 4 bytes of its own (CL_KERNEL_LOCAL_MEM_SIZE = array + 4); 1 KiB below that leaves room for
 * what a real kernel's compiler may add (docs/results/h100/ptx/static_local_scan.txt). */
#define FLASHCL_STATIC_LOCAL_CANDIDATES 64 * 1024, 96 * 1024, 128 * 1024, 160 * 1024, 196 * 1024, 226 * 1024

/* The candidate a compute capability is known to reach (measured), tried first so that a known device costs one
 * build: 226 KiB for 9.0; 0 (bisect) for the others. */
size_t flashcl_static_local_expected(int compute_capability);

/* caps->limits.local_mem_bytes on every device but an NVIDIA GPU (caps->compute_capability > 0). There: the
 * largest candidate above it whose test kernel (a static __local array of that many bytes) builds, from a process
 * -wide table after the first time; the builds run in context, or in a context of their own when it is NULL.
 * Never below the reported size; any failure (no context, out of memory) answers the reported size. Nothing is
 * enqueued: a queue of the caller's stays untouched. */
size_t flashcl_static_local_bytes(cl_device_id device, cl_context context, const flashcl_device_caps *caps);

/* The probe's decision as a pure function, for tests: the largest of candidates[0..count) (ascending) above
 * reported for which builds(candidate, arg) says 1; reported when none. When expected (0: none) is above reported
 * it is tried first and, if it builds, is the answer; otherwise the candidates below it are bisected (builds is
 * monotone: a smaller array builds whenever a larger one does). *probes counts the calls. */
size_t flashcl_static_local_search(size_t reported, size_t expected, const size_t *candidates, int count,
                                   int (*builds)(size_t bytes, void *arg), void *arg, int *probes);

#endif

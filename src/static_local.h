/* static_local.h: the static __local memory one work-group can have on a device, found once per device. */
#ifndef FLASHCL_STATIC_LOCAL_H
#define FLASHCL_STATIC_LOCAL_H

#include "device_caps.h"

/* The candidates probed on an NVIDIA device, in bytes, ascending (the last is Hopper's CUDA opt-in limit, 227 KiB,
 * which the OpenCL driver refuses: docs/nvidia.md). A device's answer is the largest that builds. */
#define FLASHCL_STATIC_LOCAL_CANDIDATES 64 * 1024, 96 * 1024, 128 * 1024, 160 * 1024, 196 * 1024, 227 * 1024

/* caps->limits.local_mem_bytes on every device but an NVIDIA GPU (caps->compute_capability > 0). There: the
 * largest candidate above it whose test kernel (a static __local array of that many bytes) builds, from a process
 * -wide table after the first time; the builds run in context, or in a context of their own when it is NULL.
 * Never below the reported size; any failure (no context, out of memory) answers the reported size. Nothing is
 * enqueued: a queue of the caller's stays untouched. */
size_t flashcl_static_local_bytes(cl_device_id device, cl_context context, const flashcl_device_caps *caps);

/* The probe's decision as a pure function, for tests: the largest of candidates[0..count) (ascending) above
 * reported for which builds(candidate, arg) says 1, by bisection (builds is monotone: a smaller array builds
 * whenever a larger one does); reported when none. *probes counts the calls. */
size_t flashcl_static_local_search(size_t reported, const size_t *candidates, int count,
                                   int (*builds)(size_t bytes, void *arg), void *arg, int *probes);

#endif

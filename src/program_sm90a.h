/* program_sm90a.h: a program's sm_90a variant on an H100: built as usual (sm_90), its PTX rewritten
 * (ptx_rewrite.h), rebuilt from that PTX. */
#ifndef FLASHCL_PROGRAM_SM90A_H
#define FLASHCL_PROGRAM_SM90A_H

#include "internal.h"

/* The disk cache's variant field for these programs; a change of the rewrite that changes its output bumps it,
 * so stored programs of the old rewrite are never loaded. */
#define FLASHCL_SM90A_VARIANT "sm_90a-ptx-rewrite-1"

/* Why caps' device cannot run sm_90a variants (a sentence), or NULL when it can: an NVIDIA GPU of compute
 * capability 9.0 exactly (sm_90a code runs on nothing else). Pure. */
const char *flashcl_sm90a_device_refusal(const flashcl_device_caps *caps);

/* The sm_90a program of source (the whole text; label names it in messages) built with full_options: from the
 * disk cache when it holds it (under FLASHCL_SM90A_VARIANT), else built from source for sm_90, its PTX read back
 * and rewritten, rebuilt with clCreateProgramWithBinary + clBuildProgram (then stored). FLASHCL_SUCCESS and
 * *program; FLASHCL_ERROR_UNSUPPORTED when the variant is unavailable for any reason (no marker in the source,
 * another device, the sm_90 build failing, the rewrite refusing the driver's PTX, the rebuild failing), the
 * reason in flashcl_last_error and, with the driver's log where there is one, in flashcl_last_build_log: the
 * caller then runs its mma.sync kernels. FLASHCL_ERROR_OUT_OF_HOST_MEMORY as usual. */
flashcl_status flashcl_sm90a_program(flashcl_context *ctx, const char *source, const char *label,
                                     const char *full_options, cl_program *program);

#endif

/* ptx_entry.h: a per-thread register cap (.maxnreg) added to the kernel entries of a PTX text. A kernel whose
 * warpgroups move registers between them with setmaxnreg (producer down, consumers up: cl/forward_wgmma.cl's
 * WG_WS_REGS) needs ptxas to know the register count at entry, or ptxas ignores setmaxnreg (its advisory C7508);
 * CUDA gets that count from __launch_bounds__, OpenCL has no way to say it, so the host adds the directive to the
 * rewritten PTX. Pure C, no OpenCL call, no global state. */
#ifndef FLASHCL_PTX_ENTRY_H
#define FLASHCL_PTX_ENTRY_H

#include "ptx_rewrite.h"

/* The build option that asks for the cap: "-DFLASHCL_ENTRY_MAXNREG=N" (the kernel reads the same N to size its
 * setmaxnreg steps). */
#define FLASHCL_ENTRY_MAXNREG_OPTION "-DFLASHCL_ENTRY_MAXNREG="

/* N from the options (0: not asked for; -1: the option is there but N is not a number from 24 to 255). */
int flashcl_ptx_options_maxnreg(const char *options);

/* Copies ptx (length bytes) into out with a ".maxnreg <maxnreg>" line after the .reqntid (or .maxntid) line of
 * every .entry header. Refused: maxnreg outside 24..255 (FLASHCL_PTX_BAD_REGISTER_CAP), a text without an entry
 * or an entry without .reqntid / .maxntid in its header (FLASHCL_PTX_NO_ENTRY_BOUNDS: setmaxnreg needs them too),
 * an entry that has .maxnreg or .minnctapersm already (FLASHCL_PTX_CAPPED_ALREADY), a NUL inside the text
 * (FLASHCL_PTX_NOT_TEXT), a text above FLASHCL_PTX_MAX_BYTES; out->reason says why and where. out must be released
 * with flashcl_ptx_rewrite_free, whatever the result; out->markers counts the entries capped. */
flashcl_ptx_result flashcl_ptx_cap_registers(const char *ptx, size_t length, int maxnreg, flashcl_ptx_rewrite *out);

#endif

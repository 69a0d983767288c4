/* ptx_rewrite.h: turns the PTX that NVIDIA's OpenCL driver returns for an sm_90 build into sm_90a PTX (the
 * target line retargeted, every marked instruction un-commented). Pure C: no OpenCL call, no global state. */
#ifndef FLASHCL_PTX_REWRITE_H
#define FLASHCL_PTX_REWRITE_H

#include <stddef.h>

/* The marker. NVIDIA's OpenCL compiler refuses sm_90a-only instructions (wgmma, setmaxnreg, ...) in inline asm,
 * since it targets sm_90, and no build option changes that. A kernel therefore writes such an instruction as a
 * PTX comment inside its asm statement, operands bound as usual:
 *     asm volatile("// FLASHCL_SM90A wgmma.fence.sync.aligned;" ::: "memory");
 * The compiler allocates the operands' registers and substitutes them into the comment (%0 -> %f12); the
 * rewrite removes the comment prefix, so the line becomes the instruction, and the target becomes sm_90a.
 * One instruction per marker, ending in ';'. docs/nvidia.md ("sm_90a through rewritten PTX") has the rules. */
#define FLASHCL_PTX_MARKER "FLASHCL_SM90A"
#define FLASHCL_PTX_MARKER_PREFIX "// " FLASHCL_PTX_MARKER " "

/* Inputs above this are refused: no PTX of ours comes near it, and the output's size is bounded by the input's. */
#define FLASHCL_PTX_MAX_BYTES ((size_t)64 << 20)

/* Whether the PTX must hold markers: REQUIRED when the program's source has one (a text without any means the
 * compiler dropped them, or this is not that program's PTX); NONE for a plain retarget, where a marker is a
 * mistake. */
typedef enum flashcl_ptx_markers { FLASHCL_PTX_MARKERS_REQUIRED = 0, FLASHCL_PTX_MARKERS_NONE = 1 } flashcl_ptx_markers;

typedef enum flashcl_ptx_result {
    FLASHCL_PTX_OK = 0,
    FLASHCL_PTX_NOT_TEXT,           /* a NUL byte before the end: not PTX text */
    FLASHCL_PTX_TOO_LARGE,          /* above FLASHCL_PTX_MAX_BYTES */
    FLASHCL_PTX_NO_VERSION,         /* no (readable) .version line before .target */
    FLASHCL_PTX_OLD_VERSION,        /* PTX ISA below 8.0, the first that knows sm_90a */
    FLASHCL_PTX_NO_TARGET,          /* no .target line (or a marker before it) */
    FLASHCL_PTX_TWO_TARGETS,        /* more than one .target line */
    FLASHCL_PTX_WRONG_TARGET,       /* a target other than sm_90 or sm_90a */
    FLASHCL_PTX_MALFORMED_MARKER,   /* the marker not in its one form */
    FLASHCL_PTX_EMPTY_MARKER,       /* a marker with no instruction */
    FLASHCL_PTX_MARKER_OUTSIDE_ASM, /* a marker outside "// begin inline asm" ... "// end inline asm" */
    FLASHCL_PTX_UNSUBSTITUTED,      /* an operand (%0, %1, ...) the compiler did not substitute */
    FLASHCL_PTX_MARKERS_LEFT,       /* already sm_90a, yet markers are left: a half-rewritten text */
    FLASHCL_PTX_NO_MARKERS,         /* REQUIRED, sm_90, and not one marker */
    FLASHCL_PTX_UNEXPECTED_MARKERS, /* NONE, and a marker */
    FLASHCL_PTX_BAD_REGISTER_CAP,   /* ptx_entry.c: a register cap outside 24..255 */
    FLASHCL_PTX_NO_ENTRY_BOUNDS,    /* ptx_entry.c: no entry, or an entry without .reqntid / .maxntid */
    FLASHCL_PTX_CAPPED_ALREADY,     /* ptx_entry.c: an entry with .maxnreg or .minnctapersm already */
    FLASHCL_PTX_OUT_OF_MEMORY
} flashcl_ptx_result;

typedef struct flashcl_ptx_rewrite {
    char *text;         /* FLASHCL_PTX_OK: the rewritten PTX, malloc'd, NUL-terminated; else NULL */
    size_t length;      /* strlen(text) */
    int markers;        /* markers turned into instructions */
    int retargeted;     /* 1: the target line said sm_90 and now says sm_90a; 0: it said sm_90a already */
    unsigned long line; /* the line (from 1) a refusal is about; 0 when it is about the whole text */
    char reason[240];   /* a refusal's reason, with its line; "" on success */
} flashcl_ptx_rewrite;

/* Rewrites ptx (length bytes; trailing NULs, the terminator and padding CL_PROGRAM_BINARIES may count, are
 * ignored; a NUL before other bytes is refused) into out. The
 * target line's first target, sm_90, becomes sm_90a, the rest of the line (", texmode_independent") kept; every
 * marker line "<blanks>// FLASHCL_SM90A <instruction>;" becomes "<blanks><instruction>;". A text whose target
 * is sm_90a already and which holds no marker comes back unchanged (retargeted 0), whatever `markers` says, so
 * rewriting twice gives what rewriting once gave. Anything else it does not recognise is refused: out->text
 * NULL, out->reason saying why. The output is at most one byte longer than the input. out must be released with
 * flashcl_ptx_rewrite_free, whatever the result. */
flashcl_ptx_result flashcl_ptx_rewrite_sm90a(const char *ptx, size_t length, flashcl_ptx_markers markers,
                                             flashcl_ptx_rewrite *out);

void flashcl_ptx_rewrite_free(flashcl_ptx_rewrite *out);

/* 1 if a program's source text holds the marker (so its sm_90a variant needs the rewrite), else 0. */
int flashcl_ptx_source_has_marker(const char *source);

/* The result's name ("FLASHCL_PTX_NO_TARGET"). */
const char *flashcl_ptx_result_name(flashcl_ptx_result result);

#endif

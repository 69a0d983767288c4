/* ptx_entry.c: the .maxnreg directive added to each kernel entry's header of a PTX text (ptx_entry.h says why). */
#include "ptx_entry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int flashcl_ptx_options_maxnreg(const char *options) {
    const char *at = options ? strstr(options, FLASHCL_ENTRY_MAXNREG_OPTION) : NULL;
    if (!at) return 0;
    const char *p = at + strlen(FLASHCL_ENTRY_MAXNREG_OPTION);
    int value = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 4) value = value * 10 + (*p++ - '0'), ++digits;
    if (digits == 0 || (*p != '\0' && *p != ' ' && *p != '\t') || value < 24 || value > 255) return -1;
    return value;
}

/* [p, end) after leading blanks starts with the directive word (followed by a blank or the line's end). */
static int opens_with(const char *p, const char *end, const char *word) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const size_t n = strlen(word);
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 &&
           ((size_t)(end - p) == n || p[n] == ' ' || p[n] == '\t' || p[n] == '\r');
}

static flashcl_ptx_result refuse(flashcl_ptx_rewrite *out, flashcl_ptx_result result, unsigned long line,
                                 const char *detail) {
    out->line = line;
    if (line)
        snprintf(out->reason, sizeof out->reason, "line %lu: %s", line, detail);
    else
        snprintf(out->reason, sizeof out->reason, "%s", detail);
    free(out->text);
    out->text = NULL;
    out->length = 0;
    out->markers = 0;
    return result;
}

flashcl_ptx_result flashcl_ptx_cap_registers(const char *ptx, size_t length, int maxnreg, flashcl_ptx_rewrite *out) {
    memset(out, 0, sizeof *out);
    if (maxnreg < 24 || maxnreg > 255)
        return refuse(out, FLASHCL_PTX_BAD_REGISTER_CAP, 0, "a register cap outside 24..255");
    if (!ptx) length = 0;
    while (length > 0 && ptx[length - 1] == '\0') --length;
    if (length > FLASHCL_PTX_MAX_BYTES) return refuse(out, FLASHCL_PTX_TOO_LARGE, 0, "the text is too large");
    if (length && memchr(ptx, '\0', length)) return refuse(out, FLASHCL_PTX_NOT_TEXT, 0, "a NUL byte: not PTX text");
    char directive[24];
    const int directive_length = snprintf(directive, sizeof directive, ".maxnreg %d\n", maxnreg);
    /* Room: the text, one directive per line at most (an entry's bounds line is one of its lines), the NUL. */
    size_t lines = 1;
    for (size_t i = 0; i < length; ++i) lines += ptx[i] == '\n';
    if (lines > (SIZE_MAX - length - 1) / (size_t)directive_length)
        return refuse(out, FLASHCL_PTX_TOO_LARGE, 0, "the text is too large");
    out->text = malloc(length + lines * (size_t)directive_length + 1);
    if (!out->text) return refuse(out, FLASHCL_PTX_OUT_OF_MEMORY, 0, "out of host memory");
    int in_header = 0, bounded = 0;
    unsigned long number = 0, entry_line = 0;
    const char *p = length ? ptx : "", *end = p + length;
    while (p < end) {
        ++number;
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = newline ? newline : end;
        const size_t n = (size_t)(line_end - p) + (newline ? 1 : 0);
        const char *first = p;
        while (first < line_end && (*first == ' ' || *first == '\t')) ++first;
        const int visible_entry = opens_with(p, line_end, ".visible") && (size_t)(line_end - first) > 8 &&
                                  opens_with(first + 8, line_end, ".entry");
        if (opens_with(p, line_end, ".entry") || visible_entry) {
            if (in_header) return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, number, "an entry inside another's header");
            in_header = 1;
            bounded = 0;
            entry_line = number;
        } else if (in_header && (opens_with(p, line_end, ".maxnreg") || opens_with(p, line_end, ".minnctapersm"))) {
            return refuse(out, FLASHCL_PTX_CAPPED_ALREADY, number, "the entry has a register bound already");
        } else if (in_header && opens_with(p, line_end, "{")) {
            if (!bounded)
                return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, entry_line,
                              "an entry without .reqntid or .maxntid (setmaxnreg needs the work-group size too)");
            in_header = 0;
        }
        memcpy(out->text + out->length, p, n);
        out->length += n;
        if (in_header && (opens_with(p, line_end, ".reqntid") || opens_with(p, line_end, ".maxntid"))) {
            if (bounded) return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, number, "two work-group bounds in one entry");
            if (!newline) return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, number, "the text ends inside an entry header");
            bounded = 1;
            memcpy(out->text + out->length, directive, (size_t)directive_length);
            out->length += (size_t)directive_length;
            out->markers++;
        }
        p = newline ? newline + 1 : end;
    }
    if (in_header) return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, entry_line, "the text ends inside an entry header");
    if (out->markers == 0) return refuse(out, FLASHCL_PTX_NO_ENTRY_BOUNDS, 0, "no kernel entry in the text");
    out->text[out->length] = '\0';
    return FLASHCL_PTX_OK;
}

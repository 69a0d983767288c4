/* ptx_rewrite.c: the sm_90 -> sm_90a rewrite of driver PTX, line by line, refusing what it does not recognise. */
#include "ptx_rewrite.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line of the input: [begin, end), without its '\n'. */
typedef struct line {
    const char *begin, *end;
} line;

/* The rewrite's state. The output never outgrows the input by more than the one 'a' of "sm_90a" (every other
 * change removes text), so one buffer of length + 2 bytes holds it; `put` checks that bound all the same. */
typedef struct rewriter {
    flashcl_ptx_rewrite *out;
    char *buffer;
    size_t used, capacity;
    unsigned long line_number;
    int version_major, version_minor; /* -1: no .version line seen yet */
    int targets;                      /* .target lines seen */
    int already_sm90a;                /* the target line said sm_90a */
    int in_asm;                       /* between "// begin inline asm" and "// end inline asm" */
} rewriter;

static flashcl_ptx_result refuse(rewriter *r, flashcl_ptx_result result, unsigned long line_number,
                                 const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static flashcl_ptx_result refuse(rewriter *r, flashcl_ptx_result result, unsigned long line_number,
                                 const char *format, ...) {
    char detail[sizeof r->out->reason - 32]; /* room for "line N: " */
    va_list args;
    va_start(args, format);
    vsnprintf(detail, sizeof detail, format, args);
    va_end(args);
    r->out->line = line_number;
    if (line_number)
        snprintf(r->out->reason, sizeof r->out->reason, "line %lu: %s", line_number, detail);
    else
        snprintf(r->out->reason, sizeof r->out->reason, "%s", detail);
    return result;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_name_char(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static const char *skip_blanks(const char *p, const char *end) {
    while (p < end && is_blank(*p)) ++p;
    return p;
}

static const char *trim_end(const char *begin, const char *end) {
    while (end > begin && is_blank(end[-1])) --end;
    return end;
}

/* 1 if [p, end) starts with the NUL-terminated word. */
static int starts_with(const char *p, const char *end, const char *word) {
    const size_t n = strlen(word);
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}

/* The first occurrence of word in [p, end), or NULL (the line is not NUL-terminated: no strstr). */
static const char *find(const char *p, const char *end, const char *word) {
    const size_t n = strlen(word);
    for (; (size_t)(end - p) >= n; ++p)
        if (memcmp(p, word, n) == 0) return p;
    return NULL;
}

/* 1 if [p, end) is exactly word, blanks around it aside. */
static int line_is(const line *l, const char *word) {
    const char *p = skip_blanks(l->begin, l->end), *e = trim_end(p, l->end);
    return (size_t)(e - p) == strlen(word) && memcmp(p, word, (size_t)(e - p)) == 0;
}

static int put(rewriter *r, const char *p, size_t n) {
    if (n > r->capacity - r->used) return 0;
    memcpy(r->buffer + r->used, p, n);
    r->used += n;
    return 1;
}

static flashcl_ptx_result put_or_refuse(rewriter *r, const char *p, size_t n) {
    return put(r, p, n) ? FLASHCL_PTX_OK
                        : refuse(r, FLASHCL_PTX_OUT_OF_MEMORY, r->line_number, "the output outgrew its bound");
}

/* Reads a small decimal number at *p (at most 4 digits: PTX versions are 1.0 .. 9.x); -1 if none. */
static int read_number(const char **p, const char *end) {
    int value = 0, digits = 0;
    while (*p < end && is_digit(**p) && digits < 5) {
        value = value * 10 + (**p - '0');
        ++*p;
        ++digits;
    }
    return digits == 0 || digits > 4 ? -1 : value;
}

/* ".version <major>.<minor>": the first one counts (the header's). */
static flashcl_ptx_result version_line(rewriter *r, const char *p, const char *end) {
    if (r->version_major >= 0) return FLASHCL_PTX_OK;
    p = skip_blanks(p, end);
    const int major = read_number(&p, end);
    const int minor = p < end && *p == '.' ? (++p, read_number(&p, end)) : -1;
    if (major < 0 || minor < 0 || skip_blanks(p, end) != end)
        return refuse(r, FLASHCL_PTX_NO_VERSION, r->line_number, "unreadable .version line (want \".version 8.x\")");
    r->version_major = major;
    r->version_minor = minor;
    return FLASHCL_PTX_OK;
}

/* ".target sm_90[, more]": the first target retargeted, the rest of the line kept as it is. */
static flashcl_ptx_result target_line(rewriter *r, const line *l, const char *after_word) {
    if (++r->targets > 1) return refuse(r, FLASHCL_PTX_TWO_TARGETS, r->line_number, "a second .target line");
    if (r->version_major < 0)
        return refuse(r, FLASHCL_PTX_NO_VERSION, r->line_number, "no .version line before .target");
    if (r->version_major < 8)
        return refuse(r, FLASHCL_PTX_OLD_VERSION, r->line_number,
                      "PTX ISA %d.%d is older than 8.0, the first that knows sm_90a", r->version_major,
                      r->version_minor);
    const char *name = skip_blanks(after_word, l->end), *name_end = name;
    while (name_end < l->end && is_name_char(*name_end)) ++name_end;
    const size_t n = (size_t)(name_end - name);
    const int sm90 = n == 5 && memcmp(name, "sm_90", 5) == 0, sm90a = n == 6 && memcmp(name, "sm_90a", 6) == 0;
    if (!sm90 && !sm90a) {
        if (n == 0) return refuse(r, FLASHCL_PTX_WRONG_TARGET, r->line_number, ".target names no target");
        return refuse(r, FLASHCL_PTX_WRONG_TARGET, r->line_number, "target %.*s is neither sm_90 nor sm_90a",
                      n > 32 ? 32 : (int)n, name);
    }
    if (sm90a) {
        r->already_sm90a = 1;
        return put_or_refuse(r, l->begin, (size_t)(l->end - l->begin));
    }
    flashcl_ptx_result result = put_or_refuse(r, l->begin, (size_t)(name_end - l->begin));
    if (result == FLASHCL_PTX_OK) result = put_or_refuse(r, "a", 1);
    if (result == FLASHCL_PTX_OK) result = put_or_refuse(r, name_end, (size_t)(l->end - name_end));
    r->out->retargeted = result == FLASHCL_PTX_OK;
    return result;
}

/* The one form of an instruction after the marker: an opcode or a guard first, printable ASCII, one ';' at its
 * end, no comment, no other marker, every operand substituted. */
static flashcl_ptx_result check_instruction(rewriter *r, const char *p, const char *end) {
    if (p == end || (end - p == 1 && *p == ';'))
        return refuse(r, FLASHCL_PTX_EMPTY_MARKER, r->line_number,
                      "empty marker (want \"" FLASHCL_PTX_MARKER_PREFIX "<instruction>;\")");
    if (end[-1] != ';')
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number, "the marked instruction does not end in ';'");
    /* An opcode (lower case) or a guard predicate: never a directive such as ".target", which would change the
     * text's header once un-commented. */
    if (!((*p >= 'a' && *p <= 'z') || *p == '@'))
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number,
                      "the marked text is no instruction (it must open with an opcode or an @predicate)");
    for (const char *c = p; c < end; ++c) {
        if ((*c < 0x20 || *c > 0x7e) && *c != '\t')
            return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number,
                          "byte 0x%02x in the marked instruction", (unsigned)(unsigned char)*c);
        if (*c == ';' && c + 1 != end)
            return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number,
                          "more than one instruction after a marker (one per marker)");
        if (*c == '%' && c + 1 < end && is_digit(c[1]))
            return refuse(r, FLASHCL_PTX_UNSUBSTITUTED, r->line_number,
                          "operand %%%c was not substituted by the compiler", c[1]);
    }
    if (find(p, end, "//") || find(p, end, "/*"))
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number, "a comment inside the marked instruction");
    if (find(p, end, FLASHCL_PTX_MARKER))
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number, "two markers on one line");
    return FLASHCL_PTX_OK;
}

/* A line that mentions the marker: it must be "<blanks>// FLASHCL_SM90A <instruction>;<blanks>" inside inline
 * asm, after the target line, and expected; it is written as "<blanks><instruction>;<blanks>". */
static flashcl_ptx_result marker_line(rewriter *r, const line *l, flashcl_ptx_markers markers) {
    const char *p = skip_blanks(l->begin, l->end);
    static const char opening[] = "// " FLASHCL_PTX_MARKER;
    if (!starts_with(p, l->end, opening))
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number,
                      "the marker does not open its line as \"" FLASHCL_PTX_MARKER_PREFIX "<instruction>;\"");
    const char *after = p + sizeof opening - 1, *content_end = trim_end(after, l->end);
    if (after < content_end && !is_blank(*after))
        return refuse(r, FLASHCL_PTX_MALFORMED_MARKER, r->line_number, "the marker is not followed by a blank");
    const char *instruction = skip_blanks(after, content_end);
    flashcl_ptx_result result = check_instruction(r, instruction, content_end);
    if (result != FLASHCL_PTX_OK) return result;
    if (r->targets == 0)
        return refuse(r, FLASHCL_PTX_NO_TARGET, r->line_number, "a marker before any .target line");
    if (!r->in_asm)
        return refuse(r, FLASHCL_PTX_MARKER_OUTSIDE_ASM, r->line_number,
                      "a marker outside \"// begin inline asm\" ... \"// end inline asm\"");
    if (r->already_sm90a)
        return refuse(r, FLASHCL_PTX_MARKERS_LEFT, r->line_number,
                      "the target is sm_90a already, yet a marker is left (a half-rewritten text?)");
    if (markers == FLASHCL_PTX_MARKERS_NONE)
        return refuse(r, FLASHCL_PTX_UNEXPECTED_MARKERS, r->line_number, "a marker where none was expected");
    r->out->markers++;
    result = put_or_refuse(r, l->begin, (size_t)(p - l->begin));
    if (result == FLASHCL_PTX_OK) result = put_or_refuse(r, instruction, (size_t)(l->end - instruction));
    return result;
}

static flashcl_ptx_result one_line(rewriter *r, const line *l, flashcl_ptx_markers markers) {
    if (find(l->begin, l->end, FLASHCL_PTX_MARKER)) return marker_line(r, l, markers);
    if (line_is(l, "// begin inline asm")) r->in_asm = 1;
    if (line_is(l, "// end inline asm")) r->in_asm = 0;
    const char *p = skip_blanks(l->begin, l->end);
    if (starts_with(p, l->end, ".version") && p + 8 < l->end && is_blank(p[8])) {
        flashcl_ptx_result result = version_line(r, p + 8, l->end);
        if (result != FLASHCL_PTX_OK) return result;
    }
    if (starts_with(p, l->end, ".target") && p + 7 < l->end && is_blank(p[7])) return target_line(r, l, p + 7);
    if (starts_with(p, l->end, ".target") && (p + 7 == l->end || !is_name_char(p[7])))
        return refuse(r, FLASHCL_PTX_WRONG_TARGET, r->line_number, ".target names no target");
    return put_or_refuse(r, l->begin, (size_t)(l->end - l->begin));
}

static flashcl_ptx_result rewrite(rewriter *r, const char *ptx, size_t length, flashcl_ptx_markers markers) {
    const char *p = ptx, *end = ptx + length;
    while (p < end) {
        ++r->line_number;
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        const line l = {p, newline ? newline : end};
        flashcl_ptx_result result = one_line(r, &l, markers);
        if (result == FLASHCL_PTX_OK && newline) result = put_or_refuse(r, "\n", 1);
        if (result != FLASHCL_PTX_OK) return result;
        p = newline ? newline + 1 : end;
    }
    if (r->targets == 0) return refuse(r, FLASHCL_PTX_NO_TARGET, 0, "no .target line");
    if (!r->already_sm90a && r->out->markers == 0 && markers == FLASHCL_PTX_MARKERS_REQUIRED)
        return refuse(r, FLASHCL_PTX_NO_MARKERS, 0,
                      "no " FLASHCL_PTX_MARKER " marker in the PTX, though its source has one");
    return FLASHCL_PTX_OK;
}

flashcl_ptx_result flashcl_ptx_rewrite_sm90a(const char *ptx, size_t length, flashcl_ptx_markers markers,
                                             flashcl_ptx_rewrite *out) {
    memset(out, 0, sizeof *out);
    rewriter r = {out, NULL, 0, 0, 0, -1, -1, 0, 0, 0};
    if (!ptx) { /* as the empty text: no arithmetic on a NULL pointer */
        ptx = "";
        length = 0;
    }
    while (length > 0 && ptx[length - 1] == '\0') --length; /* the terminating NUL and any padding after it */
    if (length > FLASHCL_PTX_MAX_BYTES)
        return refuse(&r, FLASHCL_PTX_TOO_LARGE, 0, "%zu bytes, above the %zu a PTX text may have", length,
                      FLASHCL_PTX_MAX_BYTES);
    const char *nul = length ? memchr(ptx, '\0', length) : NULL;
    if (nul) return refuse(&r, FLASHCL_PTX_NOT_TEXT, 0, "a NUL byte at offset %zu: not PTX text", (size_t)(nul - ptx));
    r.capacity = length + 1; /* + the 'a'; the NUL comes on top */
    r.buffer = malloc(r.capacity + 1);
    if (!r.buffer) return refuse(&r, FLASHCL_PTX_OUT_OF_MEMORY, 0, "out of host memory");
    flashcl_ptx_result result = rewrite(&r, ptx, length, markers);
    if (result != FLASHCL_PTX_OK) {
        free(r.buffer);
        out->markers = 0;
        out->retargeted = 0;
        return result;
    }
    r.buffer[r.used] = '\0';
    out->text = r.buffer;
    out->length = r.used;
    return FLASHCL_PTX_OK;
}

void flashcl_ptx_rewrite_free(flashcl_ptx_rewrite *out) {
    if (!out) return;
    free(out->text);
    out->text = NULL;
    out->length = 0;
}

int flashcl_ptx_source_has_marker(const char *source) {
    return source && strstr(source, FLASHCL_PTX_MARKER_PREFIX) != NULL;
}

const char *flashcl_ptx_result_name(flashcl_ptx_result result) {
    switch (result) {
#define NAME(r) \
    case r:     \
        return #r;
        NAME(FLASHCL_PTX_OK) NAME(FLASHCL_PTX_NOT_TEXT) NAME(FLASHCL_PTX_TOO_LARGE) NAME(FLASHCL_PTX_NO_VERSION)
        NAME(FLASHCL_PTX_OLD_VERSION) NAME(FLASHCL_PTX_NO_TARGET) NAME(FLASHCL_PTX_TWO_TARGETS)
        NAME(FLASHCL_PTX_WRONG_TARGET) NAME(FLASHCL_PTX_MALFORMED_MARKER) NAME(FLASHCL_PTX_EMPTY_MARKER)
        NAME(FLASHCL_PTX_MARKER_OUTSIDE_ASM) NAME(FLASHCL_PTX_UNSUBSTITUTED) NAME(FLASHCL_PTX_MARKERS_LEFT)
        NAME(FLASHCL_PTX_NO_MARKERS) NAME(FLASHCL_PTX_UNEXPECTED_MARKERS) NAME(FLASHCL_PTX_BAD_REGISTER_CAP)
        NAME(FLASHCL_PTX_NO_ENTRY_BOUNDS) NAME(FLASHCL_PTX_CAPPED_ALREADY) NAME(FLASHCL_PTX_OUT_OF_MEMORY)
#undef NAME
    }
    return "unknown";
}

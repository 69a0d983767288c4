/* fuzz_ptx_rewrite.c: libFuzzer target for the sm_90 -> sm_90a PTX rewrite (src/ptx_rewrite.c), built with
 * -fsanitize=fuzzer,address,undefined (tests/fuzz/CMakeLists.txt, FLASHCL_FUZZ=ON). Beyond "no crash, no sanitizer
 * report", every input, in both marker modes, checks ptx_rewrite.h's contract:
 *   - refusal: no text, a non-empty reason that fits its buffer;
 *   - success: a NUL-terminated text of the stated length, at most one byte longer than the input without its
 *     trailing NULs, no marker left, no reason; and rewriting that text again gives it back unchanged (markers 0,
 *     retargeted 0): the rewrite is idempotent.
 * And the register cap of src/ptx_entry.c on the same input: a refusal leaves no text and a reason; a success is
 * the input plus exactly one ".maxnreg 168" line per entry capped, and capping it again is refused as capped
 * already. A broken promise aborts, which libFuzzer reports as a crash with the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_entry.h"
#include "ptx_rewrite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

static void one_mode(const char *text, size_t size, flashcl_ptx_markers markers) {
    size_t trimmed = size;
    while (trimmed > 0 && text[trimmed - 1] == '\0') --trimmed;
    flashcl_ptx_rewrite out;
    const flashcl_ptx_result result = flashcl_ptx_rewrite_sm90a(text, size, markers, &out);
    check(memchr(out.reason, '\0', sizeof out.reason) != NULL);
    if (result != FLASHCL_PTX_OK) {
        check(out.text == NULL && out.reason[0] != '\0');
        flashcl_ptx_rewrite_free(&out);
        return;
    }
    check(out.text != NULL && out.reason[0] == '\0');
    check(strlen(out.text) == out.length && out.length <= trimmed + 1);
    check(strstr(out.text, FLASHCL_PTX_MARKER) == NULL);
    flashcl_ptx_rewrite again;
    check(flashcl_ptx_rewrite_sm90a(out.text, out.length, FLASHCL_PTX_MARKERS_REQUIRED, &again) == FLASHCL_PTX_OK);
    check(again.length == out.length && memcmp(again.text, out.text, out.length) == 0);
    check(again.markers == 0 && again.retargeted == 0);
    flashcl_ptx_rewrite_free(&again);
    flashcl_ptx_rewrite_free(&out);
}

static void register_cap(const char *text, size_t size) {
    size_t trimmed = size;
    while (trimmed > 0 && text[trimmed - 1] == '\0') --trimmed;
    flashcl_ptx_rewrite out;
    const flashcl_ptx_result result = flashcl_ptx_cap_registers(text, size, 168, &out);
    check(memchr(out.reason, '\0', sizeof out.reason) != NULL);
    if (result != FLASHCL_PTX_OK) {
        check(out.text == NULL && out.reason[0] != '\0');
        flashcl_ptx_rewrite_free(&out);
        return;
    }
    check(out.text != NULL && out.reason[0] == '\0' && out.markers > 0);
    check(strlen(out.text) == out.length && out.length == trimmed + (size_t)out.markers * strlen(".maxnreg 168\n"));
    flashcl_ptx_rewrite again;
    check(flashcl_ptx_cap_registers(out.text, out.length, 168, &again) == FLASHCL_PTX_CAPPED_ALREADY);
    flashcl_ptx_rewrite_free(&again);
    flashcl_ptx_rewrite_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    register_cap((const char *)data, size);
    one_mode((const char *)data, size, FLASHCL_PTX_MARKERS_REQUIRED);
    one_mode((const char *)data, size, FLASHCL_PTX_MARKERS_NONE);
    return 0;
}

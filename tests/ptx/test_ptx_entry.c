/* test_ptx_entry.c: the register cap added to PTX kernel entries (src/ptx_entry.c), for kernels that use
 * setmaxnreg: where the directive goes, what is refused and why, the build option that asks for it. No device. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_entry.h"

/* An entry header as NVIDIA's driver writes it for a kernel with reqd_work_group_size (@BOUNDS@: its lines). */
static const char entry_template[] =
    ".version 9.0\n"
    ".target sm_90a, texmode_independent\n"
    ".address_size 64\n"
    "\n"
    "\t// .globl\tk\n"
    ".entry k(\n"
    "\t.param .u64 .ptr .global .align 4 k_param_0\n"
    ")\n"
    "@BOUNDS@"
    "{\n"
    "\t.reg .b32 \t%r<4>;\n"
    "\t// begin inline asm\n"
    "\t{\n"
    "\t.reg .pred p;\n"
    "\t}\n"
    "\t// end inline asm\n"
    "\tret;\n"
    "}\n";

static char *with_bounds(const char *bounds) {
    const char *at = strstr(entry_template, "@BOUNDS@");
    const size_t head = (size_t)(at - entry_template), tail = strlen(at + 8);
    char *text = malloc(head + strlen(bounds) + tail + 1);
    ck_assert_ptr_nonnull(text);
    memcpy(text, entry_template, head);
    strcpy(text + head, bounds);
    strcat(text, at + 8);
    return text;
}

static flashcl_ptx_result cap(const char *text, int maxnreg, flashcl_ptx_rewrite *out) {
    return flashcl_ptx_cap_registers(text, strlen(text), maxnreg, out);
}

START_TEST(adds_the_cap_after_the_bounds) {
    char *text = with_bounds(".reqntid 384, 1, 1\n");
    flashcl_ptx_rewrite out;
    ck_assert_int_eq(cap(text, 168, &out), FLASHCL_PTX_OK);
    ck_assert_int_eq(out.markers, 1);
    ck_assert_str_eq(out.reason, "");
    ck_assert_ptr_nonnull(strstr(out.text, ")\n.reqntid 384, 1, 1\n.maxnreg 168\n{\n"));
    /* Nothing else changes: the text minus the one new line is the input. */
    ck_assert_uint_eq(out.length, strlen(text) + strlen(".maxnreg 168\n"));
    ck_assert_uint_eq(out.length, strlen(out.text));
    char *back = strstr(out.text, ".maxnreg 168\n");
    memmove(back, back + 13, strlen(back + 13) + 1);
    ck_assert_str_eq(out.text, text);
    flashcl_ptx_rewrite_free(&out);
    ck_assert_ptr_null(out.text);
    /* .maxntid bounds too, and the range's ends. */
    free(text);
    text = with_bounds(".maxntid 256, 1, 1\n");
    ck_assert_int_eq(cap(text, 24, &out), FLASHCL_PTX_OK);
    ck_assert_ptr_nonnull(strstr(out.text, ".maxntid 256, 1, 1\n.maxnreg 24\n{"));
    flashcl_ptx_rewrite_free(&out);
    ck_assert_int_eq(cap(text, 255, &out), FLASHCL_PTX_OK);
    ck_assert_ptr_nonnull(strstr(out.text, ".maxnreg 255\n"));
    flashcl_ptx_rewrite_free(&out);
    free(text);
}
END_TEST

START_TEST(every_entry) {
    /* Two entries (one .visible), each capped; trailing NULs (CL_PROGRAM_BINARIES's padding) ignored. */
    char *one = with_bounds(".reqntid 128, 1, 1\n");
    const char *second = "\n.visible .entry k2(\n)\n.reqntid 256, 1, 1\n{\n\tret;\n}\n";
    char *text = malloc(strlen(one) + strlen(second) + 3);
    strcpy(text, one);
    strcat(text, second);
    const size_t length = strlen(text);
    text[length + 1] = '\0';
    flashcl_ptx_rewrite out;
    ck_assert_int_eq(flashcl_ptx_cap_registers(text, length + 2, 200, &out), FLASHCL_PTX_OK);
    ck_assert_int_eq(out.markers, 2);
    ck_assert_ptr_nonnull(strstr(out.text, ".reqntid 128, 1, 1\n.maxnreg 200\n{"));
    ck_assert_ptr_nonnull(strstr(out.text, ".reqntid 256, 1, 1\n.maxnreg 200\n{"));
    ck_assert_uint_eq(out.length, length + 2 * strlen(".maxnreg 200\n"));
    flashcl_ptx_rewrite_free(&out);
    free(text);
    free(one);
}
END_TEST

START_TEST(refusals) {
    flashcl_ptx_rewrite out;
    char *text = with_bounds(".reqntid 384, 1, 1\n");
    /* Caps outside what a thread may hold. */
    ck_assert_int_eq(cap(text, 23, &out), FLASHCL_PTX_BAD_REGISTER_CAP);
    ck_assert_ptr_null(out.text);
    flashcl_ptx_rewrite_free(&out);
    ck_assert_int_eq(cap(text, 256, &out), FLASHCL_PTX_BAD_REGISTER_CAP);
    flashcl_ptx_rewrite_free(&out);
    /* A NUL inside the text. */
    char *broken = strdup(text);
    broken[20] = '\0';
    ck_assert_int_eq(flashcl_ptx_cap_registers(broken, strlen(text), 168, &out), FLASHCL_PTX_NOT_TEXT);
    flashcl_ptx_rewrite_free(&out);
    free(broken);
    /* The text ends in the header. */
    ck_assert_int_eq(flashcl_ptx_cap_registers(text, (size_t)(strstr(text, "{\n") - text), 168, &out),
                     FLASHCL_PTX_NO_ENTRY_BOUNDS);
    flashcl_ptx_rewrite_free(&out);
    free(text);
    /* No bounds: the entry's line is named. */
    text = with_bounds("");
    ck_assert_int_eq(cap(text, 168, &out), FLASHCL_PTX_NO_ENTRY_BOUNDS);
    ck_assert_uint_eq(out.line, 6);
    ck_assert_ptr_nonnull(strstr(out.reason, "line 6: "));
    ck_assert_ptr_null(out.text);
    flashcl_ptx_rewrite_free(&out);
    free(text);
    /* A bound already there, .maxnreg or .minnctapersm, is never doubled. */
    text = with_bounds(".reqntid 384, 1, 1\n.maxnreg 128\n");
    ck_assert_int_eq(cap(text, 168, &out), FLASHCL_PTX_CAPPED_ALREADY);
    ck_assert_uint_eq(out.line, 10);
    flashcl_ptx_rewrite_free(&out);
    free(text);
    text = with_bounds(".minnctapersm 1\n.reqntid 384, 1, 1\n");
    ck_assert_int_eq(cap(text, 168, &out), FLASHCL_PTX_CAPPED_ALREADY);
    flashcl_ptx_rewrite_free(&out);
    free(text);
    /* Two bounds lines in one header. */
    text = with_bounds(".reqntid 384, 1, 1\n.maxntid 384, 1, 1\n");
    ck_assert_int_eq(cap(text, 168, &out), FLASHCL_PTX_NO_ENTRY_BOUNDS);
    flashcl_ptx_rewrite_free(&out);
    free(text);
    /* No entry at all (a .func is not one), or no text. */
    ck_assert_int_eq(cap(".version 9.0\n.target sm_90a\n.func f()\n{\n\tret;\n}\n", 168, &out),
                     FLASHCL_PTX_NO_ENTRY_BOUNDS);
    flashcl_ptx_rewrite_free(&out);
    ck_assert_int_eq(flashcl_ptx_cap_registers(NULL, 0, 168, &out), FLASHCL_PTX_NO_ENTRY_BOUNDS);
    flashcl_ptx_rewrite_free(&out);
    ck_assert_str_eq(flashcl_ptx_result_name(FLASHCL_PTX_CAPPED_ALREADY), "FLASHCL_PTX_CAPPED_ALREADY");
    ck_assert_str_eq(flashcl_ptx_result_name(FLASHCL_PTX_BAD_REGISTER_CAP), "FLASHCL_PTX_BAD_REGISTER_CAP");
    ck_assert_str_eq(flashcl_ptx_result_name(FLASHCL_PTX_NO_ENTRY_BOUNDS), "FLASHCL_PTX_NO_ENTRY_BOUNDS");
}
END_TEST

START_TEST(real_driver_ptx) {
    /* The PTX an H100's driver returned (tests/ptx/data): one entry with .reqntid 128. */
    FILE *f = fopen(PTX_TEST_DATA "/h100_driver_sm90.ptx", "rb");
    ck_assert_ptr_nonnull(f);
    char *text = malloc(1 << 20);
    const size_t length = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[length] = '\0';
    flashcl_ptx_rewrite out;
    ck_assert_int_eq(flashcl_ptx_cap_registers(text, length, 168, &out), FLASHCL_PTX_OK);
    ck_assert_int_eq(out.markers, 1);
    ck_assert_ptr_nonnull(strstr(out.text, ")\n.reqntid 128, 1, 1\n.maxnreg 168\n{\n"));
    ck_assert_uint_eq(out.length, length + strlen(".maxnreg 168\n"));
    flashcl_ptx_rewrite_free(&out);
    free(text);
}
END_TEST

START_TEST(build_option) {
    ck_assert_int_eq(flashcl_ptx_options_maxnreg(NULL), 0);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DHEAD_DIM=64 -DWG_WS=1"), 0);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DA=1 -DFLASHCL_ENTRY_MAXNREG=168 -DB=2"), 168);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=24"), 24);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=255\t-DX"), 255);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=16"), -1);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=256"), -1);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG="), -1);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=168x"), -1);
    ck_assert_int_eq(flashcl_ptx_options_maxnreg("-DFLASHCL_ENTRY_MAXNREG=00168"), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ptx_entry");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, adds_the_cap_after_the_bounds);
    tcase_add_test(tc, every_entry);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, real_driver_ptx);
    tcase_add_test(tc, build_option);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

/* dtype_option.h: the --dtype words (f32, f16, bf16) that run, bench and tune share. */
#ifndef FLASHCL_TOOLS_DTYPE_OPTION_H
#define FLASHCL_TOOLS_DTYPE_OPTION_H

#include "flashcl.h"

/* 0 and *dtype set for "f32", "f16" or "bf16"; -1 (nothing set) for any other word. */
int cli_dtype_parse(const char *word, flashcl_dtype *dtype);

/* The word of dtype: "f32", "f16", "bf16" ("?" for another value). */
const char *cli_dtype_word(flashcl_dtype dtype);

#endif

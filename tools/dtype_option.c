/* dtype_option.c: the --dtype words, one table for every command. */
#include "dtype_option.h"

#include <string.h>

static const struct {
    const char *word;
    flashcl_dtype dtype;
} words[] = {{"f32", FLASHCL_DTYPE_F32}, {"f16", FLASHCL_DTYPE_F16}, {"bf16", FLASHCL_DTYPE_BF16}};

int cli_dtype_parse(const char *word, flashcl_dtype *dtype) {
    for (size_t i = 0; word && i < sizeof words / sizeof words[0]; ++i)
        if (strcmp(word, words[i].word) == 0) {
            *dtype = words[i].dtype;
            return 0;
        }
    return -1;
}

const char *cli_dtype_word(flashcl_dtype dtype) {
    for (size_t i = 0; i < sizeof words / sizeof words[0]; ++i)
        if (words[i].dtype == dtype) return words[i].word;
    return "?";
}

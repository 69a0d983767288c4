/* support_context.c: the one way a device suite gets a flashcl context. */
#include "support_context.h"

#include <check.h>

flashcl_context *ts_context(void) {
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS && ctx, "flashcl_context_create: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(NULL));
    return ctx;
}

flashcl_call_stats ts_explain(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc) {
    flashcl_call_stats s;
    ck_assert_msg(flashcl_explain_call(ctx, pass, desc, NULL, &s) == FLASHCL_SUCCESS, "flashcl_explain_call: %s",
                  flashcl_last_error(ctx));
    return s;
}

flashcl_call_stats ts_last_stats(flashcl_context *ctx) {
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    return s;
}

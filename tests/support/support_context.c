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

/* call_plan.h: a call's execution plan on a context (the dispatcher fed from the context), and its record. */
#ifndef FLASHCL_CALL_PLAN_H
#define FLASHCL_CALL_PLAN_H

#include "dispatch.h"

/* The plan for a call of pass on ctx with its resolved features and tensor
 * views (views: every tensor of the call, NULL entries skipped; k and v
 * among them); on failure ctx's error says why. */
flashcl_status flashcl_plan_call(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                 const flashcl_features *features, const flashcl_tensor *const *views,
                                 int view_count, const flashcl_tensor *k, const flashcl_tensor *v,
                                 flashcl_exec_plan *plan);

/* The plan of a flashcl_forward_kv_cache call: desc->seqlen_k the most keys
 * a sequence may have (the capacity); k and v the cache's views. */
flashcl_status flashcl_plan_kv_cache_call(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                          const flashcl_features *features, const flashcl_tensor *const *views,
                                          int view_count, const flashcl_tensor *k, const flashcl_tensor *v,
                                          int paged, int append, flashcl_exec_plan *plan);

/* Records what ran: the record flashcl_last_call_stats reports. */
void flashcl_record_stats(flashcl_context *ctx, const flashcl_exec_plan *plan);

#endif

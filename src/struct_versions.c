/* struct_versions.c: the released sizes and the defaults of each versioned public struct, and the typed
 * imports the public calls use.
 *
 * Growing a struct (README, "ABI policy"): append the field at the end, make its zero mean "as before",
 * make sizeof grow (an explicit padding member if the field would fit in the old tail padding), and
 * append the new size to the struct's table here, after the old sizes spelled as the offset of the first
 * new field, e.g. {offsetof(flashcl_attention_desc, new_field), sizeof(flashcl_attention_desc)}. The old
 * sizes stay forever: they are how an older caller's struct is recognised. */
#include "struct_abi.h"

#include <stddef.h>
#include <string.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

static const size_t options_versions[] = {sizeof(flashcl_context_options)};
static const size_t desc_versions[] = {sizeof(flashcl_attention_desc)};
/* Version 2 appended the score modifiers (softcap, ALiBi), version 3 the additive bias and its gradient. */
static const size_t extras_versions[] = {offsetof(flashcl_attention_extras, softcap),
                                         offsetof(flashcl_attention_extras, bias), sizeof(flashcl_attention_extras)};
/* Version 2 appended static_local_mem_bytes (NVIDIA's static local memory beyond the reported size). */
static const size_t limits_versions[] = {offsetof(flashcl_device_limits, static_local_mem_bytes),
                                         sizeof(flashcl_device_limits)};
static const size_t stats_versions[] = {sizeof(flashcl_call_stats)};
static const size_t kv_cache_versions[] = {sizeof(flashcl_kv_cache)};
static const size_t cache_stats_versions[] = {sizeof(flashcl_cache_stats)};

/* The desc's non-zero defaults: no window on either side. Its shape has no default (every version has it). */
static void desc_defaults(void *full) {
    flashcl_attention_desc *desc = full;
    memset(desc, 0, sizeof *desc);
    desc->struct_size = sizeof *desc;
    desc->dtype = FLASHCL_DTYPE_F32;
    desc->window_left = -1;
    desc->window_right = -1;
}

const flashcl_struct_abi flashcl_abi_context_options = {
    "flashcl_context_options", "flashcl_context_options_init", sizeof(flashcl_context_options),
    options_versions, COUNT(options_versions), NULL};
const flashcl_struct_abi flashcl_abi_attention_desc = {
    "flashcl_attention_desc", "flashcl_attention_desc_init", sizeof(flashcl_attention_desc),
    desc_versions, COUNT(desc_versions), desc_defaults};
const flashcl_struct_abi flashcl_abi_attention_extras = {
    "flashcl_attention_extras", "flashcl_attention_extras_init", sizeof(flashcl_attention_extras),
    extras_versions, COUNT(extras_versions), NULL};
const flashcl_struct_abi flashcl_abi_device_limits = {
    "flashcl_device_limits", "flashcl_device_limits_init (or flashcl_context_limits)",
    sizeof(flashcl_device_limits), limits_versions, COUNT(limits_versions), NULL};
const flashcl_struct_abi flashcl_abi_call_stats = {
    "flashcl_call_stats", "flashcl_last_call_stats or flashcl_explain_call", sizeof(flashcl_call_stats),
    stats_versions, COUNT(stats_versions), NULL};

const flashcl_struct_abi flashcl_abi_kv_cache = {
    "flashcl_kv_cache", "flashcl_kv_cache_init", sizeof(flashcl_kv_cache), kv_cache_versions, COUNT(kv_cache_versions),
    NULL};
const flashcl_struct_abi flashcl_abi_cache_stats = {
    "flashcl_cache_stats", "flashcl_context_cache_stats", sizeof(flashcl_cache_stats), cache_stats_versions,
    COUNT(cache_stats_versions), NULL};

flashcl_status flashcl_import_desc(flashcl_context *ctx, const flashcl_attention_desc **desc,
                                   flashcl_attention_desc *full) {
    if (!*desc) return FLASHCL_SUCCESS; /* the call's own check names the NULL */
    flashcl_status status = flashcl_struct_import(ctx, &flashcl_abi_attention_desc, *desc, full);
    if (status == FLASHCL_SUCCESS) *desc = full;
    return status;
}

flashcl_status flashcl_import_extras(flashcl_context *ctx, const flashcl_attention_extras **extras,
                                     flashcl_attention_extras *full) {
    if (!*extras) return FLASHCL_SUCCESS; /* NULL: no extras */
    flashcl_status status = flashcl_struct_import(ctx, &flashcl_abi_attention_extras, *extras, full);
    if (status == FLASHCL_SUCCESS) *extras = full;
    return status;
}

flashcl_status flashcl_import_options(const flashcl_context_options **options, flashcl_context_options *full) {
    if (!*options) return FLASHCL_SUCCESS; /* NULL: defaults */
    flashcl_status status = flashcl_struct_import(NULL, &flashcl_abi_context_options, *options, full);
    if (status == FLASHCL_SUCCESS) *options = full;
    return status;
}

/* bench_record.c: the list of measurements the reports are written from. */
#include "bench_record.h"

#include <math.h>
#include <stdlib.h>

void bench_record_clear_measurements(bench_record *r) {
    r->median_ms = r->tflops = r->extra_device_bytes = r->predicted_hbm_bytes = r->max_abs_err = NAN;
    r->varlen_ms = r->varlen_tflops = r->varlen_speedup = r->varlen_flops = r->padded_flops = r->varlen_tokens = NAN;
}

bench_record *bench_records_push(bench_record_list *list, const bench_record *record) {
    if (list->count == list->capacity) {
        const size_t capacity = list->capacity ? 2 * list->capacity : 16;
        bench_record *items = realloc(list->items, capacity * sizeof *items);
        if (!items) return NULL;
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->count] = *record;
    return &list->items[list->count++];
}

void bench_records_free(bench_record_list *list) {
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}

const bench_record *bench_records_find(const bench_record_list *list, int seqlen, flashcl_impl impl,
                                       bench_direction direction) {
    for (size_t i = 0; i < list->count; ++i) {
        const bench_record *r = &list->items[i];
        if (r->seqlen == seqlen && r->impl == impl && r->direction == direction) return r;
    }
    return NULL;
}

const char *bench_direction_name(bench_direction direction) {
    return direction == BENCH_DIR_FORWARD ? "fwd" : "fwd+bwd";
}

const char *bench_impl_name(flashcl_impl impl) { return impl == FLASHCL_IMPL_FLASH ? "flash" : "standard"; }

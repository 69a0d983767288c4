/* run_score_mods.c: `flashcl run`'s score modifiers: the slopes file checked against the problem, and the same
 * modifiers handed to the library call and to the --check reference. */
#include "run_score_mods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_inputs.h"

int run_score_mods_load(const run_options *o, int batch, int heads_q, run_score_mods *m) {
    memset(m, 0, sizeof *m);
    m->softcap = (float)o->softcap;
    m->max_bias = (float)o->alibi_max_bias;
    if (o->alibi_slopes_path) {
        if (run_load_npy(o->alibi_slopes_path, &m->slopes) != 0) return -1;
        const npy_array *s = &m->slopes;
        char shape[96];
        npy_format_shape(s->rank, s->shape, shape, sizeof shape);
        if (s->dtype != NPY_DTYPE_F32)
            return run_file_error(o->alibi_slopes_path, "ALiBi slopes must be float32 ('<f4'), not %s",
                                  npy_dtype_name(s->dtype));
        m->per_batch = s->rank == 2;
        if (!((s->rank == 1 && s->shape[0] == (size_t)heads_q) ||
              (s->rank == 2 && s->shape[0] == (size_t)batch && s->shape[1] == (size_t)heads_q)))
            return run_file_error(o->alibi_slopes_path, "shape %s is neither (Hq,) = (%d,) nor (B, Hq) = (%d, %d)",
                                  shape, heads_q, batch, heads_q);
        m->reference = malloc(s->count * sizeof *m->reference);
        if (!m->reference) return run_file_error(o->alibi_slopes_path, "out of host memory");
        memcpy(m->reference, s->data, s->count * sizeof *m->reference);
    } else if (m->max_bias > 0.0f) {
        m->reference = malloc((size_t)heads_q * sizeof *m->reference);
        if (!m->reference) {
            fprintf(stderr, "flashcl run: out of host memory\n");
            return -1;
        }
        flashcl_reference_alibi_slopes(heads_q, m->max_bias, m->reference);
    }
    return 0;
}

void run_score_mods_free(run_score_mods *m) {
    npy_free(&m->slopes);
    free(m->reference);
    memset(m, 0, sizeof *m);
}

void run_score_mods_extras(const run_score_mods *m, flashcl_attention_extras *x) {
    x->softcap = m->softcap;
    x->alibi_max_bias = m->max_bias;
    x->alibi_slopes_host = m->slopes.data;
    x->alibi_slopes_per_batch = m->per_batch;
}

void run_score_mods_reference(const run_score_mods *m, int b, int heads_q, flashcl_reference_extras *x) {
    x->softcap = m->softcap;
    x->alibi_slopes = m->reference ? m->reference + (m->per_batch ? (size_t)b * (size_t)heads_q : 0) : NULL;
    x->alibi_per_batch = 0;
}

void run_score_mods_reference_all(const run_score_mods *m, flashcl_reference_extras *x) {
    x->softcap = m->softcap;
    x->alibi_slopes = m->reference;
    x->alibi_per_batch = m->per_batch;
}

void run_score_mods_describe(const run_options *o, const run_score_mods *m, char *out, size_t size) {
    out[0] = '\0';
    size_t used = 0;
    if (m->softcap > 0.0f) used += (size_t)snprintf(out, size, "softcap %g", (double)m->softcap);
    if (used < size && o->alibi_slopes_path)
        snprintf(out + used, size - used, "%sALiBi slopes %s%s", used ? ", " : "", o->alibi_slopes_path,
                 m->per_batch ? " (per batch)" : "");
    else if (used < size && m->max_bias > 0.0f)
        snprintf(out + used, size - used, "%sALiBi max_bias %g", used ? ", " : "", (double)m->max_bias);
}

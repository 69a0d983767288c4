/* write_plans.c: for one offline compile target, writes every program flashcl would build on it (the sources
 * joined as the library joins them, from the same embedded copies) and a manifest of their -D options, the local
 * memory the planner counted and whether the build is expected to fail. compile_check.sh compiles them.
 * Usage: portability_write_plans TARGET OUTDIR */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile_targets.h"
#include "internal.h"
#include "kernel_families.h"
#include "program_cache.h"

/* Builds known to fail on a target, each with what fails: the check reports them as expected failures and fails
 * if one starts to pass (then remove its line). target and id are shell patterns (fnmatch) over the target's name
 * and the build's id. Found by this check, to be fixed in the library (cl/, src/), not here. */
typedef struct expected_failure {
    const char *target, *id, *why;
} expected_failure;

static const expected_failure expected_failures[] = {
    /* None at present. The last ones, gfx1030's forward and split-KV forward at head dim 64 (128x16 tiles on 8x16
     * work-items: 16 rows per work-item spilled 116-180 VGPRs on RDNA), went with RDNA's register budget in the
     * planner (src/register_budget.c). */
    {NULL, NULL, NULL},
};

static const char *expected_failure_for(const char *target, const char *id) {
    for (const expected_failure *e = expected_failures; e->target; ++e)
        if (fnmatch(e->target, target, 0) == 0 && fnmatch(e->id, id, 0) == 0)
            return e->why;
    return NULL;
}

typedef struct writer {
    const compile_target *target;
    const char *dir;
    FILE *manifest;
    flashcl_context *ctx; /* only for flashcl_kernel_source's sources (embedded: no kernel_dir) and its errors */
    int builds;
} writer;

static int write_build(const kernel_build *b, void *user) {
    writer *w = user;
    char *source = NULL;
    if (flashcl_kernel_source(w->ctx, b->prelude, b->program, &source) != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s: %s\n", b->id, w->ctx->error);
        return 1;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.cl", w->dir, b->id);
    FILE *f = fopen(path, "wb");
    const int ok = f && fputs(source, f) >= 0;
    if (f && fclose(f) != 0) f = NULL;
    free(source);
    if (!ok || !f) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    const char *why = expected_failure_for(w->target->name, b->id);
    /* id, source, planned local bytes, the target's limit, expectation, options (last: it holds spaces). */
    fprintf(w->manifest, "%s\t%s.cl\t%zu\t%zu\t%s\t%s\n", b->id, b->id, b->planned_local_bytes,
            w->target->local_mem_bytes, why ? why : "ok", b->options);
    ++w->builds;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s TARGET OUTDIR\n", argv[0]);
        return 2;
    }
    const compile_target *target = compile_target_find(argv[1]);
    if (!target) {
        fprintf(stderr, "unknown target %s (compile_targets.c)\n", argv[1]);
        return 2;
    }
    static flashcl_context ctx; /* zeroed: embedded sources */
    char manifest_path[1024];
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.tsv", argv[2]);
    writer w = {target, argv[2], fopen(manifest_path, "w"), &ctx, 0};
    if (!w.manifest) {
        fprintf(stderr, "cannot write %s\n", manifest_path);
        return 1;
    }
    const flashcl_device_caps caps = compile_target_caps(target);
    char error[1024] = "";
    const int status = kernel_families_walk(&caps, target->coverage, write_build, &w, error, sizeof error);
    if (fclose(w.manifest) != 0) return 1;
    if (status != 0) {
        if (error[0]) fprintf(stderr, "%s (%s, %s)\n", error, target->name, target->product);
        return 1;
    }
    printf("%s (%s): %d programs\n", target->name, target->product, w.builds);
    return 0;
}

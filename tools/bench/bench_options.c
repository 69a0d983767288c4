/* bench_options.c: parsing and usage text of `flashcl bench`'s options, and the protocol's defaults. */
#include "bench_options.h"
#include "dtype_option.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int PROTOCOL_SEQLENS[] = {512, 1024, 2048, 4096, 8192, 16384};
enum { PROTOCOL_HIDDEN = 2048, PROTOCOL_TOKENS = 16384 };

void bench_print_usage(FILE *out) {
    fprintf(out,
            "usage: flashcl bench [options]\n"
            "Times flash attention against standard attention (CLBlast GEMMs + softmax, N x N\n"
            "scores in device memory) over a sweep of sequence lengths, and checks that both agree.\n"
            "Defaults follow the FlashAttention-2 protocol: hidden size 2048 (heads = 2048 / d),\n"
            "batch = 16384 / N.\n\n"
            "  --seqlens LIST        sequence lengths N (default 512,1024,2048,4096,8192,16384)\n"
            "  --head-dim D          head dimension (default 64)\n"
            "  --batch B             batch size (default 16384 / N)\n"
            "  --heads H             heads (default 2048 / D)\n"
            "  --causal              causal mask (FLOPs halved)\n"
            "  --dtype f32|f16|bf16  storage type of Q, K, V, O (default f32); standard is\n"
            "                        float32 only: its f16/bf16 rows are marked unsupported\n"
            "  --impl LIST           flash, standard or both (default flash,standard; flash in a build\n"
            "                        without CLBlast, where standard is unavailable)\n"
            "  --repeat R            timed runs per measurement; the median is reported (default 10)\n"
            "  --warmup W            untimed runs first: kernel builds, first launches (default 2)\n"
            "  --backward            also time forward+backward (FLOPs = 3.5 x forward)\n"
            "  --device SPEC         device index or name substring (default: FLASHCL_DEVICE, else first GPU)\n"
            "  --json FILE           write the records as a JSON list\n"
            "  --csv FILE            write the records as CSV\n"
            "  --plot FILE.png       draw speedup and extra memory versus N (needs gnuplot)\n"
            "  --plan BQ,BK,TQ,TK    force the flash forward tile plan (the portable kernel's)\n"
            "  --tensor-cores auto|off|emulate\n"
            "                        f16/bf16 forward and backward on matrix units where the device has\n"
            "                        them (auto, default), never (off), or emulated on any device (slow;\n"
            "                        for tests); head_dim a multiple of 16 up to 128, and not with --plan,\n"
            "                        --dropout, --block-density or the packed --varlen calls (those run\n"
            "                        the portable kernels). The kernel that ran is in the table\n"
            "                        (flash/tensor-core/BACKEND, flash/tensor-core-emulated,\n"
            "                        flash/portable) and in the JSON and CSV fields kernel and backend\n"
            "                        (forward+backward rows: the backward's; the forward's kernel kind\n"
            "                        follows the same rule, its backend is the field forward_backend)\n"
            "  --f32-precision full|3xtf32\n"
            "                        f32 in float throughout (full, default) or on the tensor-core\n"
            "                        kernels in 3xTF32 (operands of ~23 bits; rows flash/tensor-core)\n"
            "  --memory-budget BYTES cap on extra device memory per call (suffixes K, M, G: KiB, MiB, GiB)\n"
            "  --no-check            do not compare flash against standard\n"
            "  --dropout P           fused dropout with probability P (flash only: needs --impl flash)\n"
            "  --block-density F     block-sparse: each query block keeps round(F x blocks) key blocks,\n"
            "                        a band shifted by one per row (flash only; TFLOP/s counts dense FLOPs)\n"
            "  --block-size N        block-mask block size (default 128)\n"
            "  --softcap C           logit soft-capping C * tanh(s / C) of the scaled scores (flash only)\n"
            "  --alibi-max-bias X    ALiBi with llama.cpp's per-head slopes of max_bias X (flash only); the\n"
            "                        modifiers' rows are the same calls with the modifier on: their time\n"
            "                        over a plain run's is the modifier's overhead (records: softcap,\n"
            "                        alibi_max_bias)\n"
            "  --bias shared|full    an additive bias in the storage type (flash only; not with --varlen),\n"
            "                        (1, 1, N, N) or (B, H, N, N), all zeros: its cost over a plain run is\n"
            "                        that of reading it (records: bias_bytes)\n"
            "  --varlen LO,HI        variable-length versus padded (flash): for each N, the B sequences\n"
            "                        get random lengths uniform in [LO x N, HI x N] (0 < LO <= HI <= 1)\n"
            "                        and are timed packed end to end (cu_seqlens) beside the padded\n"
            "                        batch, which is the plain flash row (all B sequences at N); a\n"
            "                        table per direction and the varlen_* / padded_flops fields report\n"
            "                        both times, their ratio and the FLOPs the real lengths need; the\n"
            "                        packed calls get host copies of the offsets (no blocking read-back)\n"
            "  --varlen-seed S       seed of the random lengths (default 1); they depend on S and N only\n"
            "  --decode              the decode bench instead (KV caches, GB/s of K and V against the\n"
            "                        copy rate): flashcl bench --decode --help\n"
            "  --help                this text\n\n"
            "Times are wall-clock medians around clFinish, one clock for both implementations.\n"
            "The check compares the outputs (forward: O; forward+backward: dQ, dK, dV) of both\n"
            "on the same random inputs (uniform in [-1, 1]) and passes when\n"
            "max|flash - standard| <= tol * max(1, max|standard|), tol = 1e-4 (f32), 4e-3 (f16),\n"
            "3e-2 (bf16). It is skipped where the standard implementation did not run.\n"
            "Exit status: 0 all measurements ran and the check passed (standard out of device\n"
            "memory, or unsupported: it is float32 only, is a row marked so, not a failure),\n"
            "1 otherwise, 2 bad options.\n");
}

int bench_batch_for(const bench_options *options, int seqlen) {
    if (options->batch > 0) return options->batch;
    const int batch = PROTOCOL_TOKENS / seqlen;
    return batch > 0 ? batch : 1;
}

int bench_heads_for(const bench_options *options) {
    if (options->heads > 0) return options->heads;
    const int heads = PROTOCOL_HIDDEN / options->head_dim;
    return heads > 0 ? heads : 1;
}

/* Whole-string integer in [min, max]. */
static int parse_long(const char *text, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    const long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min || value > max) return -1;
    *out = value;
    return 0;
}

static int parse_int(const char *text, int min, int max, int *out) {
    long value;
    if (parse_long(text, min, max, &value)) return -1;
    *out = (int)value;
    return 0;
}

/* "1048576", "512K", "64M", "2G" (binary multiples). */
static int parse_bytes(const char *text, size_t *out) {
    char *end = NULL;
    errno = 0;
    if (text[0] == '-') return -1;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return -1;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        if (end[1] != '\0' && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0) return -1;
    }
    if (shift && value > (~0ull >> shift)) return -1;
    value <<= shift;
    if (value > (unsigned long long)SIZE_MAX) return -1;
    *out = (size_t)value;
    return 0;
}

/* "LO,HI": two fractions of N with 0 < LO <= HI <= 1. */
static int parse_varlen(const char *text, bench_options *o) {
    char *end = NULL;
    const double lo = strtod(text, &end);
    if (end == text || *end != ',') return -1;
    const char *second = end + 1;
    const double hi = strtod(second, &end);
    if (end == second || *end != '\0' || !(lo > 0.0 && lo <= hi && hi <= 1.0)) return -1;
    o->varlen = 1;
    o->varlen_lo = lo;
    o->varlen_hi = hi;
    return 0;
}

static int parse_seed(const char *text, unsigned long long *out) {
    char *end = NULL;
    errno = 0;
    if (text[0] == '-' || text[0] == '+') return -1;
    const unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return -1;
    *out = value;
    return 0;
}

/* "512,1024,...": each element a positive integer. */
static int parse_seqlens(const char *text, bench_options *o) {
    o->seqlen_count = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t length = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (length == 0 || length >= sizeof item || o->seqlen_count == BENCH_MAX_SEQLENS) return -1;
        memcpy(item, p, length);
        item[length] = '\0';
        if (parse_int(item, 1, 1 << 24, &o->seqlens[o->seqlen_count])) return -1;
        o->seqlen_count++;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int parse_impls(const char *text, bench_options *o) {
    o->run_impl[0] = o->run_impl[1] = 0;
    o->impl_count = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t length = comma ? (size_t)(comma - p) : strlen(p);
        flashcl_impl impl;
        if (length == 5 && strncmp(p, "flash", 5) == 0)
            impl = FLASHCL_IMPL_FLASH;
        else if (length == 8 && strncmp(p, "standard", 8) == 0)
            impl = FLASHCL_IMPL_STANDARD;
        else
            return -1;
        if (o->run_impl[impl]) return -1;
        o->run_impl[impl] = 1;
        o->impl_order[o->impl_count++] = impl;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int parse_plan(const char *text, flashcl_plan *plan) {
    int values[4];
    int n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t length = comma ? (size_t)(comma - p) : strlen(p);
        char item[16];
        if (n == 4 || length == 0 || length >= sizeof item) return -1;
        memcpy(item, p, length);
        item[length] = '\0';
        if (parse_int(item, 1, 1 << 16, &values[n++])) return -1;
        if (!comma) break;
        p = comma + 1;
    }
    if (n != 4) return -1;
    memset(plan, 0, sizeof *plan);
    plan->block_q = values[0];
    plan->block_k = values[1];
    plan->threads_q = values[2];
    plan->threads_k = values[3];
    return 0;
}

static void set_defaults(bench_options *o) {
    memset(o, 0, sizeof *o);
    o->seqlen_count = (int)(sizeof PROTOCOL_SEQLENS / sizeof PROTOCOL_SEQLENS[0]);
    memcpy(o->seqlens, PROTOCOL_SEQLENS, sizeof PROTOCOL_SEQLENS);
    o->head_dim = 64;
    o->dtype = FLASHCL_DTYPE_F32;
    o->run_impl[FLASHCL_IMPL_FLASH] = 1;
    o->impl_order[0] = FLASHCL_IMPL_FLASH;
    o->impl_count = 1;
    /* The baseline only where the library has it (flashcl_version.h). */
    if (FLASHCL_HAS_STANDARD) {
        o->run_impl[FLASHCL_IMPL_STANDARD] = 1;
        o->impl_order[o->impl_count++] = FLASHCL_IMPL_STANDARD;
    }
    o->repeat = 10;
    o->warmup = 2;
    o->check = 1;
    o->block_density = 1.0;
    o->block_size = 128;
    o->varlen_seed = 1;
}

/* The value of an option given as "--name X" or "--name=X"; NULL if missing. */
static const char *option_value(int argc, char **argv, int *i, const char *equals) {
    if (equals) return equals + 1;
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

bench_parse_result bench_parse_options(int argc, char **argv, bench_options *o, FILE *err) {
    set_defaults(o);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return BENCH_PARSE_HELP;
        const char *equals = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        const size_t name_length = equals ? (size_t)(equals - arg) : strlen(arg);
        char name[32];
        if (name_length >= sizeof name) {
            fprintf(err, "flashcl bench: unknown option '%s'\n", arg);
            return BENCH_PARSE_ERROR;
        }
        memcpy(name, arg, name_length);
        name[name_length] = '\0';

        /* Flags take no value. */
        int *flag = strcmp(name, "--causal") == 0     ? &o->causal
                    : strcmp(name, "--backward") == 0 ? &o->backward
                                                      : NULL;
        if (flag || strcmp(name, "--no-check") == 0) {
            if (equals) {
                fprintf(err, "flashcl bench: %s takes no value\n", name);
                return BENCH_PARSE_ERROR;
            }
            if (flag)
                *flag = 1;
            else
                o->check = 0;
            continue;
        }

        static const char *const valued[] = {"--seqlens", "--head-dim", "--batch", "--heads", "--dtype",
                                             "--impl", "--repeat", "--warmup", "--device", "--json",
                                             "--csv", "--plot", "--plan", "--tensor-cores", "--f32-precision",
                                             "--memory-budget", "--dropout", "--softcap", "--alibi-max-bias", "--bias",
                                             "--block-density", "--block-size", "--varlen", "--varlen-seed"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; ++k) known |= strcmp(name, valued[k]) == 0;
        if (!known) {
            fprintf(err, "flashcl bench: unknown option '%s'\n", arg);
            return BENCH_PARSE_ERROR;
        }
        const char *value = option_value(argc, argv, &i, equals);
        if (!value || !*value) {
            fprintf(err, "flashcl bench: %s needs a value\n", name);
            return BENCH_PARSE_ERROR;
        }
        int bad = 0;
        if (strcmp(name, "--seqlens") == 0) bad = parse_seqlens(value, o);
        else if (strcmp(name, "--head-dim") == 0) bad = parse_int(value, 1, FLASHCL_MAX_HEAD_DIM, &o->head_dim);
        else if (strcmp(name, "--batch") == 0) bad = parse_int(value, 1, 1 << 20, &o->batch);
        else if (strcmp(name, "--heads") == 0) bad = parse_int(value, 1, 1 << 16, &o->heads);
        else if (strcmp(name, "--repeat") == 0) bad = parse_int(value, 1, 100000, &o->repeat);
        else if (strcmp(name, "--warmup") == 0) bad = parse_int(value, 0, 100000, &o->warmup);
        else if (strcmp(name, "--impl") == 0) bad = parse_impls(value, o);
        else if (strcmp(name, "--plan") == 0) bad = parse_plan(value, &o->plan), o->plan_forced = 1;
        else if (strcmp(name, "--tensor-cores") == 0) {
            if (strcmp(value, "auto") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
            else if (strcmp(value, "off") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_OFF;
            else if (strcmp(value, "emulate") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
            else bad = 1;
        }
        else if (strcmp(name, "--f32-precision") == 0) {
            if (strcmp(value, "full") == 0) o->f32_precision = FLASHCL_F32_FULL;
            else if (strcmp(value, "3xtf32") == 0) o->f32_precision = FLASHCL_F32_3XTF32;
            else bad = 1;
        }
        else if (strcmp(name, "--memory-budget") == 0) bad = parse_bytes(value, &o->memory_budget);
        else if (strcmp(name, "--block-size") == 0) bad = parse_int(value, 1, 1 << 20, &o->block_size);
        else if (strcmp(name, "--varlen") == 0) {
            if (parse_varlen(value, o)) {
                fprintf(err, "flashcl bench: --varlen needs LO,HI, fractions of N with 0 < LO <= HI <= 1, "
                             "not '%s'\n", value);
                return BENCH_PARSE_ERROR;
            }
        }
        else if (strcmp(name, "--varlen-seed") == 0) bad = parse_seed(value, &o->varlen_seed), o->varlen_seed_given = 1;
        else if (strcmp(name, "--dropout") == 0 || strcmp(name, "--block-density") == 0) {
            char *end = NULL;
            const double x = strtod(value, &end);
            const int is_dropout = strcmp(name, "--dropout") == 0;
            /* The library takes dropout as a float: a value below 1 that rounds to 1.0f would be refused there. */
            bad = !end || *end != '\0' ||
                  !(is_dropout ? (x >= 0.0 && (float)x < 1.0f) : (x > 0.0 && x <= 1.0));
            if (is_dropout) o->dropout = x;
            else o->block_density = x;
        }
        else if (strcmp(name, "--softcap") == 0 || strcmp(name, "--alibi-max-bias") == 0) {
            char *end = NULL;
            const double x = strtod(value, &end);
            /* Positive and finite in float, as the library takes them. */
            bad = !end || *end != '\0' || !(x > 0.0 && isfinite((float)x));
            if (strcmp(name, "--softcap") == 0) o->softcap = x;
            else o->alibi_max_bias = x;
        }
        else if (strcmp(name, "--bias") == 0) {
            if (strcmp(value, "shared") == 0) o->bias = BENCH_BIAS_SHARED;
            else if (strcmp(value, "full") == 0) o->bias = BENCH_BIAS_FULL;
            else bad = 1;
        }
        else if (strcmp(name, "--device") == 0) o->device = value;
        else if (strcmp(name, "--json") == 0) o->json_path = value;
        else if (strcmp(name, "--csv") == 0) o->csv_path = value;
        else if (strcmp(name, "--plot") == 0) o->plot_path = value;
        else if (strcmp(name, "--dtype") == 0) bad = cli_dtype_parse(value, &o->dtype) != 0;
        if (bad) {
            fprintf(err, "flashcl bench: bad value '%s' for %s\n", value, name);
            return BENCH_PARSE_ERROR;
        }
    }
    if (!FLASHCL_HAS_STANDARD) {
        if (o->run_impl[FLASHCL_IMPL_STANDARD]) {
            fprintf(err, "flashcl bench: --impl standard: standard attention is unavailable in this build "
                         "(flashcl was built with FLASHCL_WITH_CLBLAST=OFF)\n");
            return BENCH_PARSE_ERROR;
        }
        fprintf(err, "flashcl bench: note: standard attention is unavailable in this build "
                     "(FLASHCL_WITH_CLBLAST=OFF): timing flash only\n");
    }
    if ((o->dropout > 0.0 || o->block_density < 1.0 || o->softcap > 0.0 || o->alibi_max_bias > 0.0 || o->bias) &&
        o->run_impl[FLASHCL_IMPL_STANDARD]) {
        fprintf(err, "flashcl bench: --dropout, --block-density, --softcap, --alibi-max-bias and --bias need --impl "
                     "flash (the standard implementation has none of them)\n");
        return BENCH_PARSE_ERROR;
    }
    if (o->varlen_seed_given && !o->varlen) {
        fprintf(err, "flashcl bench: --varlen-seed needs --varlen LO,HI\n");
        return BENCH_PARSE_ERROR;
    }
    if (o->varlen && o->bias) {
        fprintf(err, "flashcl bench: --bias with --varlen: the library refuses a bias with a packed batch\n");
        return BENCH_PARSE_ERROR;
    }
    if (o->varlen && !o->run_impl[FLASHCL_IMPL_FLASH]) {
        fprintf(err, "flashcl bench: --varlen times the flash implementation: --impl must include flash\n");
        return BENCH_PARSE_ERROR;
    }
    return BENCH_PARSE_OK;
}

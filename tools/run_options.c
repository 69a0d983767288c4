/* run_options.c: parsing and help text of `flashcl run`. */
#include "run_options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "dtype_option.h"

void run_print_help(FILE *out) {
    fprintf(out,
            "usage: flashcl run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
            "       flashcl run --q Q.npy --k-cache K.npy --v-cache V.npy --cache-seqlens L.npy --out O.npy\n"
            "                   [--block-table T.npy [--page-size N]] [--k-new Kn.npy --v-new Vn.npy\n"
            "                   [--k-cache-out K2.npy --v-cache-out V2.npy]] [options]   (KV cache, below)\n\n"
            "Runs exact attention O = softmax(scale * Q K^T + mask) V on an OpenCL device.\n"
            "Inputs are .npy files (C order, little-endian, versions 1.0-3.0):\n"
            "  --layout bhsd   Q (B,Hq,Sq,D), K and V (B,Hkv,Sk,D)   [default]\n"
            "  --layout bshd   Q (B,Sq,Hq,D), K and V (B,Sk,Hkv,D)\n"
            "Hq must be a multiple of Hkv (grouped-query attention). Element types come\n"
            "from the files: '<f4' float32, '<f2' float16. bfloat16 has no NumPy dtype:\n"
            "store its raw bits as '<u2' (e.g. x.view(torch.uint16)) and pass --dtype bf16.\n"
            "O is written shaped and typed like Q; LSE (B,Hq,Sq) is float32.\n\n"
            "options:\n"
            "  --q, --k, --v FILE      inputs (required)\n"
            "  --out FILE              output O (required)\n"
            "  --lse FILE              also write the log-sum-exp (natural log, -inf for masked rows)\n"
            "  --causal                causal mask, bottom-right aligned (key j visible to query i\n"
            "                          when j <= i + Sk - Sq)\n"
            "  --scale S               softmax scale (default 1/sqrt(D))\n"
            "  --dtype f32|f16|bf16    the element type the files hold; needed for bf16 ('<u2')\n"
            "  --device SPEC           device index from `flashcl devices`, or a platform/device\n"
            "                          name substring (default: FLASHCL_DEVICE, else first GPU)\n"
            "  --impl flash|standard   fused FlashAttention kernels (default) or standard attention\n"
            "  --tensor-cores auto|off|emulate\n"
            "                          f16/bf16 forward and backward on the tensor-core kernels: where\n"
            "                          the device has matrix units (auto, default: NVIDIA compute\n"
            "                          capability >= 8.0), never (off), or with their matrix instructions\n"
            "                          emulated on any device (emulate: slow, for tests). Calls with\n"
            "                          head_dim not a multiple of 16 or above 128, a window, block mask,\n"
            "                          dropout, varlen or --plan (--backward-plan for the backward) run\n"
            "                          the portable kernels; the 'forward:' and 'backward:' lines say\n"
            "                          which kernel ran\n"
            "  --f32-precision full|3xtf32\n"
            "                          f32 in float throughout (full, default), or on the tensor-core\n"
            "                          kernels in 3xTF32 (operands of ~23 bits; with emulate on any\n"
            "                          device; see flashcl_context_set_f32_precision)\n"
            "  --plan BQ,BK,TQ,TK      force the forward tile plan (block_q, block_k, threads_q, threads_k)\n"
            "  --backward-plan BQ,BK,TQ,TK   force the backward tile plan\n"
            "  --kernel-dir DIR        load the .cl kernel sources from DIR instead of the built-in ones\n"
            "  --check                 compare with a CPU double-precision reference; exit 1 (and\n"
            "                          write no output) if the error exceeds the tolerance\n"
            "  --tolerance T           tolerance for --check instead of the defaults below\n"
            "  --window L,R            sliding window, aligned like --causal: query i (at key position\n"
            "                          p = i + Sk - Sq) sees keys p-L..p+R; -1 leaves a side unbounded\n"
            "  --block-mask FILE       block-sparse mask, uint8 ('|u1'), 1 = computed: shape\n"
            "                          (ceil(Sq/N), ceil(Sk/N)) for all heads or (Hq, ceil(Sq/N), ceil(Sk/N))\n"
            "  --block-size N          rows and columns per block-mask entry (required with --block-mask)\n"
            "  --dropout P             dropout probability in [0, 1) on the normalised probabilities\n"
            "  --seed S                dropout seed (Philox4x32-10 key; default 0)\n"
            "  --dropout-mask FILE     also write the keep mask, uint8 (B, Hq, Sq, Sk), 1 = kept\n"
            "  --softcap C             logit soft-capping: each scaled score s becomes C * tanh(s / C)\n"
            "                          (C > 0; flash-attn's softcap, llama.cpp's logit_softcap)\n"
            "  --alibi-slopes FILE     ALiBi: float32 ('<f4') slopes (Hq,) or (B, Hq); the score of query\n"
            "                          i (key position p = i + Sk - Sq) and key j loses slope * |p - j|\n"
            "  --alibi-max-bias X      ALiBi with llama.cpp's slopes from max_bias X > 0 (head h of n,\n"
            "                          n' the largest power of 2 <= n: 2^(-X (h+1) / n') for h < n',\n"
            "                          else 2^(-X (2 (h-n') + 1) / (2 n'))); not with --alibi-slopes\n"
            "                          (order: scale, soft-capping, ALiBi and --bias, then the masks;\n"
            "                          --check applies the same in the reference)\n"
            "  --bias FILE             additive bias (B|1, Hq|1, Sq, Sk), C order whatever --layout,\n"
            "                          float32 ('<f4') or the inputs' type; a dimension of 1 is\n"
            "                          broadcast; -inf hides a pair (a row with no finite key is empty:\n"
            "                          O 0, LSE -inf). Not with --cu-seqlens-q/-k; with --k-cache,\n"
            "                          Sk is the cache's key positions (below)\n"
            "  --cu-seqlens-q FILE, --cu-seqlens-k FILE\n"
            "                          packed variable-length batch: int32 ('<i4') cumulative offsets\n"
            "                          (B+1 entries from 0, non-decreasing), both together; Q, dO are\n"
            "                          then (total_q,Hq,D), K, V (total_k,Hkv,D) (--layout does not\n"
            "                          apply), LSE is written (Hq,total_q); causal, window and dropout\n"
            "                          apply per sequence; --block-mask is then in each sequence's own\n"
            "                          coordinates, shaped by the longest lengths and shared by all\n"
            "                          sequences; --check runs each sequence alone in the reference\n"
            "                          (with the mask cropped to its lengths). Not with --dropout-mask\n"
            "(window, causal and block mask combine by intersection; the standard implementation\n"
            "has none of window, block mask, dropout, variable-length batches, the score\n"
            "modifiers or --bias; --softcap, ALiBi and --bias run on the portable, tensor-core\n"
            "and decode kernels)\n"
            "backward (all four together; runs the forward, then the backward pass):\n"
            "  --dout FILE             dO, shaped and typed like Q\n"
            "  --dq, --dk, --dv FILE   gradients to write, shaped and typed like Q, K, V\n"
            "  --dbias FILE            also write dBias (needs --bias): shaped and typed like the bias,\n"
            "                          summed over its broadcast dimensions (dS before soft-capping)\n"
            "KV cache (instead of --k/--v; one flashcl_forward_kv_cache call, on the decode kernel):\n"
            "  --k-cache, --v-cache FILE\n"
            "                          the caches, typed like Q: contiguous (B,S_max,Hkv,D), or with\n"
            "                          --block-table paged (pages,page_size,Hkv,D)\n"
            "  --cache-seqlens FILE    int32 ('<i4') (B,): the rows already in each sequence's cache\n"
            "  --block-table FILE      int32 ('<i4') (B,max_pages): rows j*page_size.. of sequence b\n"
            "                          are in page T[b][j]; only the entries its rows reach are read\n"
            "  --page-size N           rows per page: optional, must match the cache files' 2nd dim\n"
            "  --k-new, --v-new FILE   new rows (B,Sq,Hkv,D), typed like Q: written into the cache at\n"
            "                          rows cache_seqlens[b].. first, then attended (sequence b sees\n"
            "                          cache_seqlens[b] + Sq rows). Without --k-cache-out/--v-cache-out\n"
            "                          the appended cache is not saved (the cache files never change\n"
            "                          unless an output names them); O and LSE are the same either way\n"
            "  --k-cache-out, --v-cache-out FILE\n"
            "                          write the caches with the new rows in place (needs --k-new and\n"
            "                          --v-new); each may name its own input (--k-cache-out K.npy with\n"
            "                          --k-cache K.npy) to update it in place: written to a temporary\n"
            "                          file and renamed after success, so a failure leaves it intact\n"
            "Q and O are (B,Sq,Hq,D): Q's rows are the last Sq positions of their sequence, --causal\n"
            "and --window aligned bottom-right on each sequence's length; LSE is (B,Hq,Sq). --layout\n"
            "defaults to bshd here; --layout bhsd reads Q, O, --k-new and --v-new as (B,H,Sq,D) (the\n"
            "caches keep their layout). A cache run also takes --lse, --scale, --dtype, --device,\n"
            "--kernel-dir, --check, --tolerance, --softcap, --alibi-slopes ((B, Hq): per sequence),\n"
            "--alibi-max-bias and --bias ((B|1, Hq|1, Sq, S) over the cache's key positions: S is\n"
            "S_max of a contiguous cache, max_pages x page_size of a paged one; column j of sequence\n"
            "b is its key position j, those at or past its length never read), and refuses the\n"
            "rest (exit 2): the backward options (--dbias included), --cu-seqlens-q/-k, --block-mask,\n"
            "--dropout, --seed, --impl standard, --plan, --tensor-cores, --f32-precision. Shapes that\n"
            "do not fit (Hq not a multiple of Hkv, a length count other than B, new rows not\n"
            "(B,Sq,Hkv,D), a bias not (B|1,Hq|1,Sq,S)), lengths plus new rows past the cache and page\n"
            "indices outside the pool are refused naming the file (exit 1).\n"
            "--check runs each sequence alone through the reference, over exactly the rows it attends\n"
            "to (cache rows 0..cache_seqlens[b]-1 from the input files, then its new rows; with\n"
            "--bias, its plane's columns 0..len-1 of those), and with new rows also compares the\n"
            "caches after the call with the input caches with the new rows in place, bit for bit.\n\n"
            "--check reports, for O, LSE and the gradients, the max absolute error and the max\n"
            "relative error, max abs error / max(max |reference|, floor). An output passes when\n"
            "that is at most the tolerance and the NaN and infinities agree: NaN against NaN\n"
            "and an infinity against the same infinity agree, one side non-finite or opposite\n"
            "infinities do not. The floor keeps an output that is ~0 by cancellation (dQ, dK\n"
            "when all rows of V are equal) from failing on float rounding: it is the typical\n"
            "size of the terms the output sums, from the root mean square (rms) of the inputs'\n"
            "finite elements: O rms(V); LSE 1; dV rms(dO); dQ scale*sqrt(D)*rms(dO)*rms(V)*rms(K);\n"
            "dK the same with rms(Q). Default tolerances:\n"
            "  O:            float32 3e-5, float16 1e-3, bfloat16 8e-3 (output rounding: 2^-11, 2^-8)\n"
            "  LSE:          3e-5 for every dtype (float output, float arithmetic)\n"
            "  dQ, dK, dV:   float32 1e-4, float16 2e-3, bfloat16 1.6e-2\n"
            "Outputs are poisoned with NaN before the call, so an element the kernel does not\n"
            "write fails the check wherever the reference is finite. An output holding NaN or\n"
            "infinities gets a note on stderr (LSE is -inf for a row that sees no key).\n\n"
            "Files: an output that is the same file as an input or as another output (also\n"
            "through a link) is refused before anything runs (exit 2; --k-cache-out and\n"
            "--v-cache-out may name their own input cache only), as is an output whose\n"
            "directory does not exist or cannot be written (exit 1). Outputs are written only\n"
            "when the whole run succeeded, --check included: each to a temporary file beside\n"
            "it, renamed into place once all are complete; a failed run changes no file.\n\n"
            "exit status: 0 success (every output written), 1 bad input or output file / library\n"
            "error / failed check (no output written), 2 bad options\n");
}

static int usage_error(const char *format, const char *detail) {
    fprintf(stderr, "flashcl run: ");
    fprintf(stderr, format, detail);
    fprintf(stderr, "\n(`flashcl run --help` lists the options)\n");
    return RUN_PARSE_ERROR;
}

/* Options that take a file path, and where each one goes. */
typedef struct path_option {
    const char *name;
    size_t offset;
} path_option;

#define PATH_OPTION(flag, field) {flag, offsetof(run_options, field)}
static const path_option PATH_OPTIONS[] = {
    PATH_OPTION("--q", q_path),       PATH_OPTION("--k", k_path),       PATH_OPTION("--v", v_path),
    PATH_OPTION("--out", out_path),   PATH_OPTION("--lse", lse_path),   PATH_OPTION("--dout", dout_path),
    PATH_OPTION("--dq", dq_path),     PATH_OPTION("--dk", dk_path),     PATH_OPTION("--dv", dv_path),
    PATH_OPTION("--device", device),  PATH_OPTION("--kernel-dir", kernel_dir),
    PATH_OPTION("--block-mask", block_mask_path), PATH_OPTION("--dropout-mask", dropout_mask_path),
    PATH_OPTION("--cu-seqlens-q", cu_seqlens_q_path), PATH_OPTION("--cu-seqlens-k", cu_seqlens_k_path),
    PATH_OPTION("--k-cache", k_cache_path), PATH_OPTION("--v-cache", v_cache_path),
    PATH_OPTION("--cache-seqlens", cache_seqlens_path), PATH_OPTION("--block-table", block_table_path),
    PATH_OPTION("--k-new", k_new_path), PATH_OPTION("--v-new", v_new_path),
    PATH_OPTION("--k-cache-out", k_cache_out_path), PATH_OPTION("--v-cache-out", v_cache_out_path),
    PATH_OPTION("--alibi-slopes", alibi_slopes_path),
    PATH_OPTION("--bias", bias_path), PATH_OPTION("--dbias", dbias_path),
};

/* Options a cache run refuses, and why: flashcl_forward_kv_cache is one
 * forward call on the decode kernel, so each of these would be ignored or
 * refused by the library; a usage error says so before anything runs.
 * (--impl is refused only as "standard", in parse_value_option.) */
static const struct {
    const char *name, *reason;
} NOT_WITH_CACHE[] = {
    {"--k", "the keys and values are the cache's (--k-new/--v-new append rows to it)"},
    {"--v", "the keys and values are the cache's (--k-new/--v-new append rows to it)"},
    {"--dout", "a cache run is a forward pass only"},
    {"--dq", "a cache run is a forward pass only"},
    {"--dk", "a cache run is a forward pass only"},
    {"--dv", "a cache run is a forward pass only"},
    {"--dbias", "a cache run is a forward pass only"},
    {"--backward-plan", "a cache run is a forward pass only"},
    {"--cu-seqlens-q", "each sequence's keys are its cache rows (--cache-seqlens), not a packed batch"},
    {"--cu-seqlens-k", "each sequence's keys are its cache rows (--cache-seqlens), not a packed batch"},
    {"--block-mask", "the cache call has no block mask"},
    {"--block-size", "the cache call has no block mask"},
    {"--dropout", "the cache call has no dropout (inference only)"},
    {"--seed", "the cache call has no dropout (inference only)"},
    {"--dropout-mask", "the cache call has no dropout (inference only)"},
    {"--plan", "the cache call always runs the decode kernel, whose tiles the library chooses"},
    {"--tensor-cores", "the cache call always runs the decode kernel (no tensor-core version)"},
    {"--f32-precision", "the cache call always runs the decode kernel (float arithmetic)"},
};

/* Records the first option given that a cache run would refuse. */
static void note_not_with_cache(run_options *o, const char *name) {
    for (size_t i = 0; !o->not_with_cache && i < sizeof NOT_WITH_CACHE / sizeof NOT_WITH_CACHE[0]; ++i)
        if (strcmp(name, NOT_WITH_CACHE[i].name) == 0) {
            o->not_with_cache = NOT_WITH_CACHE[i].name;
            o->not_with_cache_reason = NOT_WITH_CACHE[i].reason;
        }
}

static int parse_value_option(const char *name, const char *value, run_options *o) {
    /* --scale and --dropout reach the library as floats: a value that is
     * fine as a double but becomes 0 or infinity (scale) or 1 (dropout) in
     * float would change meaning (scale 0 selects the default) or be
     * refused by the library as exit 1 instead of a usage error. */
    if (strcmp(name, "--scale") == 0) {
        if (cli_parse_double(value, &o->scale) != 0 || o->scale <= 0.0)
            return usage_error("--scale needs a finite positive number, not '%s'", value);
        const float as_float = (float)o->scale;
        if (!(as_float > 0.0f) || isinf(as_float))
            return usage_error("--scale needs a number that is finite and positive in float32, not '%s'", value);
    } else if (strcmp(name, "--tolerance") == 0) {
        if (cli_parse_double(value, &o->tolerance) != 0 || o->tolerance <= 0.0)
            return usage_error("--tolerance needs a finite positive number, not '%s'", value);
    } else if (strcmp(name, "--layout") == 0) {
        o->layout_given = 1;
        if (strcmp(value, "bhsd") == 0)
            o->layout = FLASHCL_LAYOUT_BHSD;
        else if (strcmp(value, "bshd") == 0)
            o->layout = FLASHCL_LAYOUT_BSHD;
        else
            return usage_error("--layout must be bhsd or bshd, not '%s'", value);
    } else if (strcmp(name, "--impl") == 0) {
        if (strcmp(value, "flash") == 0)
            o->impl = FLASHCL_IMPL_FLASH;
        else if (strcmp(value, "standard") == 0 && !FLASHCL_HAS_STANDARD)
            return usage_error("--impl %s: standard attention is unavailable in this build (flashcl was built "
                               "with FLASHCL_WITH_CLBLAST=OFF)", value);
        else if (strcmp(value, "standard") == 0) {
            o->impl = FLASHCL_IMPL_STANDARD;
            if (!o->not_with_cache) {
                o->not_with_cache = "--impl standard";
                o->not_with_cache_reason = "the cache call runs the flash decode kernel only";
            }
        }
        else
            return usage_error("--impl must be flash or standard, not '%s'", value);
    } else if (strcmp(name, "--tensor-cores") == 0) {
        if (strcmp(value, "auto") == 0)
            o->tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
        else if (strcmp(value, "off") == 0)
            o->tensor_cores = FLASHCL_TENSOR_CORES_OFF;
        else if (strcmp(value, "emulate") == 0)
            o->tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
        else
            return usage_error("--tensor-cores must be auto, off or emulate, not '%s'", value);
    } else if (strcmp(name, "--f32-precision") == 0) {
        if (strcmp(value, "full") == 0)
            o->f32_precision = FLASHCL_F32_FULL;
        else if (strcmp(value, "3xtf32") == 0)
            o->f32_precision = FLASHCL_F32_3XTF32;
        else
            return usage_error("--f32-precision must be full or 3xtf32, not '%s'", value);
    } else if (strcmp(name, "--dtype") == 0) {
        o->dtype_given = 1;
        if (cli_dtype_parse(value, &o->dtype) != 0)
            return usage_error("--dtype must be f32, f16 or bf16, not '%s'", value);
    } else if (strcmp(name, "--plan") == 0) {
        if (cli_parse_plan(value, &o->forward_plan) != 0)
            return usage_error("--plan needs four positive integers BQ,BK,TQ,TK, not '%s'", value);
        o->forward_plan_given = 1;
    } else if (strcmp(name, "--backward-plan") == 0) {
        if (cli_parse_plan(value, &o->backward_plan) != 0)
            return usage_error("--backward-plan needs four positive integers BQ,BK,TQ,TK, not '%s'", value);
        o->backward_plan_given = 1;
    } else if (strcmp(name, "--window") == 0) {
        char left[32], right[32];
        const char *comma = strchr(value, ',');
        const size_t n = comma ? (size_t)(comma - value) : 0;
        if (!comma || n == 0 || n >= sizeof left || strlen(comma + 1) >= sizeof right)
            return usage_error("--window needs L,R (integers >= 0, or -1 for unbounded), not '%s'", value);
        memcpy(left, value, n);
        left[n] = '\0';
        strcpy(right, comma + 1);
        if (cli_parse_int(left, -1, 2147483647L, &o->window_left) != 0 ||
            cli_parse_int(right, -1, 2147483647L, &o->window_right) != 0)
            return usage_error("--window needs L,R (integers >= 0, or -1 for unbounded), not '%s'", value);
    } else if (strcmp(name, "--page-size") == 0) {
        if (cli_parse_int(value, 1, 2147483647L, &o->page_size) != 0)
            return usage_error("--page-size needs a positive integer, not '%s'", value);
    } else if (strcmp(name, "--block-size") == 0) {
        if (cli_parse_int(value, 1, 2147483647L, &o->block_size) != 0)
            return usage_error("--block-size needs a positive integer, not '%s'", value);
    } else if (strcmp(name, "--dropout") == 0) {
        if (cli_parse_double(value, &o->dropout) != 0 || !(o->dropout >= 0.0 && (float)o->dropout < 1.0f))
            return usage_error("--dropout needs a probability in [0, 1) (below 1 in float32), not '%s'", value);
    } else if (strcmp(name, "--softcap") == 0 || strcmp(name, "--alibi-max-bias") == 0) {
        /* Reach the library as floats: positive and finite there too (0 would mean "none"). */
        double *x = strcmp(name, "--softcap") == 0 ? &o->softcap : &o->alibi_max_bias;
        if (cli_parse_double(value, x) != 0 || !(*x > 0.0) || !((float)*x > 0.0f) || isinf((float)*x)) {
            fprintf(stderr, "flashcl run: %s needs a number that is finite and positive in float32, not '%s'\n",
                    name, value);
            fprintf(stderr, "(`flashcl run --help` lists the options)\n");
            return RUN_PARSE_ERROR;
        }
    } else if (strcmp(name, "--seed") == 0) {
        char *end = NULL;
        errno = 0;
        o->seed = strtoull(value, &end, 0);
        /* strtoull saturates at ULLONG_MAX with ERANGE: an overflowed seed
         * would silently be another one. */
        if (!isdigit((unsigned char)*value) || !end || *end || errno == ERANGE) /* not " -1", which wraps */
            return usage_error("--seed needs a non-negative integer below 2^64, not '%s'", value);
    }
    return RUN_PARSE_OK;
}

/* The first option of the KV-cache mode on the command line's fields, NULL if none. */
static const char *first_cache_option(const run_options *o) {
    const struct {
        const char *name;
        int given;
    } options[] = {{"--k-cache", o->k_cache_path != NULL},     {"--v-cache", o->v_cache_path != NULL},
                   {"--cache-seqlens", o->cache_seqlens_path != NULL}, {"--block-table", o->block_table_path != NULL},
                   {"--page-size", o->page_size != 0},         {"--k-new", o->k_new_path != NULL},
                   {"--v-new", o->v_new_path != NULL},         {"--k-cache-out", o->k_cache_out_path != NULL},
                   {"--v-cache-out", o->v_cache_out_path != NULL}};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; ++i)
        if (options[i].given) return options[i].name;
    return NULL;
}

/* The rules of a cache run's command line (see run_options). */
static run_parse_result check_cache_options(run_options *o, const char *cache_option) {
    if (!o->k_cache_path || !o->v_cache_path || !o->cache_seqlens_path)
        return usage_error("%s belongs to a KV-cache run, which needs --k-cache, --v-cache and --cache-seqlens",
                           cache_option);
    if (o->not_with_cache) {
        fprintf(stderr, "flashcl run: %s does not apply with --k-cache: %s\n", o->not_with_cache,
                o->not_with_cache_reason);
        fprintf(stderr, "(`flashcl run --help` lists what a KV-cache run takes)\n");
        return RUN_PARSE_ERROR;
    }
    if (!o->q_path || !o->out_path) return usage_error("%s", "--q and --out are required (with --k-cache)");
    if (o->page_size && !o->block_table_path)
        return usage_error("%s", "--page-size needs --block-table (it describes a paged cache)");
    if ((o->k_new_path != NULL) != (o->v_new_path != NULL))
        return usage_error("%s", "--k-new and --v-new go together");
    if ((o->k_cache_out_path != NULL) != (o->v_cache_out_path != NULL))
        return usage_error("%s", "--k-cache-out and --v-cache-out go together");
    if (o->k_cache_out_path && !o->k_new_path)
        return usage_error("%s", "--k-cache-out/--v-cache-out need --k-new/--v-new: without new rows the cache "
                                 "does not change");
    /* The caches are (.., rows, Hkv, D); Q and the new rows follow them unless --layout says otherwise. */
    if (!o->layout_given) o->layout = FLASHCL_LAYOUT_BSHD;
    return RUN_PARSE_OK;
}

run_parse_result run_parse_options(int argc, char **argv, run_options *o) {
    static const char *const VALUE_OPTIONS[] = {"--scale",  "--tolerance",  "--layout",     "--impl",
                                                "--dtype",  "--plan",       "--backward-plan", "--window",
                                                "--block-size", "--dropout", "--seed", "--tensor-cores",
                                                "--f32-precision", "--page-size", "--softcap",
                                                "--alibi-max-bias"};
    memset(o, 0, sizeof *o);
    o->window_left = o->window_right = -1;
    o->layout = FLASHCL_LAYOUT_BHSD;
    o->impl = FLASHCL_IMPL_FLASH;
    o->tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i], *value;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            run_print_help(stdout);
            return RUN_PARSE_HELP;
        }
        if (strcmp(arg, "--causal") == 0) {
            o->causal = 1;
            continue;
        }
        if (strcmp(arg, "--check") == 0) {
            o->check = 1;
            continue;
        }
        int matched = 0;
        for (size_t p = 0; !matched && p < sizeof PATH_OPTIONS / sizeof PATH_OPTIONS[0]; ++p) {
            matched = cli_option_value(argc, argv, &i, PATH_OPTIONS[p].name, &value);
            if (matched > 0) {
                if (!*value) return usage_error("%s needs a non-empty value", PATH_OPTIONS[p].name);
                *(const char **)((char *)o + PATH_OPTIONS[p].offset) = value;
                note_not_with_cache(o, PATH_OPTIONS[p].name);
            }
        }
        for (size_t p = 0; !matched && p < sizeof VALUE_OPTIONS / sizeof VALUE_OPTIONS[0]; ++p) {
            matched = cli_option_value(argc, argv, &i, VALUE_OPTIONS[p], &value);
            if (matched > 0 && parse_value_option(VALUE_OPTIONS[p], value, o) != RUN_PARSE_OK)
                return RUN_PARSE_ERROR;
            if (matched > 0) note_not_with_cache(o, VALUE_OPTIONS[p]);
        }
        if (matched < 0) return usage_error("%s", "an option is missing its value");
        if (!matched) return usage_error("unknown option or argument '%s'", arg);
    }
    if (o->alibi_slopes_path && o->alibi_max_bias > 0.0)
        return usage_error("%s", "--alibi-slopes and --alibi-max-bias are two sources of the same slopes: give one");
    const char *cache_option = first_cache_option(o);
    if (cache_option) return check_cache_options(o, cache_option);
    if (!o->q_path || !o->k_path || !o->v_path || !o->out_path)
        return usage_error("%s", "--q, --k, --v and --out are required");
    const int backward_paths = (o->dout_path != NULL) + (o->dq_path != NULL) + (o->dk_path != NULL) +
                               (o->dv_path != NULL);
    if (backward_paths != 0 && backward_paths != 4)
        return usage_error("%s", "--dout, --dq, --dk and --dv go together (all four or none)");
    if ((o->block_mask_path != NULL) != (o->block_size != 0))
        return usage_error("%s", "--block-mask and --block-size go together");
    if (o->dropout_mask_path && o->dropout <= 0.0)
        return usage_error("%s", "--dropout-mask needs --dropout P with P > 0");
    if ((o->cu_seqlens_q_path != NULL) != (o->cu_seqlens_k_path != NULL))
        return usage_error("%s", "--cu-seqlens-q and --cu-seqlens-k go together");
    /* The keep mask is written (B, Hq, Sq, Sk) over a dense batch; a packed one has no such shape. */
    if (o->cu_seqlens_q_path && o->dropout_mask_path)
        return usage_error("%s", "--cu-seqlens-q/-k do not combine with --dropout-mask");
    if (o->dbias_path && !o->bias_path) return usage_error("%s", "--dbias needs --bias");
    if (o->dbias_path && !o->dout_path)
        return usage_error("%s", "--dbias is a gradient: it needs the backward (--dout, --dq, --dk, --dv)");
    /* The library refuses these combinations (FLASHCL_ERROR_UNSUPPORTED); say so before anything runs. */
    if (o->bias_path && o->cu_seqlens_q_path)
        return usage_error("%s", "--bias does not combine with --cu-seqlens-q/-k yet");
    if (o->cu_seqlens_q_path) o->layout = FLASHCL_LAYOUT_BSHD; /* a packed file is one bshd batch of total rows */
    return RUN_PARSE_OK;
}

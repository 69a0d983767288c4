/* decode.c: a decode loop on a paged KV cache, on the application's own OpenCL context and queue.
 *
 * Two sequences with prompts of different lengths sit in a pool of 8-row pages (the block table interleaves
 * the sequences' pages). Each step brings one new token per sequence: its query row and its K and V rows; one
 * flashcl_forward_kv_cache call appends the K and V rows to the cache and attends to the whole sequence. The
 * application advances its lengths (on the host and, by a non-blocking write ordered by events, on the device).
 * After the last step the outputs of that step are checked against a double-precision computation of the
 * application's own over the host's copy of each sequence. Prints one line; exit status 0 when within
 * tolerance.
 *
 * Device: the first whose platform, vendor or device name contains $FLASHCL_DEVICE (e.g. "pocl",
 * "llvmpipe"), else the first GPU, else the first device.
 *
 * Build against an installed flashcl:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=PREFIX && cmake --build build-examples
 *   cc decode.c $(pkg-config --cflags --libs flashcl) -lm */
#define CL_TARGET_OPENCL_VERSION 120
#include <flashcl.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, HQ = 4, HKV = 2, D = 32, PAGE = 8, MAX_PAGES = 8, PAGES = B * MAX_PAGES, STEPS = 20 };
static const int PROMPT[B] = {5, 12};
#define TOLERANCE 1e-4 /* of max(max |ref|, 1); float32 gets ~1e-6 here */

/* The application's copy of every sequence's K and V rows, (B, MAX_PAGES * PAGE, HKV, D). */
static float k_rows[B][MAX_PAGES * PAGE][HKV][D], v_rows[B][MAX_PAGES * PAGE][HKV][D];

static float random_value(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Case-insensitive substring test (ASCII). */
static int contains(const char *text, const char *want) {
    for (; *text; ++text) {
        size_t i = 0;
        while (want[i] && text[i] && tolower((unsigned char)text[i]) == tolower((unsigned char)want[i])) ++i;
        if (!want[i]) return 1;
    }
    return 0;
}

/* Whether the device's or its platform's name or vendor contains want ("pocl" is in POCL's platform vendor). */
static int matches(cl_device_id device, cl_platform_id platform, const char *want) {
    char text[4][256] = {"", "", "", ""};
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof text[0] - 1, text[0], NULL);
    clGetDeviceInfo(device, CL_DEVICE_VENDOR, sizeof text[1] - 1, text[1], NULL);
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof text[2] - 1, text[2], NULL);
    clGetPlatformInfo(platform, CL_PLATFORM_VENDOR, sizeof text[3] - 1, text[3], NULL);
    for (int i = 0; i < 4; ++i)
        if (contains(text[i], want)) return 1;
    return 0;
}

/* The device $FLASHCL_DEVICE names, else the first GPU, else the first device. */
static cl_device_id pick_device(void) {
    cl_platform_id platforms[16];
    cl_uint count = 0;
    if (clGetPlatformIDs(16, platforms, &count) != CL_SUCCESS) return NULL;
    const char *want = getenv("FLASHCL_DEVICE");
    cl_device_id first = NULL, gpu = NULL;
    for (cl_uint p = 0; p < count && p < 16; ++p) {
        cl_device_id devices[16];
        cl_uint n = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &n) != CL_SUCCESS) continue;
        for (cl_uint i = 0; i < n && i < 16; ++i) {
            if (want && *want && matches(devices[i], platforms[p], want)) return devices[i];
            cl_device_type type = 0;
            clGetDeviceInfo(devices[i], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (!first) first = devices[i];
            if (!gpu && (type & CL_DEVICE_TYPE_GPU)) gpu = devices[i];
        }
    }
    return want && *want ? NULL : (gpu ? gpu : first);
}

/* Attention of one query row (head h of sequence b) over the sequence's `len` rows, in double. */
static void reference_row(const float *q, int b, int h, int len, double *out) {
    const int g = h / (HQ / HKV);
    double scores[MAX_PAGES * PAGE], max = -INFINITY, sum = 0.0;
    for (int j = 0; j < len; ++j) {
        double s = 0.0;
        for (int d = 0; d < D; ++d) s += (double)q[d] * k_rows[b][j][g][d];
        scores[j] = s / sqrt((double)D);
        if (scores[j] > max) max = scores[j];
    }
    for (int d = 0; d < D; ++d) out[d] = 0.0;
    for (int j = 0; j < len; ++j) {
        const double p = exp(scores[j] - max);
        sum += p;
        for (int d = 0; d < D; ++d) out[d] += p * v_rows[b][j][g][d];
    }
    for (int d = 0; d < D; ++d) out[d] /= sum;
}

int main(void) {
    cl_device_id device = pick_device();
    if (!device) {
        fprintf(stderr, "decode: no OpenCL device%s\n", getenv("FLASHCL_DEVICE") ? " matches $FLASHCL_DEVICE" : "");
        return 1;
    }
    cl_int err;
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_command_queue queue = err == CL_SUCCESS ? clCreateCommandQueue(context, device, 0, &err) : NULL;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "decode: OpenCL context or queue: error %d\n", err);
        return 1;
    }
    flashcl_context *fc;
    if (flashcl_context_create_from_queue(&fc, queue, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "decode: %s\n", flashcl_last_error(NULL));
        return 1;
    }

    /* The page pool (zeros), the block table (sequence b's j-th page is page 2j + b), the prompts. */
    int32_t table[B * MAX_PAGES], lens[B];
    for (int b = 0; b < B; ++b)
        for (int j = 0; j < MAX_PAGES; ++j) table[b * MAX_PAGES + j] = 2 * j + b;
    static float pool_k[PAGES][PAGE][HKV][D], pool_v[PAGES][PAGE][HKV][D];
    unsigned state = 7;
    for (int b = 0; b < B; ++b) {
        lens[b] = PROMPT[b];
        for (int j = 0; j < PROMPT[b]; ++j)
            for (int h = 0; h < HKV; ++h)
                for (int d = 0; d < D; ++d) {
                    k_rows[b][j][h][d] = random_value(&state);
                    v_rows[b][j][h][d] = random_value(&state);
                    const int page = table[b * MAX_PAGES + j / PAGE];
                    pool_k[page][j % PAGE][h][d] = k_rows[b][j][h][d];
                    pool_v[page][j % PAGE][h][d] = v_rows[b][j][h][d];
                }
    }
    const cl_mem_flags rw = CL_MEM_READ_WRITE, copy = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
    cl_mem k_pool = clCreateBuffer(context, copy, sizeof pool_k, pool_k, &err);
    cl_mem v_pool = clCreateBuffer(context, copy, sizeof pool_v, pool_v, &err);
    cl_mem table_buffer = clCreateBuffer(context, copy, sizeof table, table, &err);
    cl_mem lens_buffer = clCreateBuffer(context, copy, sizeof lens, lens, &err);
    cl_mem q = clCreateBuffer(context, rw, sizeof(float) * B * HQ * D, NULL, &err);
    cl_mem k_new = clCreateBuffer(context, rw, sizeof(float) * B * HKV * D, NULL, &err);
    cl_mem v_new = clCreateBuffer(context, rw, sizeof(float) * B * HKV * D, NULL, &err);
    cl_mem o = clCreateBuffer(context, rw, sizeof(float) * B * HQ * D, NULL, &err);

    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, HQ, 1, 1, D); /* one new row; seqlen_k is the cache's business */
    desc.heads_kv = HKV;
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, HQ, 1, D);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, HQ, 1, D);
    const flashcl_tensor tkn = flashcl_tensor_contiguous(k_new, FLASHCL_LAYOUT_BSHD, HKV, 1, D);
    const flashcl_tensor tvn = flashcl_tensor_contiguous(v_new, FLASHCL_LAYOUT_BSHD, HKV, 1, D);
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    cache.k = flashcl_tensor_contiguous(k_pool, FLASHCL_LAYOUT_BSHD, HKV, PAGE, D);
    cache.v = flashcl_tensor_contiguous(v_pool, FLASHCL_LAYOUT_BSHD, HKV, PAGE, D);
    cache.page_size = PAGE;
    cache.num_pages = PAGES;
    cache.block_table = table_buffer;
    cache.block_table_host = table;
    cache.max_pages = MAX_PAGES;
    cache.cache_seqlens = lens_buffer;
    cache.cache_seqlens_host = lens;
    cache.k_new = &tkn;
    cache.v_new = &tvn;

    static float q_host[B][HQ][D], kn_host[B][HKV][D], vn_host[B][HKV][D], o_host[B][HQ][D];
    for (int step = 0; step < STEPS; ++step) {
        for (int b = 0; b < B; ++b) {
            for (int h = 0; h < HQ; ++h)
                for (int d = 0; d < D; ++d) q_host[b][h][d] = random_value(&state);
            for (int h = 0; h < HKV; ++h)
                for (int d = 0; d < D; ++d) {
                    kn_host[b][h][d] = k_rows[b][lens[b]][h][d] = random_value(&state);
                    vn_host[b][h][d] = v_rows[b][lens[b]][h][d] = random_value(&state);
                }
        }
        /* Blocking writes: the host arrays are reused at once (a real engine would double-buffer). */
        clEnqueueWriteBuffer(queue, q, CL_TRUE, 0, sizeof q_host, q_host, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, k_new, CL_TRUE, 0, sizeof kn_host, kn_host, 0, NULL, NULL);
        clEnqueueWriteBuffer(queue, v_new, CL_TRUE, 0, sizeof vn_host, vn_host, 0, NULL, NULL);
        cl_event done;
        const flashcl_status status = flashcl_forward_kv_cache(fc, &desc, &tq, &cache, &to, NULL, 0, NULL, &done);
        if (status != FLASHCL_SUCCESS) {
            fprintf(stderr, "decode: step %d: %s: %s\n", step, flashcl_status_string(status), flashcl_last_error(fc));
            return 1;
        }
        /* The next step's lengths: the host copy now, the device's after this step's kernels have read it. */
        for (int b = 0; b < B; ++b) ++lens[b];
        clEnqueueWriteBuffer(queue, lens_buffer, CL_TRUE, 0, sizeof lens, lens, 1, &done, NULL);
        clReleaseEvent(done);
    }
    clEnqueueReadBuffer(queue, o, CL_TRUE, 0, sizeof o_host, o_host, 0, NULL, NULL);

    /* The last step's outputs against the application's own computation over each whole sequence. */
    double worst = 0.0, largest = 1.0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < HQ; ++h) {
            double ref[D];
            reference_row(q_host[b][h], b, h, lens[b], ref);
            for (int d = 0; d < D; ++d) {
                worst = fmax(worst, fabs(o_host[b][h][d] - ref[d]));
                largest = fmax(largest, fabs(ref[d]));
            }
        }
    const int ok = worst <= TOLERANCE * largest;
    printf("decode: %d steps on a paged cache (%d-row pages), sequences now %d and %d rows, max error %.2e: %s\n",
           STEPS, PAGE, lens[0], lens[1], worst, ok ? "ok" : "FAILED");
    cl_mem all[] = {k_pool, v_pool, table_buffer, lens_buffer, q, k_new, v_new, o};
    for (int i = 0; i < 8; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(fc);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    return ok ? 0 : 1;
}

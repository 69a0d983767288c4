/* embed.c: flashcl inside an application that owns its OpenCL objects.
 *
 * The application makes its own context, an out-of-order queue (where the
 * device has one) and its own buffers; flashcl wraps the queue
 * (flashcl_context_create_from_queue) and every step is ordered by events
 * alone: uploads -> forward -> backward -> downloads. The result is checked
 * against a small double-precision computation of its own. Prints one line;
 * exit status 0 when every output is within tolerance.
 *
 * Device: the first whose platform, vendor or device name contains $FLASHCL_DEVICE
 * (e.g. "pocl", "llvmpipe"), else the first GPU, else the first device.
 *
 * Build against an installed flashcl:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=PREFIX && cmake --build build-examples
 *   cc embed.c $(pkg-config --cflags --libs flashcl) -lm     (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig) */
#define CL_TARGET_OPENCL_VERSION 120
#include <flashcl.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One small problem: grouped-query (4 query heads on 2 K/V heads), more keys
 * than queries, causal (bottom-right aligned), (batch, seq, head, dim) layout. */
enum { B = 2, HQ = 4, HKV = 2, SQ = 24, SK = 40, D = 16 };
#define TOLERANCE 1e-4 /* of max(max |ref|, 1); float32 gets ~1e-6 here */

/* Element (b, s, h, d) of a contiguous (B, S, H, D) array. */
static size_t at(int s_len, int heads, int b, int s, int h, int d) {
    return (((size_t)b * s_len + s) * heads + h) * D + d;
}

/* ---- the application's own reference (double precision) --------------- */

typedef struct host {
    float q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D], dout[B * SQ * HQ * D];
    double o[B * SQ * HQ * D], lse[B * HQ * SQ];
    double dq[B * SQ * HQ * D], dk[B * SK * HKV * D], dv[B * SK * HKV * D];
} host;

static int visible(int i, int j) { return j <= i + SK - SQ; }

static void reference(host *x) {
    const double scale = 1.0 / sqrt((double)D);
    memset(x->dq, 0, sizeof x->dq), memset(x->dk, 0, sizeof x->dk), memset(x->dv, 0, sizeof x->dv);
    static double p[SK], dp[SK];
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < HQ; ++h) {
            const int g = h / (HQ / HKV); /* the K/V head of query head h */
            for (int i = 0; i < SQ; ++i) {
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j < SK; ++j) {
                    double s = 0.0;
                    for (int d = 0; d < D; ++d)
                        s += (double)x->q[at(SQ, HQ, b, i, h, d)] * x->k[at(SK, HKV, b, j, g, d)];
                    p[j] = visible(i, j) ? s * scale : -INFINITY;
                    if (p[j] > max) max = p[j];
                }
                for (int j = 0; j < SK; ++j) sum += p[j] = visible(i, j) ? exp(p[j] - max) : 0.0;
                x->lse[((size_t)b * HQ + h) * SQ + i] = max + log(sum);
                double delta = 0.0; /* rowsum(dO * O) */
                for (int d = 0; d < D; ++d) {
                    double o = 0.0;
                    for (int j = 0; j < SK; ++j) o += p[j] / sum * x->v[at(SK, HKV, b, j, g, d)];
                    x->o[at(SQ, HQ, b, i, h, d)] = o;
                    delta += o * x->dout[at(SQ, HQ, b, i, h, d)];
                }
                for (int j = 0; j < SK; ++j) {
                    p[j] /= sum;
                    dp[j] = 0.0;
                    for (int d = 0; d < D; ++d)
                        dp[j] += (double)x->dout[at(SQ, HQ, b, i, h, d)] * x->v[at(SK, HKV, b, j, g, d)];
                    const double ds = p[j] * (dp[j] - delta);
                    for (int d = 0; d < D; ++d) {
                        x->dv[at(SK, HKV, b, j, g, d)] += p[j] * x->dout[at(SQ, HQ, b, i, h, d)];
                        x->dq[at(SQ, HQ, b, i, h, d)] += scale * ds * x->k[at(SK, HKV, b, j, g, d)];
                        x->dk[at(SK, HKV, b, j, g, d)] += scale * ds * x->q[at(SQ, HQ, b, i, h, d)];
                    }
                }
            }
        }
}

/* max |got - ref| over max(max |ref|, 1); prints and returns 1 past TOLERANCE. */
static int compare(const char *name, const float *got, const double *ref, size_t n, double *worst) {
    double err = 0.0, size = 1.0;
    for (size_t i = 0; i < n; ++i) {
        if (fabs(ref[i]) > size) size = fabs(ref[i]);
        const double e = fabs((double)got[i] - ref[i]);
        if (!(e <= err)) err = e; /* NaN counts as the worst */
    }
    const double relative = err / size;
    if (!(relative <= *worst)) *worst = relative;
    if (relative <= TOLERANCE) return 0;
    fprintf(stderr, "embed: %s differs from the reference by %.3g (tolerance %.1g)\n", name, relative, TOLERANCE);
    return 1;
}

/* ---- the application's own OpenCL objects ------------------------------ */

/* Case-insensitive substring test (ASCII). */
static int contains(const char *haystack, const char *needle) {
    for (; *haystack; ++haystack) {
        size_t i = 0;
        while (needle[i] && haystack[i] && tolower((unsigned char)haystack[i]) == tolower((unsigned char)needle[i]))
            ++i;
        if (!needle[i]) return 1;
    }
    return 0;
}

/* The first device matching want (platform, vendor or device name), else the first GPU, else the first device. */
static int pick_device(const char *want, cl_platform_id *platform, cl_device_id *device) {
    cl_platform_id platforms[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS || np == 0) return -1;
    if (np > 16) np = 16;
    int found = 0; /* 0 none, 1 any device, 2 a GPU, 3 the wanted one */
    for (cl_uint p = 0; p < np && found < 3; ++p) {
        cl_device_id devices[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &nd) != CL_SUCCESS) continue;
        if (nd > 16) nd = 16;
        char pname[256] = "", vendor[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        clGetPlatformInfo(platforms[p], CL_PLATFORM_VENDOR, sizeof vendor - 1, vendor, NULL);
        for (cl_uint d = 0; d < nd && found < 3; ++d) {
            char dname[256] = "";
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            const int named = want && (contains(pname, want) || contains(vendor, want) || contains(dname, want));
            const int rank = named ? 3 : (type & CL_DEVICE_TYPE_GPU) ? 2 : 1;
            if (rank > found) found = rank, *platform = platforms[p], *device = devices[d];
        }
    }
    if (want && *want && found < 3) return -1; /* asked for one that is not there */
    return found ? 0 : -1;
}

#define CL_CHECK(call)                                                                \
    do {                                                                              \
        cl_int err_ = (call);                                                         \
        if (err_ != CL_SUCCESS) {                                                     \
            fprintf(stderr, "embed: %s failed with OpenCL error %d\n", #call, err_); \
            goto done;                                                                \
        }                                                                             \
    } while (0)

#define FLASHCL_CHECK(call)                                                                                 \
    do {                                                                                                    \
        flashcl_status s_ = (call);                                                                         \
        if (s_ != FLASHCL_SUCCESS) {                                                                        \
            fprintf(stderr, "embed: %s: %s: %s\n", #call, flashcl_status_string(s_), flashcl_last_error(fa)); \
            goto done;                                                                                      \
        }                                                                                                   \
    } while (0)

int main(void) {
    static host x;
    static float o[B * SQ * HQ * D], lse[B * HQ * SQ], dq[B * SQ * HQ * D], dk[B * SK * HKV * D],
        dv[B * SK * HKV * D];
    unsigned seed = 12345u; /* a small LCG: the same inputs on every machine */
    float *inputs[] = {x.q, x.k, x.v, x.dout};
    const size_t counts[] = {B * SQ * HQ * D, B * SK * HKV * D, B * SK * HKV * D, B * SQ * HQ * D};
    for (int t = 0; t < 4; ++t)
        for (size_t i = 0; i < counts[t]; ++i) {
            seed = seed * 1664525u + 1013904223u;
            inputs[t][i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
        }
    reference(&x);

    int status = 1;
    cl_context context = NULL;
    cl_command_queue queue = NULL;
    cl_mem buf[9] = {NULL};
    cl_event uploads[4] = {NULL}, forward_done = NULL, backward_done = NULL, downloads[5] = {NULL};
    flashcl_context *fa = NULL;

    cl_platform_id platform;
    cl_device_id device;
    const char *want = getenv("FLASHCL_DEVICE");
    if (pick_device(want, &platform, &device) != 0) {
        fprintf(stderr, "embed: no OpenCL device%s%s\n", want ? " matching " : "", want ? want : "");
        return 1;
    }
    char device_name[256] = "";
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof device_name - 1, device_name, NULL);

    cl_int err;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    context = clCreateContext(props, 1, &device, NULL, NULL, &err);
    CL_CHECK(err);
    /* Out of order where the device allows it: then nothing but the events
     * below orders the commands, which is what this example shows. */
    cl_command_queue_properties supported = 0;
    CL_CHECK(clGetDeviceInfo(device, CL_DEVICE_QUEUE_PROPERTIES, sizeof supported, &supported, NULL));
    const cl_command_queue_properties qprops = supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    queue = clCreateCommandQueue(context, device, qprops, &err);
    CL_CHECK(err);

    /* q k v dout o lse dq dk dv */
    const size_t bytes[9] = {sizeof x.q, sizeof x.k, sizeof x.v, sizeof x.dout, sizeof o,
                             sizeof lse, sizeof dq, sizeof dk, sizeof dv};
    for (int i = 0; i < 9; ++i) {
        buf[i] = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes[i], NULL, &err);
        CL_CHECK(err);
    }
    for (int i = 0; i < 4; ++i)
        CL_CHECK(clEnqueueWriteBuffer(queue, buf[i], CL_FALSE, 0, bytes[i], inputs[i], 0, NULL, &uploads[i]));

    /* flashcl retains the queue (and so the context) until flashcl_context_free. */
    if (flashcl_context_create_from_queue(&fa, queue, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "embed: flashcl_context_create_from_queue: %s\n", flashcl_last_error(NULL));
        goto done;
    }
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, HQ, SQ, SK, D);
    desc.heads_kv = HKV;
    desc.causal = 1;
    const flashcl_tensor q = flashcl_tensor_contiguous(buf[0], FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor k = flashcl_tensor_contiguous(buf[1], FLASHCL_LAYOUT_BSHD, HKV, SK, D);
    const flashcl_tensor v = flashcl_tensor_contiguous(buf[2], FLASHCL_LAYOUT_BSHD, HKV, SK, D);
    const flashcl_tensor dout = flashcl_tensor_contiguous(buf[3], FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor ot = flashcl_tensor_contiguous(buf[4], FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor lt = flashcl_tensor_lse(buf[5], HQ, SQ);
    const flashcl_tensor dqt = flashcl_tensor_contiguous(buf[6], FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor dkt = flashcl_tensor_contiguous(buf[7], FLASHCL_LAYOUT_BSHD, HKV, SK, D);
    const flashcl_tensor dvt = flashcl_tensor_contiguous(buf[8], FLASHCL_LAYOUT_BSHD, HKV, SK, D);

    /* forward after the Q, K, V uploads; backward after the forward and dO's upload. */
    FLASHCL_CHECK(flashcl_forward(fa, &desc, &q, &k, &v, &ot, &lt, 3, uploads, &forward_done));
    const cl_event before_backward[2] = {forward_done, uploads[3]};
    FLASHCL_CHECK(flashcl_backward(fa, &desc, &q, &k, &v, &ot, &lt, &dout, &dqt, &dkt, &dvt, 2, before_backward,
                                   &backward_done));
    /* O and LSE may be read once the forward is done; gradients after the backward. */
    CL_CHECK(clEnqueueReadBuffer(queue, buf[4], CL_FALSE, 0, sizeof o, o, 1, &forward_done, &downloads[0]));
    CL_CHECK(clEnqueueReadBuffer(queue, buf[5], CL_FALSE, 0, sizeof lse, lse, 1, &forward_done, &downloads[1]));
    CL_CHECK(clEnqueueReadBuffer(queue, buf[6], CL_FALSE, 0, sizeof dq, dq, 1, &backward_done, &downloads[2]));
    CL_CHECK(clEnqueueReadBuffer(queue, buf[7], CL_FALSE, 0, sizeof dk, dk, 1, &backward_done, &downloads[3]));
    CL_CHECK(clEnqueueReadBuffer(queue, buf[8], CL_FALSE, 0, sizeof dv, dv, 1, &backward_done, &downloads[4]));
    CL_CHECK(clWaitForEvents(5, downloads));

    double worst = 0.0;
    int failed = compare("O", o, x.o, sizeof o / sizeof o[0], &worst);
    failed |= compare("LSE", lse, x.lse, sizeof lse / sizeof lse[0], &worst);
    failed |= compare("dQ", dq, x.dq, sizeof dq / sizeof dq[0], &worst);
    failed |= compare("dK", dk, x.dk, sizeof dk / sizeof dk[0], &worst);
    failed |= compare("dV", dv, x.dv, sizeof dv / sizeof dv[0], &worst);
    printf("embed: flashcl %s on %s (%s queue): forward+backward, worst relative error %.2g: %s\n",
           flashcl_version_string(), device_name, qprops ? "out-of-order" : "in-order", worst,
           failed ? "FAILED" : "ok");
    status = failed;

done:
    if (queue) clFinish(queue); /* on an early exit, nothing may still be writing our arrays */
    flashcl_context_free(fa); /* releases its retain of queue and context; ours follow */
    for (int i = 0; i < 4; ++i)
        if (uploads[i]) clReleaseEvent(uploads[i]);
    for (int i = 0; i < 5; ++i)
        if (downloads[i]) clReleaseEvent(downloads[i]);
    if (forward_done) clReleaseEvent(forward_done);
    if (backward_done) clReleaseEvent(backward_done);
    for (int i = 0; i < 9; ++i)
        if (buf[i]) clReleaseMemObject(buf[i]);
    if (queue) clReleaseCommandQueue(queue);
    if (context) clReleaseContext(context);
    return status;
}

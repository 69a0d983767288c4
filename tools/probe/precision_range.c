/* precision_range.c: how the float32 forward and backward errors grow with the size of the scores, against the
 * CPU double reference (the table of docs/reliability.md). A development probe, not part of the build:
 *   gcc -O2 -std=c11 -DCL_TARGET_OPENCL_VERSION=120 -Iinclude -Ibuild/include -Isrc/reference \
 *       tools/probe/precision_range.c -o build/precision_range build/src/libflashcl_reference.a \
 *       -Lbuild/src -lflashcl -lOpenCL -lm -Wl,-rpath,$PWD/build/src
 *   FLASHCL_DEVICE=pocl build/precision_range
 * One head, 128 x 128, d 64, default scale; Q and K uniform in [-a, a] with a growing, V and dO in [-1, 1]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "flashcl.h"
#include "attention_reference.h"
static double urand(unsigned long long *s) { *s = *s * 6364136223846793005ULL + 1442695040888963407ULL; return (double)(*s >> 11) * 0x1.0p-53; }
static double relerr(const float *g, const double *r, size_t n) {
  double e = 0, m = 0; for (size_t i = 0; i < n; ++i) { if (fabs(r[i]) > m) m = fabs(r[i]); if (fabs(g[i] - r[i]) > e) e = fabs(g[i] - r[i]); }
  return m > 0 ? e / m : e;
}
int main(void) {
  flashcl_context *ctx; if (flashcl_context_create(&ctx, NULL)) return 1;
  const int S = 128, D = 64; const size_t n = (size_t)S * D;
  float *q = malloc(n*4), *k = malloc(n*4), *v = malloc(n*4), *dout = malloc(n*4), *o = malloc(n*4), *lse = malloc(S*4), *dq = malloc(n*4), *dk = malloc(n*4), *dv = malloc(n*4);
  double *ro = malloc(n*8), *rl = malloc(S*8), *rdq = malloc(n*8), *rdk = malloc(n*8), *rdv = malloc(n*8);
  const double target[] = {10, 100, 1e3, 1e4, 1e5, 1e6};
  printf("| max score | O rel err | dQ | dK | dV |\n| --- | --- | --- | --- | --- |\n");
  for (int t = 0; t < 6; ++t) {
    unsigned long long s = 42;
    /* scores ~ scale * q.k with q, k in [-a, a]: scale these to reach the target */
    const double a = sqrt(target[t] / 3.0);
    for (size_t i = 0; i < n; ++i) { q[i] = (float)(a * (2*urand(&s)-1)); k[i] = (float)(a * (2*urand(&s)-1)); v[i] = (float)(2*urand(&s)-1); dout[i] = (float)(2*urand(&s)-1); }
    flashcl_attention_desc d; flashcl_attention_desc_init(&d, 1, 1, S, S, D);
    if (flashcl_backward_host(ctx, &d, FLASHCL_LAYOUT_BHSD, q, k, v, dout, o, lse, dq, dk, dv)) { printf("fail %s\n", flashcl_last_error(ctx)); return 1; }
    flashcl_reference_forward(&d, FLASHCL_REF_DOUBLE, q, k, v, ro, rl);
    flashcl_reference_backward(&d, FLASHCL_REF_DOUBLE, q, k, v, dout, rdq, rdk, rdv);
    double maxs = 0; for (int i = 0; i < S; ++i) for (int j = 0; j < S; ++j) { double x = 0; for (int e = 0; e < D; ++e) x += (double)q[i*D+e]*k[j*D+e]; x /= 8.0; if (fabs(x) > maxs) maxs = fabs(x); }
    printf("| %.3g | %.2g | %.2g | %.2g | %.2g |\n", maxs, relerr(o, ro, n), relerr(dq, rdq, n), relerr(dk, rdk, n), relerr(dv, rdv, n));
  }
  flashcl_context_free(ctx); return 0;
}

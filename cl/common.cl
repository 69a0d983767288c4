// common.cl: storage types and helpers shared by every flashcl kernel (prepended to each program).
//
// Macros taken (the host passes them with -D; defaults let the file compile alone):
//   FLASHCL_DTYPE  0 = float, 1 = half (storage only), 2 = bfloat16 (storage only)
// All arithmetic is float whatever the storage type: no device the project
// targets is required to report cl_khr_fp16.

#ifndef FLASHCL_DTYPE
#define FLASHCL_DTYPE 0
#endif

#if FLASHCL_DTYPE == 0
typedef float storage_t;
#define LOAD(ptr, index) ((ptr)[index])
#define STORE(ptr, index, value) ((ptr)[index] = (value))
#elif FLASHCL_DTYPE == 1
typedef half storage_t;
#define LOAD(ptr, index) vload_half((index), (ptr))
#define STORE(ptr, index, value) vstore_half_rte((value), (index), (ptr))
#elif FLASHCL_DTYPE == 2
typedef ushort storage_t;
#define LOAD(ptr, index) as_float((uint)(ptr)[index] << 16)
#define STORE(ptr, index, value) ((ptr)[index] = flashcl_float_to_bf16(value))
// Round to nearest even; NaN stays a (quiet) NaN.
inline ushort flashcl_float_to_bf16(float x) {
    uint bits = as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (ushort)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (ushort)(bits >> 16);
}
#else
#error "FLASHCL_DTYPE must be 0 (float), 1 (half) or 2 (bfloat16)"
#endif

// Odd local-memory row strides keep work-items that read the same column of
// consecutive rows on different banks.
#define FLASHCL_ODD_STRIDE(n) ((n) | 1)

/* cuda_mma.cuh: tensor-core and asynchronous-copy primitives as inline PTX
 * (mma.sync m16n8k16 with fp32 accumulation, ldmatrix, cp.async, the
 * swizzled shared-memory tile layout ldmatrix reads without conflicts), kept
 * apart from the kernels that use them.
 *
 * Fragment layout (PTX m16n8k16): g = lane / 4, q = lane % 4; A regs hold
 * (row g | g + 8, cols 2q, 2q + 1 | + 8); B regs (k rows 2q, 2q + 1 | + 8, col
 * g); C regs (row g | g + 8, cols 2q, 2q + 1). */
#ifndef RL_CUDA_MMA_CUH
#define RL_CUDA_MMA_CUH

#include <stdint.h>

#include "kernels/cuda/cuda_types.cuh"

static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0,
                                                uint32_t b1, bf16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0,
                                                uint32_t b1, f16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* mma.sync m16n8k32 over e4m3 (sm_89 and up; elsewhere it compiles to
 * nothing and must not be called): A regs hold four values each (row g | g
 * + 8, cols 4q .. 4q + 3 | + 16), B regs four (k rows 4q .. 4q + 3 | + 16,
 * col g), C as above. */
static __device__ __forceinline__ void mma_e4m3_16832(float *c, const uint32_t *a, uint32_t b0,
                                                      uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
}
static __device__ __forceinline__ uint32_t pack2(float x, float y, bf16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *(uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t pack2(float x, float y, f16) {
    __half2 h = __floats2half2_rn(x, y);
    return *(uint32_t *)&h;
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Where (in 16-bit elements) 16-byte chunk ch of row r of a shared-memory tile
 * with ROW elements per row lives: chunks XOR-swizzled by the row, so the 8
 * rows one ldmatrix reads fall in 8 different bank groups (ROW >= 64). */
template <int ROW> static __device__ __forceinline__ int swz16(int r, int ch) {
    return r * ROW + ((ch ^ (r & 7)) << 3);
}

#endif

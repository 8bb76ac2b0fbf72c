/* cuda_math.cuh: arithmetic that several kernels must do alike.
 *
 * ex2, the exponential the softmax kernels share (attention's online
 * softmax, the sampler's row statistics): one instruction, and no
 * multiply-add the compiler could contract: the kernels --batch-invariant
 * runs must round each step the same wherever they are inlined
 * (tests/test_invariant_ptx.sh), which the math library's expf does not
 * promise.
 *
 * silu_mul, SwiGLU's value before its rounding to 16 bits: the swiglu
 * kernel, the experts' (moe.cu, cuda_tile_gemm.cuh) and the FP8 activation
 * quantizer that takes SwiGLU's output straight from gate_up (qlinear.cu)
 * must make the same bits. */
#ifndef RL_CUDA_MATH_CUH
#define RL_CUDA_MATH_CUH

/* 2^x (ex2.approx, relative error ~2^-22; -inf gives 0). */
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* silu(g) * u with the fast exponential and division (a few ulp of fp32,
 * far below the 16-bit rounding that follows; the accurate expf and IEEE
 * division made the FP8 quantizer that calls this issue-bound: PERF.md
 * v46), each step rounded as written, so no inlined copy contracts
 * differently (tests/test_invariant_ptx.sh).  g -> -inf gives -0. */
static __device__ __forceinline__ float silu_mul(float g, float u) {
    return __fmul_rn(__fdividef(g, __fadd_rn(1.0f, __expf(-g))), u);
}

#endif

/* wq.h: linear layers whose weights stay quantized on the GPU (int4 / int8
 * from AWQ and GPTQ, float8_e4m3fn from FP8 checkpoints), dequantized in
 * registers by the kernels of wq.cu.
 *
 * The loader hands over one rank's shard of a layer in one plain form,
 * whatever the checkpoint's packing (rlWqHost); rl_wq_upload repacks it into
 * the layout the kernels read.  Decode and small batches run the quantized
 * kernels directly (rl_wq_gemm, up to 128 rows); larger ones dequantize
 * into a 16-bit matrix and take the dense GEMM (rl_wq_dequant), where
 * compute, not weight reads, bounds the step. */
#ifndef RL_CUDA_WQ_H
#define RL_CUDA_WQ_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/config.h"
#include "kernels/quant.h"

/* rlWqType and rlWqHost, the plain form the loader hands over, live in
 * kernels/quant.h (the loader and the model build them without CUDA). */

typedef struct rlWq rlWq;

#ifdef __cplusplus
extern "C" {
#endif

/* Repack on the host and upload on stream s; *bytes: the device bytes held.
 * A shape the layout cannot hold fills msg and returns nonzero (an
 * rlErrorCode: RL_EMODEL for the shape or values, RL_EMEMORY, RL_EDEVICE).
 * The layout takes any n, k a multiple of 8, groups along K that are
 * multiples of 32 or all of k, fp8 scale blocks of 1, 2^i or all n rows. */
int rl_wq_upload(const rlWqHost *h, cudaStream_t s, rlWq **out, size_t *bytes, char *msg,
                 size_t msg_n);
/* y = x . w^T (+ bias, n values of dt, or NULL) (dtype dt: RL_BF16 or
 * RL_F16, like x; leading dimensions in elements) for 1 <= m <=
 * rl_wq_max_rows(w), each output rounded once.  Asynchronous on s, no allocation, no
 * synchronisation: it can be captured in a CUDA graph.  x must be 16-byte
 * aligned with ldx a multiple of 8.  ws (256-byte aligned, ws_bytes long,
 * or NULL) is device scratch for partial sums where a narrow layer splits
 * K over blocks; n x k x 2 bytes (the dequantized layer's size) give every
 * split it wants, less gives fewer, and the result is the same either way
 * up to fp32 rounding; it must not be in use by another stream.  pdl: launch with programmatic
 * dependent launch (the backend's arch.pdl: Hopper code on a Hopper GPU),
 * so the kernel loads its first weights while the kernel before it ends
 * and lets the next one start early (cuda_launch.cuh).  Returns 0 or an
 * rlErrorCode: RL_EINPUT for arguments the weights cannot take, RL_EDEVICE
 * for a failed launch (the caller records it like any failed operation). */
int rl_wq_gemm(const rlWq *w, rlDtype dt, const void *x, int ldx, void *y, int ldy,
               const void *bias, int m, void *ws, size_t ws_bytes, int pdl, cudaStream_t s);
/* FP8 layers on GPUs with FP8 tensor cores (code for sm_89 and up
 * running): y as rl_wq_gemm gives it (the same arguments and rules), with
 * x rounded to e4m3 first, per row and 128 columns (the scale: their
 * largest magnitude over 448) or by the static in_scale (one device float,
 * or NULL), as the W8A8 prefill rounds it (qlinear.cu), and the e4m3 values
 * multiplied as they are on the FP8 tensor cores (W8A8): no dequantizing
 * in the loop.  For 1 <= m <= rl_wq_a8_rows(w); returns like rl_wq_gemm. */
int rl_wq_gemm_a8(const rlWq *w, rlDtype dt, const void *x, int ldx, void *y, int ldy,
                  const void *bias, int m, const float *in_scale, int pdl, cudaStream_t s);
/* The most rows rl_wq_gemm_a8 takes for w on the current GPU: 0 where it
 * cannot run (not FP8, no FP8 tensor cores in the code that runs, or x's
 * e4m3 row past 32 KiB of shared memory), else 1: where it is faster than
 * rl_wq_gemm (kernels/PERF.md v49); the kernel itself takes up to 8. */
int rl_wq_a8_rows(const rlWq *w);
/* The most rows for which rl_wq_gemm beats rl_wq_dequant + the dense GEMM
 * for this layer (measured, kernels/PERF.md): 128, all rl_wq_gemm takes,
 * where groups are whole chunks of K without act-order, else 32. */
int rl_wq_max_rows(const rlWq *w);
/* The whole matrix dequantized into dst [n][k] of dtype dt (16-byte
 * aligned), in x's column order (an act-order permutation undone), so
 * y = x . dst^T; exactly the CPU backend's values rounded once.  Returns
 * like rl_wq_gemm. */
int rl_wq_dequant(const rlWq *w, rlDtype dt, void *dst, cudaStream_t s);
/* FP8 layers: their e4m3 values, unscaled and bit for bit as the checkpoint
 * holds them, into dst [n][k] row-major (16-byte aligned), for a GEMM that
 * reads e4m3 with the scales beside it; one pass moving 2 bytes a weight.
 * Returns like rl_wq_gemm (RL_EINPUT for int4 / int8 layers). */
int rl_wq_fp8_values(const rlWq *w, void *dst, cudaStream_t s);
void rl_wq_free(rlWq *w);

#ifdef __cplusplus
}
#endif

#endif

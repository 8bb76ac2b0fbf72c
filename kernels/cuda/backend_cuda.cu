/* backend_cuda.cu: the CUDA backend's life cycle, memory and step staging.
 *
 * Creates the device context (with one clear message per way it can fail),
 * moves tensors on and off the device, owns the KV cache, stages each step's
 * batch in one pinned transfer, and turns the first recorded failure into the
 * rlError that sync() returns.  The math lives in the sibling .cu files. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "kernels/gpuinfo.h"
}

int cuda_check(rlCuda *c, cudaError_t e, const char *op) {
    if (e == cudaSuccess) return 0;
    if (c->err.code == RL_OK) {
        rlErrorCode code = e == cudaErrorMemoryAllocation ? RL_EMEMORY : RL_EDEVICE;
        rl_error(&c->err, code,
                 "CUDA backend, device %d, in %s: %s (%s). The GPU work of this step is lost; "
                 "if this repeats, run `compute-sanitizer build/redlm ...` or check `nvidia-smi` "
                 "for a failing or busy device.",
                 c->device, op, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return -1;
}

void cuda_fail(rlCuda *c, rlErrorCode code, const char *fmt, ...) {
    if (c->err.code != RL_OK) return;
    char msg[RL_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rl_error(&c->err, code, "CUDA backend, device %d: %s", c->device, msg);
}

/* Grow *buf to hold at least bytes (zeroed when zero is set); 0 on success. */
int cuda_grow(rlCuda *c, void **buf, size_t *cap, size_t bytes, int zero, const char *op) {
    if (bytes <= *cap) return 0;
    if (c->capturing) {
        cuda_fail(c, RL_EINTERNAL, "%s: a device buffer must grow during a graph capture", op);
        return -1;
    }
    /* Growing replaces a buffer queued work may still read (or a captured
     * step points into): wait for it, drop the captures. */
    cuda_graphs_clear(c);
    if (cuda_check(c, cudaStreamSynchronize(c->stream), op)) return -1;
    cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    size_t n = bytes + bytes / 4;
    if (cuda_check(c, cudaMalloc(buf, n), op)) return -1;
    if (zero && cuda_check(c, cudaMemsetAsync(*buf, 0, n, c->stream), op)) return -1;
    *cap = n;
    return 0;
}

int cuda_scratch(rlCuda *c, size_t bytes, const char *op) {
    return cuda_grow(c, &c->scratch, &c->scratch_cap, bytes, 0, op);
}

int cuda_moe_ws(rlCuda *c, size_t bytes, const char *op) {
    return cuda_grow(c, &c->moe_ws, &c->moe_ws_cap, bytes, 0, op);
}

int cuda_att_counters(rlCuda *c, int n, const char *op) {
    return cuda_grow(c, (void **)&c->att_count, &c->att_count_cap, (size_t)n * sizeof(int), 1, op);
}

static void *cuda_alloc(rlBackend *be, size_t bytes, rlError *err) {
    rlCuda *c = cuda_of(be);
    void *p = NULL;
    cudaSetDevice(c->device);
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        rl_error(err, RL_EMEMORY,
                 "CUDA backend, device %d: cannot allocate %.3f GiB (%s); %.2f of %.2f GiB free. "
                 "Use a smaller model shard (more --tp / --pp ranks), a lower --max-num-seqs or "
                 "--max-num-batched-tokens, or free the GPU of other processes.",
                 c->device, bytes / 1073741824.0, cudaGetErrorString(e), free_b / 1073741824.0,
                 total_b / 1073741824.0);
        return NULL;
    }
    return p;
}

static void cuda_free_buf(rlBackend *be, void *p) {
    cudaSetDevice(cuda_of(be)->device);
    cudaFree(p);
}

/* Report (and clear) a failure recorded by a synchronous call. */
static int cuda_take_error(rlCuda *c, rlError *err) {
    if (c->err.code == RL_OK) return 0;
    if (err) *err = c->err;
    c->err.code = RL_OK;
    c->err.msg[0] = 0;
    return -1;
}

/* Host tensors of another dtype are converted on the device, a chunk at a
 * time, so a multi-GiB fp32 checkpoint never needs a converted host copy. */
static int cuda_upload(rlBackend *be, void *dst, rlDtype dst_dtype, const void *src,
                       rlDtype src_dtype, size_t n, rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    if (dst_dtype == src_dtype) {
        cuda_check(c, cudaMemcpyAsync(dst, src, n * rl_dtype_size(src_dtype),
                                      cudaMemcpyHostToDevice, c->stream), "upload");
    } else {
        const size_t chunk = (size_t)16 << 20;   /* elements */
        size_t ss = rl_dtype_size(src_dtype), ds = rl_dtype_size(dst_dtype);
        for (size_t off = 0; off < n && c->err.code == RL_OK; off += chunk) {
            size_t m = n - off < chunk ? n - off : chunk;
            if (cuda_scratch(c, chunk * ss, "upload")) break;
            if (cuda_check(c, cudaMemcpyAsync(c->scratch, (const char *)src + off * ss, m * ss,
                                              cudaMemcpyHostToDevice, c->stream), "upload"))
                break;
            cuda_convert(c, (char *)dst + off * ds, dst_dtype, c->scratch, src_dtype, m);
        }
    }
    cuda_check(c, cudaStreamSynchronize(c->stream), "upload");
    return cuda_take_error(c, err);
}

static int cuda_download(rlBackend *be, void *dst_host, const void *src, size_t bytes,
                         rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    cuda_check(c, cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream),
               "download");
    cuda_check(c, cudaStreamSynchronize(c->stream), "download");
    return cuda_take_error(c, err);
}

static int cuda_fill_random_op(rlBackend *be, void *dst, rlDtype dtype, size_t n, uint64_t seed,
                               float scale, rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    cuda_fill_random(c, dst, dtype, n, seed, scale);
    cuda_check(c, cudaStreamSynchronize(c->stream), "fill_random");
    return cuda_take_error(c, err);
}

static int cuda_kv_init(rlBackend *be, int n_layers, int n_blocks, int block_size, int n_kv,
                        int head_dim, rlError *err) {
    rlCuda *c = cuda_of(be);
    if (head_dim % 2 || head_dim > 256)
        return rl_error(err, RL_EMODEL,
                        "CUDA backend: head_dim %d is not supported by the attention kernels "
                        "(even head dims up to 256 are; Qwen2 models use 64 or 128). Run this "
                        "model with --backend cpu.", head_dim);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cuda_graphs_clear(c);
    cudaFree(c->k_cache);
    cudaFree(c->v_cache);
    c->k_cache = c->v_cache = NULL;
    size_t bytes = (size_t)n_layers * n_blocks * block_size * n_kv * head_dim *
                   rl_dtype_size(be->act_dtype);
    if (!(c->k_cache = cuda_alloc(be, bytes, err)) || !(c->v_cache = cuda_alloc(be, bytes, err)))
        return rl_error_wrap(err, "allocating the KV cache (%d blocks of %d tokens)", n_blocks,
                             block_size);
    /* Zeroed so a stray read of an unwritten slot is a small number, never NaN. */
    cuda_check(c, cudaMemsetAsync(c->k_cache, 0, bytes, c->stream), "kv_init");
    cuda_check(c, cudaMemsetAsync(c->v_cache, 0, bytes, c->stream), "kv_init");
    cuda_check(c, cudaStreamSynchronize(c->stream), "kv_init");
    c->kv_layers = n_layers;
    c->kv_blocks = n_blocks;
    c->kv_block_size = block_size;
    c->kv_heads = n_kv;
    c->kv_head_dim = head_dim;
    return cuda_take_error(c, err);
}

/* The rotary table as fp32 on the device (the kernel's angles are fp32, as
 * Hugging Face's are). */
static int cuda_rope_init(rlBackend *be, const double *inv_freq, int n, double scale,
                          rlError *err) {
    rlCuda *c = cuda_of(be);
    if (n < 1 || n > 128)
        return rl_error(err, RL_EMODEL,
                        "CUDA backend: head_dim %d is not supported by the rotary kernel (even "
                        "head dims up to 256 are). Run this model with --backend cpu.", 2 * n);
    float host[128];
    for (int i = 0; i < n; i++) host[i] = (float)inv_freq[i];
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cuda_graphs_clear(c);      /* captures hold the old table's address */
    cudaFree(c->rope_inv_freq);
    c->rope_inv_freq = NULL;
    if (cuda_check(c, cudaMalloc(&c->rope_inv_freq, (size_t)n * sizeof(float)), "rope_init") ||
        cuda_check(c, cudaMemcpy(c->rope_inv_freq, host, (size_t)n * sizeof(float),
                                 cudaMemcpyHostToDevice), "rope_init"))
        return cuda_take_error(c, err);
    c->rope_n = n, c->rope_scale = (float)scale;
    return 0;
}

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* Packs the batch's arrays at 16-byte aligned offsets of one pinned buffer
 * and copies it in one transfer; the device pointers index the same offsets. */
static int cuda_begin_step(rlBackend *be, const rlBatch *b, rlError *err) {
    rlCuda *c = cuda_of(be);
    if (!c->k_cache) return rl_error(err, RL_EINTERNAL, "CUDA backend: begin_step before kv_init");
    if (rl_batch_check(b, c->kv_blocks, c->kv_block_size, err)) return -1;
    cudaSetDevice(c->device);
    PROF(c, "begin_step (H2D)");
    int max_new = 0, max_seq_len = 0, lead = -1;
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->seq_start[s + 1] - b->seq_start[s];
        if (n_new != 1 && lead < 0) lead = s;
        if (n_new > max_new) max_new = n_new;
        if (b->seq_len[s] > max_seq_len) max_seq_len = b->seq_len[s];
    }
    /* A decode step a graph may capture: its block tables are padded to a
     * power-of-two pitch, so the shape changes rarely as sequences grow. */
    c->graph_shape = c->graphs && max_new == 1 && b->n_tokens == b->n_seqs &&
                     b->n_tokens <= 1024;
    int pitch = b->max_blocks;
    if (c->graph_shape)
        for (pitch = 16; pitch < b->max_blocks; pitch *= 2) {}
    /* The logit adjustments and penalty counts come last, so the offsets a
     * captured graph reads do not move with their count. */
    int n_adjs = b->adjs ? b->n_adjs : 0, n_fills = b->pen_fills ? b->n_pen_fills : 0;
    size_t sz[9] = {
        (size_t)b->n_tokens * 4, (size_t)b->n_tokens * 4, (size_t)b->n_tokens * 4,
        (size_t)(b->n_seqs + 1) * 4, (size_t)b->n_seqs * 4,
        (size_t)b->n_seqs * pitch * 4, (size_t)b->n_rows * sizeof(rlRowSpec),
        (size_t)n_adjs * sizeof(rlLogitAdj), (size_t)n_fills * sizeof(rlPenFill)};
    const void *src[9] = {b->tokens, b->positions, b->slots, b->seq_start, b->seq_len,
                          b->block_tables, b->rows, b->adjs, b->pen_fills};
    size_t off[9], total = 0;
    for (int i = 0; i < 9; i++) {
        off[i] = total;
        total += align16(sz[i]);
    }
    if (total > c->stage_cap) {
        cuda_check(c, cudaStreamSynchronize(c->stream), "begin_step");
        cuda_graphs_clear(c);
        cudaFreeHost(c->stage_host);
        cudaFree(c->stage_dev);
        c->stage_host = c->stage_dev = NULL;
        c->stage_cap = 0;
        size_t cap = total * 2 > 65536 ? total * 2 : 65536;
        if (cuda_check(c, cudaMallocHost((void **)&c->stage_host, cap), "begin_step") ||
            cuda_check(c, cudaMalloc((void **)&c->stage_dev, cap), "begin_step"))
            return cuda_take_error(c, err);
        c->stage_cap = cap;
    }
    for (int i = 0; i < 9; i++)
        if (sz[i] && (i != 5 || pitch == b->max_blocks))
            memcpy(c->stage_host + off[i], src[i], sz[i]);
    if (pitch != b->max_blocks) {
        int32_t *t = (int32_t *)(c->stage_host + off[5]);
        memset(t, 0, sz[5]);
        for (int s = 0; s < b->n_seqs; s++)
            memcpy(t + (size_t)s * pitch, b->block_tables + (size_t)s * b->max_blocks,
                   (size_t)b->max_blocks * 4);
    }
    cuda_check(c, cudaMemcpyAsync(c->stage_dev, c->stage_host, total, cudaMemcpyHostToDevice,
                                  c->stream), "begin_step");
    c->d_tokens = (int32_t *)(c->stage_dev + off[0]);
    c->d_positions = (int32_t *)(c->stage_dev + off[1]);
    c->d_slots = (int32_t *)(c->stage_dev + off[2]);
    c->d_seq_start = (int32_t *)(c->stage_dev + off[3]);
    c->d_seq_len = (int32_t *)(c->stage_dev + off[4]);
    c->d_block_tables = (int32_t *)(c->stage_dev + off[5]);
    c->d_rows = (rlRowSpec *)(c->stage_dev + off[6]);
    c->d_adjs = (rlLogitAdj *)(c->stage_dev + off[7]);
    c->n_adjs = n_adjs;
    c->d_pen_fills = (rlPenFill *)(c->stage_dev + off[8]);
    c->pen_max = c->pen_fill = c->adj_rows = c->adj_copy_rows = 0;
    for (int r = 0; r < b->n_rows; r++) {
        const rlRowSpec *sp = &b->rows[r];
        if (!sp->sample || (sp->n_adj <= 0 && sp->pen <= 0)) continue;
        c->adj_rows++;
        c->adj_copy_rows += sp->temperature > 0;
        c->pen_fill |= sp->pen > 0 && sp->pen_fill;
        if (sp->pen > c->pen_max) c->pen_max = sp->pen;
    }
    c->n_seqs = b->n_seqs;
    c->n_tokens = b->n_tokens;
    c->n_rows = b->n_rows;
    c->max_blocks = pitch;
    c->max_new = max_new;
    c->lead_decode = lead < 0 ? b->n_seqs : lead;
    c->max_seq_len = max_seq_len;
    c->att_len = c->graph_shape ? pitch * c->kv_block_size : max_seq_len;
    return cuda_take_error(c, err);
}

static void cuda_copy2d(rlBackend *be, void *dst, size_t dst_pitch, const void *src,
                        size_t src_pitch, size_t width, int rows) {
    rlCuda *c = cuda_of(be);
    if (!rows || !width) return;
    PROF(c, "copy2d");
    /* A pitch of 0 means "packed" (one row, or rows back to back). */
    cuda_check(c, cudaMemcpy2DAsync(dst, dst_pitch ? dst_pitch : width, src,
                                    src_pitch ? src_pitch : width, width, rows,
                                    cudaMemcpyDeviceToDevice, c->stream), "copy2d");
}

static int cuda_sync(rlBackend *be, rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    cuda_prof_flush(c);
    cuda_check(c, cudaStreamSynchronize(c->stream), "sync");
    cuda_check(c, cudaGetLastError(), "sync");
    return cuda_take_error(c, err);
}

static void cuda_destroy(rlBackend *be) {
    if (!be) return;
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cuda_graphs_free(c);
    cuda_prof_free(c);
    cuda_qlinear_free(c);
    cuda_gemm_free(c);
    cudaFree(c->k_cache);
    cudaFree(c->v_cache);
    cudaFree(c->rope_inv_freq);
    cudaFree(c->stage_dev);
    cudaFreeHost(c->stage_host);
    cudaFree(c->scratch);
    cudaFree(c->moe_ws);
    cudaFree(c->moe_count);
    cudaFree(c->att_count);
    cudaFree(c->d_results);
    cudaFreeHost(c->h_results);
    cudaFree(c->stats);
    cudaFree(c->pen);
    cudaStreamDestroy(c->stream);
    free(c);
}

int cuda_kv_capacity(rlBackend *be, size_t bytes_per_block, int block_size, int min_blocks,
                     double util, int *n_blocks, rlError *err);

static int cuda_reserve(rlBackend *be, int max_rows, size_t moe_bytes, rlError *err) {
    rlCuda *c = cuda_of(be);
    /* An MoE model also takes moe_gate's block counter (moe.cu). */
    if ((moe_bytes && (cuda_moe_ws(c, moe_bytes, "reserve") ||
                       cuda_grow(c, (void **)&c->moe_count, &c->moe_count_cap, sizeof(int), 1,
                                 "reserve"))) ||
        cuda_qlinear_reserve(c, max_rows)) {
        rl_error(err, c->err.code, "%s", c->err.msg);
        memset(&c->err, 0, sizeof c->err);
        return -1;
    }
    return 0;
}

static const rlBackendOps cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free_buf,
    .upload = cuda_upload,
    .download = cuda_download,
    .fill_random = cuda_fill_random_op,
    .kv_init = cuda_kv_init,
    .rope_init = cuda_rope_init,
    .begin_step = cuda_begin_step,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul,
    .upload_quant = cuda_upload_quant,
    .matmul_quant = cuda_matmul_quant,
    .free_quant = cuda_free_quant,
    .swiglu_matmul_quant = cuda_swiglu_matmul_quant,
    .matmul_f32 = cuda_matmul_f32,
    .rope_kv_store = cuda_rope_kv_store,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .moe_route = cuda_moe_route,
    .moe_gate = cuda_moe_gate,
    .moe_experts = cuda_moe_experts,
    .shared_gate = cuda_shared_gate,
    .gather_rows = cuda_gather_rows,
    .add = cuda_add,
    .copy2d = cuda_copy2d,
    .sample = cuda_sample,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .kv_capacity = cuda_kv_capacity,
    .reserve = cuda_reserve,
    .graph_run = cuda_graph_run,
    .profile_report = cuda_profile_report,
};

/* One message per way a GPU can be unusable, each saying what to do. */
static int cuda_open_device(int device, rlError *err) {
    int n = 0, drv = 0, rt = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    if (drv == 0)
        return rl_error(err, RL_EDEVICE,
                        "no NVIDIA driver is loaded on this machine, so the CUDA backend has "
                        "no GPU to use. "
                        "Install the NVIDIA driver (check with `nvidia-smi`), or run with "
                        "--backend cpu.");
    if (e == cudaErrorInsufficientDriver || drv < rt)
        return rl_error(err, RL_EDEVICE,
                        "the NVIDIA driver is too old for this build: it supports CUDA %d.%d, "
                        "redlm was built with CUDA %d.%d. Update the driver, or rebuild redlm "
                        "with a CUDA Toolkit no newer than %d.%d.",
                        drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, drv / 1000,
                        drv % 1000 / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return rl_error(err, RL_EDEVICE,
                        "no NVIDIA GPU is visible to this process (CUDA found no device). Check "
                        "`nvidia-smi`, CUDA_VISIBLE_DEVICES and the container's GPU access, or "
                        "run with --backend cpu.");
    if (e != cudaSuccess)
        return rl_error(err, RL_EDEVICE,
                        "the CUDA runtime could not list GPUs: %s (%s). Check that the NVIDIA "
                        "driver is loaded (`nvidia-smi`), or run with --backend cpu.",
                        cudaGetErrorString(e), cudaGetErrorName(e));
    if (device < 0 || device >= n)
        return rl_error(err, RL_EDEVICE,
                        "GPU %d was asked for but this process sees %d GPU%s (ordinals 0..%d). "
                        "Fix --devices (or CUDA_VISIBLE_DEVICES).",
                        device, n, n == 1 ? "" : "s", n - 1);
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess ||
        (e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess)
        return rl_error(err, RL_EDEVICE,
                        "GPU %d could not be opened: %s (%s). Another process may hold it in "
                        "exclusive mode, or it is failing: check `nvidia-smi`.",
                        device, cudaGetErrorString(e), cudaGetErrorName(e));
    if (p.major < 8)
        return rl_error(err, RL_EDEVICE,
                        "GPU %d (%s) has compute capability %d.%d, which the CUDA backend does "
                        "not support: it needs bf16 tensor cores, compute capability 8.0 or newer "
                        "(A100 8.0; RTX 3090, A10, A40, A5000 8.6; RTX 4090, L4, L40S 8.9; H100, "
                        "H200 9.0; newer GPUs through PTX). Use one of those, or --backend cpu.",
                        device, p.name, p.major, p.minor);
    return 0;
}

extern "C" rlBackend *rl_backend_cuda_create(const rlBackendOptions *opt, rlError *err) {
    if (opt->dtype != RL_BF16 && opt->dtype != RL_F16) {
        rl_error(err, RL_EUSAGE,
                 "the CUDA backend computes in bf16 or fp16, not %s: use --dtype bf16 or "
                 "--dtype fp16 (or --backend cpu for fp32).", rl_dtype_name(opt->dtype));
        return NULL;
    }
    /* What the device holds before this context: the memory plan's
     * fallback measure of this process's own use (memplan.cu). */
    size_t used_before = 0;
    rlGpuHost *host = (rlGpuHost *)malloc(sizeof *host);
    char why[256];
    if (host && rl_gpu_probe(host, why, sizeof why) == 0 && opt->device >= 0 &&
        opt->device < host->count)
        used_before = host->gpus[opt->device].used;
    free(host);
    if (cuda_open_device(opt->device, err)) return NULL;
    rlCuda *c = (rlCuda *)calloc(1, sizeof *c);
    if (!c) {
        rl_error(err, RL_EMEMORY, "CUDA backend: out of host memory");
        return NULL;
    }
    c->used_at_open = used_before;
    c->device = opt->device;
    c->invariant = opt->batch_invariant;
    c->be.ops = &cuda_ops;
    c->be.act_dtype = c->be.weight_dtype = opt->dtype;
    c->be.impl = c;
    cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, c->device);
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        rl_error(err, RL_EDEVICE, "CUDA backend, device %d: cannot create a stream: %s",
                 c->device, cudaGetErrorString(e));
        free(c);
        return NULL;
    }
    /* Profiling times each operation, which a replayed graph would hide.
     * RL_CUDA_GRAPHS=0 reaches programs without flags (the op tests). */
    const char *graphs = getenv("RL_CUDA_GRAPHS");
    int use_graphs = !opt->profile && !opt->eager && !(graphs && !strcmp(graphs, "0"));
    if (cuda_arch_init(c, err) || cuda_gemm_init(c, err) || cuda_attention_init(c, err) ||
        (opt->profile && cuda_prof_init(c, err)) ||
        (use_graphs && cuda_graphs_init(c, err))) {
        cuda_destroy(&c->be);
        return NULL;
    }
    return &c->be;
}

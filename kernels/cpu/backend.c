/* backend.c: the CPU backend: fp32 everywhere, GEMMs through OpenBLAS.
 *
 * Weights are converted to fp32 once at upload (bf16 and fp16 checkpoints
 * alike), so every operation reads one dtype and the results match a float64
 * reference to ~1e-5.  fp32 doubles the bytes a decode step reads compared
 * with bf16, which makes batch-1 decode bandwidth-bound at twice the bf16
 * floor; the simplicity is worth it for the reference backend.  Operations
 * run synchronously on the caller's thread (OpenBLAS and the attention pool
 * fan out below it); failures are recorded and reported from sync(). */
#include "kernels/cpu/cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/half.h"
#include "kernels/rng.h"

static cpuBackend *cpu_of(rlBackend *be) { return be->impl; }

void cpu_fail(cpuBackend *c, rlErrorCode code, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = 1;
    c->err.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err.msg, sizeof(c->err.msg), fmt, ap);
    va_end(ap);
}

static void *cpu_alloc(rlBackend *be, size_t bytes, rlError *err) {
    (void)be;
    void *p = NULL;
    /* 64-byte alignment for AVX-512 loads; at least one line so 0 works. */
    size_t n = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        rl_error(err, RL_EMEMORY,
                 "out of host memory allocating %zu MiB for the CPU backend: use a smaller "
                 "model, fewer KV blocks or a smaller --max-num-batched-tokens", bytes >> 20);
        return NULL;
    }
    return p;
}

static void cpu_free(rlBackend *be, void *p) {
    (void)be;
    free(p);
}

static int cpu_upload(rlBackend *be, void *dst, rlDtype dst_dtype, const void *src,
                      rlDtype src_dtype, size_t n, rlError *err) {
    (void)be;
    if (dst_dtype != RL_F32)
        return rl_error(err, RL_EINTERNAL, "the CPU backend stores fp32 only, not %s",
                        rl_dtype_name(dst_dtype));
    float *d = dst;
    const uint16_t *h = src;
    switch (src_dtype) {
    case RL_F32: memcpy(d, src, n * sizeof(float)); break;
    case RL_BF16: for (size_t i = 0; i < n; i++) d[i] = rl_bf16_to_f32(h[i]); break;
    case RL_F16: for (size_t i = 0; i < n; i++) d[i] = rl_f16_to_f32(h[i]); break;
    default:
        return rl_error(err, RL_EINTERNAL, "the CPU backend cannot upload %s data",
                        rl_dtype_name(src_dtype));
    }
    return 0;
}

static int cpu_download(rlBackend *be, void *dst_host, const void *src, size_t bytes,
                        rlError *err) {
    (void)be, (void)err;
    memcpy(dst_host, src, bytes);
    return 0;
}

static int cpu_fill_random(rlBackend *be, void *dst, rlDtype dtype, size_t n, uint64_t seed,
                           float scale, rlError *err) {
    (void)be;
    if (dtype != RL_F32)
        return rl_error(err, RL_EINTERNAL, "the CPU backend stores fp32 only, not %s",
                        rl_dtype_name(dtype));
    float *d = dst;
    uint64_t key = rl_mix64(seed);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rl_mix64(key + i) >> 11) * (1.0 / 9007199254740992.0);
        d[i] = (float)((2.0 * u - 1.0) * scale);
    }
    return 0;
}

static int cpu_kv_init(rlBackend *be, int n_layers, int n_blocks, int block_size, int n_kv,
                       int head_dim, rlError *err) {
    cpuBackend *c = cpu_of(be);
    if (n_layers < 0 || n_blocks < 1 || block_size < 1 || n_kv < 0 || head_dim < 1)
        return rl_error(err, RL_EUSAGE,
                        "invalid KV cache shape: %d layers, %d blocks of %d tokens, %d KV heads "
                        "of %d; blocks and block size must be at least 1",
                        n_layers, n_blocks, block_size, n_kv, head_dim);
    size_t n = 2 * (size_t)n_layers * n_blocks * block_size * n_kv * head_dim;
    float *kv = calloc(n ? n : 1, sizeof(float));
    if (!kv)
        return rl_error(err, RL_EMEMORY,
                        "out of host memory for the KV cache (%zu MiB for %d blocks of %d "
                        "tokens): lower --kv-cache-memory or --block-size",
                        n * sizeof(float) >> 20, n_blocks, block_size);
    free(c->kv);
    c->kv = kv;
    c->n_layers = n_layers, c->n_blocks = n_blocks, c->block_size = block_size;
    c->n_kv = n_kv, c->head_dim = head_dim;
    return 0;
}

/* The batch comes from the scheduler, but a bad block number here would write
 * outside the cache, so it is checked once per step (O(tokens + blocks)). */
static int cpu_begin_step(rlBackend *be, const rlBatch *b, rlError *err) {
    cpuBackend *c = cpu_of(be);
    if (!c->kv) return rl_error(err, RL_EINTERNAL, "begin_step before kv_init");
    if (rl_batch_check(b, c->n_blocks, c->block_size, err) != 0) return -1;
    c->b = b;
    c->rope_ready = 0;
    return 0;
}

static void cpu_embed(rlBackend *be, void *out, const void *table, int vocab0, int n_vocab,
                      int dim) {
    const rlBatch *b = cpu_of(be)->b;
    float *o = out;
    const float *tab = table;
    for (int t = 0; t < b->n_tokens; t++) {
        int id = b->tokens[t] - vocab0;
        if (id >= 0 && id < n_vocab)
            memcpy(o + (size_t)t * dim, tab + (size_t)id * dim, (size_t)dim * sizeof(float));
        else
            memset(o + (size_t)t * dim, 0, (size_t)dim * sizeof(float));
    }
}

void cpu_norm_row(float *out, const float *x, const float *w, int dim, float eps) {
    double ss = 0;
    for (int i = 0; i < dim; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / dim + eps));
    for (int i = 0; i < dim; i++) out[i] = x[i] * inv * w[i];
}

static void cpu_rmsnorm(rlBackend *be, void *out, const void *in, const void *w, int rows,
                        int dim, float eps) {
    (void)be;
    for (int r = 0; r < rows; r++)
        cpu_norm_row((float *)out + (size_t)r * dim, (const float *)in + (size_t)r * dim, w, dim,
                     eps);
}

static void cpu_add_rmsnorm(rlBackend *be, void *resid, const void *x, void *out, const void *w,
                            int rows, int dim, float eps) {
    (void)be;
    float *h = resid;
    const float *d = x;
    for (int r = 0; r < rows; r++) {
        float *hr = h + (size_t)r * dim;
        const float *dr = d + (size_t)r * dim;
        for (int i = 0; i < dim; i++) hr[i] += dr[i];
        cpu_norm_row((float *)out + (size_t)r * dim, hr, w, dim, eps);
    }
}

static void cpu_matmul_f32(rlBackend *be, float *out, const void *in, const void *w, int rows,
                           int n, int k) {
    cpu_matmul_rows(cpu_of(be), out, in, w, rows, n, k);
}

static void cpu_matmul(rlBackend *be, void *out, const void *in, const void *w, const void *bias,
                       int rows, int n, int k) {
    cpu_matmul_f32(be, out, in, w, rows, n, k);
    if (!bias || n <= 0) return;
    float *o = out;
    const float *bs = bias;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) o[(size_t)r * n + i] += bs[i];
}

static void cpu_swiglu(rlBackend *be, void *out, const void *gate_up, int rows, int m) {
    (void)be;
    float *o = out;
    const float *gu = gate_up;
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * m, *u = g + m;
        float *or = o + (size_t)r * m;
        for (int i = 0; i < m; i++) or[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

static void cpu_gather_rows(rlBackend *be, void *out, const void *in, int dim, int row0, int n) {
    const rlRowSpec *rows = cpu_of(be)->b->rows + row0;
    for (int r = 0; r < n; r++)
        memcpy((float *)out + (size_t)r * dim, (const float *)in + (size_t)rows[r].token * dim,
               (size_t)dim * sizeof(float));
}

static void cpu_add(rlBackend *be, void *a, const void *b, size_t n) {
    (void)be;
    float *x = a;
    const float *y = b;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

typedef struct copyJob {
    char *dst;
    const char *src;
    size_t dst_pitch, src_pitch, width, part;
    int rows;
} copyJob;

/* Item i copies bytes [i * part, (i + 1) * part) of every row. */
static void copy_item(void *ctx, int i) {
    copyJob *j = ctx;
    size_t off = (size_t)i * j->part;
    if (off >= j->width) return;
    size_t n = j->width - off < j->part ? j->width - off : j->part;
    for (int r = 0; r < j->rows; r++)
        memcpy(j->dst + (size_t)r * j->dst_pitch + off, j->src + (size_t)r * j->src_pitch + off,
               n);
}

/* Large copies are split over the pool: one core alone cannot saturate the
 * memory bus, and `redlm bench` measures the bandwidth floor with this op. */
static void cpu_copy2d(rlBackend *be, void *dst, size_t dst_pitch, const void *src,
                       size_t src_pitch, size_t width, int rows) {
    cpuPool *pool = cpu_of(be)->pool;
    copyJob j = {.dst = dst, .src = src, .dst_pitch = dst_pitch, .src_pitch = src_pitch,
                 .width = width, .rows = rows};
    int parts = width * (size_t)rows >= (1 << 20) ? cpu_pool_threads(pool) : 1;
    j.part = ((width + (size_t)parts - 1) / (size_t)parts + 63) / 64 * 64;
    cpu_pool_run(pool, parts, copy_item, &j);
}

static int cpu_sync(rlBackend *be, rlError *err) {
    cpuBackend *c = cpu_of(be);
    if (!c->failed) return 0;
    c->failed = 0;
    if (err) *err = c->err;
    return -1;
}

static void cpu_destroy(rlBackend *be) {
    if (!be) return;
    cpuBackend *c = cpu_of(be);
    cpu_pool_destroy(c->pool);
    free(c->kv);
    free(c->rope_inv_freq);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c->moe_scratch);
    free(c->pen);
    free(c);
}

static const rlBackendOps cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .fill_random = cpu_fill_random,
    .kv_init = cpu_kv_init,
    .rope_init = cpu_rope_init,
    .begin_step = cpu_begin_step,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul,
    .matmul_f32 = cpu_matmul_f32,
    .rope_kv_store = cpu_rope_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .moe_route = cpu_moe_route,
    .moe_experts = cpu_moe_experts,
    .shared_gate = cpu_shared_gate,
    .gather_rows = cpu_gather_rows,
    .add = cpu_add,
    .copy2d = cpu_copy2d,
    .sample = cpu_sample,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};

rlBackend *rl_backend_cpu_create(const rlBackendOptions *opt, rlError *err) {
    int threads = opt && opt->threads > 0 ? opt->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    cpuBackend *c = calloc(1, sizeof(*c));
    if (!c) {
        rl_error(err, RL_EMEMORY, "out of host memory creating the CPU backend");
        return NULL;
    }
    c->pool = cpu_pool_create(threads, err);
    if (!c->pool) {
        free(c);
        return NULL;
    }
    /* OpenBLAS's thread count is process-wide: CPU ranks sharing a process
     * should pass --threads split between them. */
    openblas_set_num_threads(threads);
    c->invariant = opt && opt->batch_invariant;
    c->base.ops = &cpu_ops;
    c->base.act_dtype = RL_F32;
    c->base.weight_dtype = RL_F32;
    c->base.impl = c;
    return &c->base;
}

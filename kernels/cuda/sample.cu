/* sample.cu: logprobs and sampling on the GPU, with the CPU backend's semantics.
 *
 * One block per logit row.  Logprobs are log-softmax of the raw logits in
 * double; the top alternatives are the highest logits, ties to the lowest id;
 * greedy (temperature 0) takes the top one.  Otherwise tokens are ordered by
 * logit descending (ties: lower id first) with masses q_i = exp((l_i - max) / T)
 * in double: top-k keeps the first k, top-p the shortest prefix whose mass
 * reaches top_p of the kept mass, min-p those with q_i >= min_p (q_max = 1),
 * and u = rl_uniform(seed, sample_index, step) takes the first kept token
 * whose cumulative mass exceeds u times the kept mass.
 *
 * Nothing is sorted: every "k-th largest" or "where does this mass fall" is a
 * radix descent over the logits' bits (four 8-bit passes of histograms of
 * counts or masses), and the tokens of one tied logit are ordered by id with
 * a block scan.  A kept set is always a prefix of that order, so it is held
 * as (key threshold, id bound among the threshold's ties, min-p floor).
 *
 * A first kernel spreads each row over many blocks for what every row needs
 * (maximum, its lowest id, and the exp sum of the log-softmax): with one
 * block per row a batch of one would read 152k logits on one SM.  Greedy
 * rows that want at most one alternative are then done: the argmax is the
 * token.
 *
 * Rows with logit adjustments (logit_bias and bans: the step's sparse
 * rlLogitAdj entries; penalties: the counts of the sequence's table, which
 * lives here and which the sampler adds each drawn token to, so a running
 * sequence sends nothing per step and nothing goes back to the host) are
 * adjusted by the same float operations in the same order as
 * kernels/cpu/sample.c (the _rn intrinsics keep nvcc from fusing them).
 * The row-stats pass computes the adjusted maximum beside the raw one from
 * the same read, so a greedy row costs one pass whatever it adjusts; only
 * a drawn (non-greedy) adjusted row gets an adjusted copy, which its draw
 * walks many times.  Logprobs and alternatives still come from the raw
 * row, the token from the adjusted one. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_math.cuh"
#include "kernels/cuda/cuda_reduce.cuh"

extern "C" {
#include "kernels/rng.h"
}

#define SAMPLE_THREADS 512
#define STATS_THREADS 256
#define STATS_MAX_CHUNKS 64
#define STATS_INVARIANT_CHUNKS 32   /* chunks of every row with --batch-invariant */
#define STATS_LOADS 8               /* logits a stats thread has in flight */

/* One chunk of one row: its largest logit (lowest id among ties) and
 * sum exp(l - max) in double; for a row drawn from adjusted logits, also
 * the largest adjusted logit and its id. */
struct RowStats {
    double sum;
    float max;
    int arg;
    float amax;
    int aarg;
};

/* (v, i) beats (w, j): larger value, ties to the lower id. */
static __device__ __forceinline__ bool arg_better(float v, int i, float w, int j) {
    return v > w || (v == w && (unsigned)i < (unsigned)j);
}

/* e^(a - b) in fp32, each step rounded on its own (no contracted
 * multiply-add: --batch-invariant runs these kernels). */
static __device__ __forceinline__ float exp_diff(float a, float b) {
    return ex2(__fmul_rn(__fsub_rn(a, b), 1.4426950408889634f));
}

/* The block's best (*v, *i), in every thread; sv / si: 32 slots of shared memory. */
static __device__ void block_argmax(float *v, int *i, float *sv, int *si) {
    for (int o = 16; o; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, *v, o);
        int j = __shfl_xor_sync(0xffffffffu, *i, o);
        if (arg_better(w, j, *v, *i)) *v = w, *i = j;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();   /* a previous call's readers are done with sv / si */
    if (lane == 0) sv[warp] = *v, si[warp] = *i;
    __syncthreads();
    *v = -INFINITY, *i = -1;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        if (arg_better(sv[w], si[w], *v, *i)) *v = sv[w], *i = si[w];
}

/* One token's logit after its bias and the penalties of its RL_PEN value
 * p: kernels/cpu/sample.c's sample_adjust_one, operation for operation. */
static __device__ __forceinline__ float adjust_one(float x, float bias, uint32_t p,
                                                   const rlRowSpec &sp) {
    const int count = (int)(p >> 1);
    x = __fadd_rn(x, bias);
    if (sp.repetition != 1.0f && p)
        x = x > 0.0f ? __fdiv_rn(x, sp.repetition) : __fmul_rn(x, sp.repetition);
    x = __fsub_rn(x, __fmul_rn(sp.frequency, (float)count));
    if (count > 0) x = __fsub_rn(x, sp.presence);
    return x;
}

/* A row drawn from adjusted logits: it samples, with entries or a table. */
static __device__ __forceinline__ bool row_adjusted(const rlRowSpec &sp) {
    return sp.sample && (sp.n_adj > 0 || sp.pen > 0);
}

/* The row's penalty table, or NULL. */
static __device__ __forceinline__ const uint32_t *row_pen(const uint32_t *pen,
                                                          const rlRowSpec &sp, int V) {
    return row_adjusted(sp) && sp.pen > 0 ? pen + (size_t)(sp.pen - 1) * V : NULL;
}

/* Adjusted rows read their adjusted logits on the fly: a token with no
 * entry is adjusted by its table's counts (if any) as it is read, the
 * chunk's listed ones (a bitmap in dynamic shared memory, one bit per id
 * of the chunk) from their entries after; so the raw and the adjusted
 * maxima come from one read of the row, and no adjusted copy is made. */
__global__ void __launch_bounds__(STATS_THREADS)
row_stats_kernel(const float *logits, const rlRowSpec *rows, const rlLogitAdj *adjs,
                 const uint32_t *pen, int V, int chunk, RowStats *stats) {
    extern __shared__ unsigned listed[];
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ double sd[32];
    const int row = blockIdx.y, b = blockIdx.x * chunk, e = min(V, b + chunk);
    const rlRowSpec sp = rows[row];
    const bool adj = row_adjusted(sp), lst = adj && sp.n_adj > 0;
    const uint32_t *pt = row_pen(pen, sp, V);
    if (lst) {
        for (int w = threadIdx.x; w < (e - b + 31) / 32; w += blockDim.x) listed[w] = 0;
        __syncthreads();
        for (int j = threadIdx.x; j < sp.n_adj; j += blockDim.x) {
            int id = adjs[sp.adj0 + j].id;
            if (id >= b && id < e) atomicOr(&listed[(id - b) >> 5], 1u << ((id - b) & 31));
        }
        __syncthreads();
    }
    const float *l = logits + (size_t)row * V;
    /* One read of the chunk: each thread keeps its largest logit and the sum
     * of exp(l - that largest) in fp32 (exp_diff), rescaled when the largest
     * moves (a few times a thread); the block adds the threads' sums in
     * double.  Each thread has STATS_LOADS logits in flight, so the pass
     * streams at the memory's rate (two passes with one load each in flight
     * and a double exp a logit: 0.30 ms for 256 rows of 152k on an H100,
     * PERF.md v35). */
    float best = -INFINITY, abest = -INFINITY, ts = 0.0f;
    int arg = -1, aarg = -1;
    for (int i0 = b + threadIdx.x; i0 < e; i0 += STATS_LOADS * blockDim.x) {
        float xs[STATS_LOADS];
#pragma unroll
        for (int u = 0; u < STATS_LOADS; u++) {
            const int i = i0 + u * blockDim.x;
            xs[u] = i < e ? l[i] : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < STATS_LOADS; u++) {
            const int i = i0 + u * blockDim.x;
            if (i >= e) break;
            float x = xs[u];
            if (arg_better(x, i, best, arg)) {
                if (x > best) ts = __fmul_rn(ts, exp_diff(best, x));
                best = x, arg = i;
            }
            if (x != -INFINITY) ts = __fadd_rn(ts, exp_diff(x, best));
            if (!adj || (lst && (listed[(i - b) >> 5] >> ((i - b) & 31) & 1u))) continue;
            if (pt) {
                uint32_t p = pt[i];
                if (p) x = adjust_one(x, 0.0f, p, sp);
            }
            if (arg_better(x, i, abest, aarg)) abest = x, aarg = i;
        }
    }
    for (int j = threadIdx.x; lst && j < sp.n_adj; j += blockDim.x) {
        const rlLogitAdj a = adjs[sp.adj0 + j];
        if (a.id < b || a.id >= e) continue;
        float x = adjust_one(l[a.id], a.bias, pt ? pt[a.id] : 0u, sp);
        if (arg_better(x, a.id, abest, aarg)) abest = x, aarg = a.id;
    }
    const float mine = best;
    block_argmax(&best, &arg, sv, si);
    if (adj) block_argmax(&abest, &aarg, sv, si);   /* adj is the same in the whole block */
    double s = mine != -INFINITY ? __dmul_rn((double)ts, exp((double)mine - best)) : 0.0;
    s = block_sum(s, sd);
    if (threadIdx.x == 0)
        stats[(size_t)row * gridDim.x + blockIdx.x] = RowStats{s, best, arg, abest, aarg};
}

/* A row whose penalty table starts over (a new sequence): cleared, then
 * its counts set.  One block per row. */
__global__ void __launch_bounds__(STATS_THREADS)
pen_fill_kernel(const rlRowSpec *rows, const rlPenFill *fills, uint32_t *pen, int V) {
    const rlRowSpec sp = rows[blockIdx.x];
    if (!row_adjusted(sp) || sp.pen <= 0 || !sp.pen_fill) return;
    uint32_t *pt = pen + (size_t)(sp.pen - 1) * V;
    for (int i = threadIdx.x; i < V; i += blockDim.x) pt[i] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < sp.n_fill; j += blockDim.x) {
        const rlPenFill f = fills[sp.fill0 + j];
        pt[f.id] = RL_PEN(f.count, f.in_prompt);
    }
}

/* Non-greedy adjusted rows are walked many times by the draw: each block
 * writes one chunk of such a row's adjusted copy (rl_sample_adjust's
 * rule: the table's counts, then the entries from the raw logits). */
__global__ void __launch_bounds__(STATS_THREADS)
adjust_kernel(const float *logits, int V, int chunk, const rlRowSpec *rows,
              const rlLogitAdj *adjs, const uint32_t *pen, float *adjusted) {
    const int row = blockIdx.y, b = blockIdx.x * chunk, e = min(V, b + chunk);
    const rlRowSpec sp = rows[row];
    if (!row_adjusted(sp) || sp.temperature <= 0.0f) return;
    const uint32_t *pt = row_pen(pen, sp, V);
    const float *l = logits + (size_t)row * V;
    float *out = adjusted + (size_t)row * V;
    for (int i = b + threadIdx.x; i < e; i += blockDim.x) {
        float x = l[i];
        if (pt) {
            uint32_t p = pt[i];
            if (p) x = adjust_one(x, 0.0f, p, sp);
        }
        out[i] = x;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < sp.n_adj; j += blockDim.x) {
        const rlLogitAdj a = adjs[sp.adj0 + j];
        if (a.id >= b && a.id < e) out[a.id] = adjust_one(l[a.id], a.bias, pt ? pt[a.id] : 0u, sp);
    }
}

/* Float order as unsigned order. */
static __device__ __forceinline__ uint32_t okey(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Token i is kept when (key > tk, or key == tk and i < tid) and q_i >= qmin
 * (min-p; q falls with the key, so this too keeps a prefix). */
struct Kept {
    uint32_t tk;
    int tid;
    double qmin;
};

static __device__ __forceinline__ bool kept_has(Kept k, uint32_t key, int i, double qi) {
    return (key > k.tk || (key == k.tk && i < k.tid)) && qi >= k.qmin;
}

/* q_i when the row has masses, else 1 (the keys-only selections). */
static __device__ __forceinline__ double q_at(const double *q, int i) { return q ? q[i] : 1.0; }

/* The smaller of two nested prefixes (qmin kept from a). */
static __device__ __forceinline__ Kept kept_min(Kept a, Kept b) {
    Kept r = a.tk != b.tk ? (a.tk > b.tk ? a : b) : (a.tid < b.tid ? a : b);
    r.qmin = a.qmin;
    return r;
}

struct SampleShm {
    unsigned hist[256];
    double mass[256];
    double redd[32];
    int scan[32];
    uint32_t prefix;
    int rem;
    double crem;
    int strict;
    int id;
    int n_found;
    int top_id[RL_MAX_TOP];
    float top_val[RL_MAX_TOP];
};

/* Exclusive prefix sum of v over the block's threads (in thread order). */
static __device__ int block_exclusive_scan(int v, SampleShm *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    __syncthreads();
    if (lane == 31) sh->scan[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        int w = lane < nw ? sh->scan[lane] : 0, wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += y;
        }
        if (lane < nw) sh->scan[lane] = wi - w;
    }
    __syncthreads();
    return sh->scan[warp] + inc - v;
}

/* The id of the r-th (1-based) kept token with key kv, counting by id. */
static __device__ int nth_equal(const float *x, const double *q, int V, Kept kept, uint32_t kv,
                                int r, SampleShm *sh) {
    int C = (V + blockDim.x - 1) / blockDim.x, b = threadIdx.x * C, e = min(V, b + C);
    int cnt = 0;
    for (int i = b; i < e; i++) {
        uint32_t k = okey(x[i]);
        cnt += k == kv && kept_has(kept, k, i, q_at(q, i));
    }
    if (threadIdx.x == 0) sh->id = -1;
    int before = block_exclusive_scan(cnt, sh);
    if (before < r && r <= before + cnt) {
        int want = r - before;
        for (int i = b; i < e; i++) {
            uint32_t k = okey(x[i]);
            if (k == kv && kept_has(kept, k, i, q_at(q, i)) && --want == 0) {
                sh->id = i;
                break;
            }
        }
    }
    __syncthreads();
    int id = sh->id;
    __syncthreads();   /* the next call resets sh->id */
    return id;
}

/* The key of the n-th largest kept token (n >= 1, at most the kept count);
 * *need: how many tokens of exactly that key the n largest include. */
static __device__ uint32_t select_nth(const float *x, int V, Kept kept, int n, int *need,
                                      SampleShm *sh) {
    /* Callers select before min-p applies: kept needs no masses here. */
    uint32_t prefix = 0, mask = 0;
    int rem = n;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) sh->hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            uint32_t k = okey(x[i]);
            if ((k & mask) == prefix && kept_has(kept, k, i, 1.0))
                atomicAdd(&sh->hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255;
            for (; b > 0 && (int)sh->hist[b] < rem; b--) rem -= sh->hist[b];
            sh->prefix = prefix | ((uint32_t)b << shift);
            sh->rem = rem;
        }
        __syncthreads();
        prefix = sh->prefix;
        rem = sh->rem;
        mask |= 255u << shift;
    }
    *need = rem;
    return prefix;
}

/* Where mass c falls in the kept tokens ordered by logit descending then id:
 * the token j with before(j) <= c < before(j) + q_j (strict), or
 * before(j) < c <= before(j) + q_j (not strict: the last token top-p keeps).
 * Rounding that puts c past the end gives the last kept token.  Tokens of
 * one logit share one q = exp((l - mx) * inv_t). */
static __device__ int find_mass(const float *l, const double *q, int V, Kept kept, double c,
                                bool strict, float mx, double inv_t, SampleShm *sh) {
    uint32_t prefix = 0, mask = 0;
    if (threadIdx.x == 0) sh->strict = strict;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) sh->mass[b] = 0, sh->hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            uint32_t k = okey(l[i]);
            if ((k & mask) == prefix && kept_has(kept, k, i, q[i])) {
                atomicAdd(&sh->mass[(k >> shift) & 255], q[i]);
                atomicAdd(&sh->hist[(k >> shift) & 255], 1u);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255, last = -1;
            for (; b >= 0; b--) {
                if (!sh->hist[b]) continue;
                last = b;
                double mb = sh->mass[b];
                if (sh->strict ? c < mb : c <= mb) break;
                c -= mb;
            }
            if (b < 0) {          /* past the end: stay on the last non-empty bucket */
                b = last < 0 ? 0 : last;
                c = sh->mass[b];
                sh->strict = 0;
            }
            sh->prefix = prefix | ((uint32_t)b << shift);
            sh->crem = c;
        }
        __syncthreads();
        prefix = sh->prefix;
        c = sh->crem;
        mask |= 255u << shift;
    }
    strict = sh->strict;
    /* prefix is now one exact key; its tokens each weigh qv, in id order. */
    unsigned n_eq = sh->hist[prefix & 255];
    float lv = __uint_as_float(prefix & 0x80000000u ? prefix & 0x7fffffffu : ~prefix);
    double qv = exp(((double)lv - mx) * inv_t);
    int r;
    if (qv <= 0) r = (int)n_eq;
    else if (strict) r = (int)floor(c / qv) + 1;
    else r = (int)ceil(c / qv);
    r = max(1, min(r, (int)n_eq));
    __syncthreads();
    return nth_equal(l, q, V, kept, prefix, r, sh);
}

/* The best (value, id) of a row's chunks (the adjusted ones when adj) and,
 * when sum, the exp sum relative to it. */
static __device__ void row_combine(const RowStats *rs, int n_chunks, bool adj, float *mx,
                                   int *arg, double *sum) {
    *mx = -INFINITY, *arg = -1;
    for (int z = 0; z < n_chunks; z++) {
        float v = adj ? rs[z].amax : rs[z].max;
        int i = adj ? rs[z].aarg : rs[z].arg;
        if (arg_better(v, i, *mx, *arg)) *mx = v, *arg = i;
    }
    if (!sum) return;
    double se = 0;
    for (int z = 0; z < n_chunks; z++)
        if (rs[z].max != -INFINITY) se += rs[z].sum * exp((double)rs[z].max - *mx);
    *sum = se;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *logits, const float *adjusted, int V, const rlRowSpec *rows,
              const RowStats *stats, int n_chunks, double *qbuf, uint32_t *pen,
              rlRowResult *results) {
    __shared__ SampleShm sh;
    const int row = blockIdx.x;
    const float *l = logits + (size_t)row * V;
    double *q = qbuf + (size_t)row * V;
    const rlRowSpec spec = rows[row];
    rlRowResult res;
    memset(&res, 0, sizeof res);
    res.token = -1;

    const RowStats *rs = stats + (size_t)row * n_chunks;
    float mx;
    int arg;
    double se;
    row_combine(rs, n_chunks, false, &mx, &arg, &se);
    const double log_z = mx + log(se);
    if (spec.target >= 0 && spec.target < V) res.target_logprob = (float)(l[spec.target] - log_z);

    /* The logits the token is drawn from: the adjusted ones, unless every
     * token is banned (then the raw row, as on the CPU); a greedy row needs
     * only their argmax, a drawn one their copy. */
    const float *la = l;
    float amx = mx;
    int aarg = arg;
    if (row_adjusted(spec)) {
        float m;
        int a;
        row_combine(rs, n_chunks, true, &m, &a, NULL);
        if (m != -INFINITY) {
            amx = m, aarg = a;
            if (spec.temperature > 0.0f) la = adjusted + (size_t)row * V;
        }
    }

    const Kept all = {0u, 0x7fffffff, 0.0};
    const bool greedy = spec.sample && spec.temperature <= 0.0f;
    if (greedy) res.token = aarg;
    int n_top = min(max(spec.n_top, 0), min(RL_MAX_TOP, V));
    if (n_top == 1 && arg >= 0) {
        res.n_top = 1;
        res.top_ids[0] = arg, res.top_logprobs[0] = (float)(mx - log_z);
    } else if (n_top > 0) {
        int need;
        uint32_t kth = select_nth(l, V, all, n_top, &need, &sh);
        int tie_id = nth_equal(l, NULL, V, all, kth, need, &sh);
        Kept top = {kth, tie_id + 1, 0.0};
        if (threadIdx.x == 0) sh.n_found = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (kept_has(top, okey(l[i]), i, 1.0)) {
                int slot = atomicAdd(&sh.n_found, 1);
                if (slot < RL_MAX_TOP) sh.top_id[slot] = i, sh.top_val[slot] = l[i];
            }
        __syncthreads();
        if (threadIdx.x == 0) {
            int n = min(sh.n_found, RL_MAX_TOP);
            for (int a = 1; a < n; a++)   /* insertion sort: value desc, id asc */
                for (int b = a; b > 0; b--) {
                    bool before = sh.top_val[b] > sh.top_val[b - 1] ||
                                  (sh.top_val[b] == sh.top_val[b - 1] && sh.top_id[b] < sh.top_id[b - 1]);
                    if (!before) break;
                    int ti = sh.top_id[b]; sh.top_id[b] = sh.top_id[b - 1]; sh.top_id[b - 1] = ti;
                    float tv = sh.top_val[b]; sh.top_val[b] = sh.top_val[b - 1]; sh.top_val[b - 1] = tv;
                }
        }
        __syncthreads();
        res.n_top = n_top;
        for (int a = 0; a < n_top; a++) {
            res.top_ids[a] = sh.top_id[a];
            res.top_logprobs[a] = (float)(sh.top_val[a] - log_z);
        }
    }

    if (spec.sample && !greedy) {
        const double inv_t = 1.0 / (double)spec.temperature;
        for (int i = threadIdx.x; i < V; i += blockDim.x) q[i] = exp(((double)la[i] - amx) * inv_t);
        __syncthreads();
        Kept kept = all;
        if (spec.top_k > 0 && spec.top_k < V) {
            int need;
            uint32_t kth = select_nth(la, V, all, spec.top_k, &need, &sh);
            kept = {kth, nth_equal(la, NULL, V, all, kth, need, &sh) + 1, 0.0};
        }
        if (spec.top_p < 1.0f) {
            double z = 0;
            for (int i = threadIdx.x; i < V; i += blockDim.x)
                if (kept_has(kept, okey(la[i]), i, q[i])) z += q[i];
            z = block_sum(z, sh.redd);
            int last = find_mass(la, q, V, kept, (double)spec.top_p * z, false, amx, inv_t, &sh);
            kept = kept_min(kept, Kept{okey(la[last]), last + 1, 0.0});
        }
        /* The most likely token has q = 1, so min-p's floor is min_p itself. */
        kept.qmin = spec.min_p > 0.0f ? (double)spec.min_p : 0.0;
        double z = 0;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (kept_has(kept, okey(la[i]), i, q[i])) z += q[i];
        z = block_sum(z, sh.redd);
        double u = rl_uniform(spec.seed, spec.sample_index, spec.step);
        res.token = find_mass(la, q, V, kept, u * z, true, amx, inv_t, &sh);
    }
    if (res.token >= 0) res.token_logprob = (float)(l[res.token] - log_z);
    if (threadIdx.x == 0) {
        results[row] = res;
        if (row_adjusted(spec) && spec.pen > 0 && res.token >= 0)
            pen[(size_t)(spec.pen - 1) * V + res.token] += RL_PEN(1, 0);
    }
}

/* Room for penalty tables 1..n of V ids, those there kept. */
static int pen_grow(rlCuda *c, int n, int V) {
    if (V != c->pen_vocab) c->pen_n = 0;    /* tables of another vocabulary: none kept */
    if (n <= c->pen_n) return 0;
    int cap = n > 2 * c->pen_n ? n : 2 * c->pen_n;
    size_t row = (size_t)V * sizeof(uint32_t);
    uint32_t *p = NULL;
    if (cuda_check(c, cudaMalloc((void **)&p, cap * row), "sample: penalty tables")) return -1;
    if (c->pen_n)
        cuda_check(c, cudaMemcpyAsync(p, c->pen, c->pen_n * row, cudaMemcpyDeviceToDevice,
                                      c->stream), "sample: penalty tables");
    cuda_check(c, cudaMemsetAsync((char *)p + c->pen_n * row, 0, (cap - c->pen_n) * row,
                                  c->stream), "sample: penalty tables");
    cuda_check(c, cudaStreamSynchronize(c->stream), "sample: penalty tables");
    cudaFree(c->pen);
    c->pen = p, c->pen_n = cap, c->pen_vocab = V;
    return c->err.code != RL_OK;
}

/* The most ids one stats block covers: its bitmap of listed ids stays
 * within 32 KiB of shared memory. */
#define STATS_MAX_CHUNK (32768 * 8)

int cuda_sample(rlBackend *be, const float *logits, int vocab, int row0, int n, rlRowResult *out,
                rlError *err) {
    rlCuda *c = cuda_of(be);
    cudaSetDevice(c->device);
    const rlRowSpec *rows = c->d_rows + row0;
    /* Enough blocks over all rows to fill the GPU twice; with
     * --batch-invariant a fixed count, since a row's exp sum adds its chunks'
     * sums in chunk order (and each chunk's in its block's order). */
    int chunks = c->invariant ? STATS_INVARIANT_CHUNKS
                 : n > 0      ? (2 * c->sm_count + n - 1) / n
                              : 1;
    if (chunks > STATS_MAX_CHUNKS) chunks = STATS_MAX_CHUNKS;
    if (chunks < (vocab + STATS_MAX_CHUNK - 1) / STATS_MAX_CHUNK)
        chunks = (vocab + STATS_MAX_CHUNK - 1) / STATS_MAX_CHUNK;
    int chunk = (vocab + chunks - 1) / chunks;
    chunks = (vocab + chunk - 1) / chunk;
    size_t listed_bytes = c->n_adjs > 0 ? (size_t)(chunk + 31) / 32 * 4 : 0;
    /* Non-greedy rows with adjustments: their adjusted copies after the q
     * buffer in scratch. */
    size_t stats_bytes = (size_t)n * chunks * sizeof(RowStats);
    size_t q_bytes = (size_t)n * vocab * sizeof(double);
    size_t copy_bytes = c->adj_copy_rows ? (size_t)n * vocab * sizeof(float) : 0;
    if (n > c->results_cap) {
        cuda_check(c, cudaStreamSynchronize(c->stream), "sample");
        cudaFree(c->d_results);
        cudaFreeHost(c->h_results);
        c->d_results = NULL;
        c->h_results = NULL;
        c->results_cap = 0;
        if (cuda_check(c, cudaMalloc((void **)&c->d_results, n * sizeof(rlRowResult)), "sample") ||
            cuda_check(c, cudaMallocHost((void **)&c->h_results, n * sizeof(rlRowResult)), "sample"))
            goto done;
        c->results_cap = n;
    }
    if (n > 0 && stats_bytes > c->stats_cap) {
        cuda_check(c, cudaStreamSynchronize(c->stream), "sample");
        cudaFree(c->stats);
        c->stats = NULL;
        c->stats_cap = 0;
        if (!cuda_check(c, cudaMalloc(&c->stats, stats_bytes * 2), "sample"))
            c->stats_cap = stats_bytes * 2;
    }
    if (n > 0 && c->pen_max > 0 && pen_grow(c, c->pen_max, vocab)) goto done;
    if (n > 0 && c->stats && !cuda_scratch(c, q_bytes + copy_bytes, "sample")) {
        RowStats *stats = (RowStats *)c->stats;
        float *adjusted = copy_bytes ? (float *)((char *)c->scratch + q_bytes) : NULL;
        if (c->pen_fill) {
            PROF(c, "sample: penalty tables");
            pen_fill_kernel<<<n, STATS_THREADS, 0, c->stream>>>(rows, c->d_pen_fills, c->pen,
                                                               vocab);
            cuda_launched(c, "sample");
        }
        PROF(c, "sample: row stats");
        row_stats_kernel<<<dim3(chunks, n), STATS_THREADS, listed_bytes, c->stream>>>(
            logits, rows, c->d_adjs, c->pen, vocab, chunk, stats);
        cuda_launched(c, "sample");
        if (adjusted) {
            PROF(c, "sample: adjusted copies");
            adjust_kernel<<<dim3(chunks, n), STATS_THREADS, 0, c->stream>>>(
                logits, vocab, chunk, rows, c->d_adjs, c->pen, adjusted);
            cuda_launched(c, "sample");
        }
        PROF(c, "sample");
        sample_kernel<<<n, SAMPLE_THREADS, 0, c->stream>>>(logits, adjusted, vocab, rows,
                                                           stats, chunks, (double *)c->scratch,
                                                           c->pen, c->d_results);
        cuda_launched(c, "sample");
        cuda_check(c, cudaMemcpyAsync(c->h_results, c->d_results, n * sizeof(rlRowResult),
                                      cudaMemcpyDeviceToHost, c->stream), "sample");
    }
done:
    cuda_check(c, cudaStreamSynchronize(c->stream), "sample");
    if (c->err.code != RL_OK) {
        if (err) *err = c->err;
        c->err.code = RL_OK;
        return -1;
    }
    if (n > 0) memcpy(out, c->h_results, n * sizeof(rlRowResult));
    return 0;
}

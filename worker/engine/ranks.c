/* ranks.c: the model over a TP x PP layout of ranks, as threads of this process.
 *
 * Rank i is stage i / tp, tensor rank i % tp, on device devices[i]: adjacent
 * devices form a TP group (see worker/engine/layout.c).  Each rank owns a backend, a
 * shard plan, the model's slice and its communicators, and runs in its own
 * thread, because a CUDA device and an NCCL communicator belong to the thread
 * that set them up.  A 1x1 layout has no thread: the model runs in the
 * caller's thread, with no hop and no communicator, unless the options ask
 * for a thread (a GPU: the device computes a step while the caller plans the
 * next one and applies the last one's results) or for collectives always;
 * then it runs like any other layout, on a rank thread, with communicators
 * of one rank only for the collectives, which is how one GPU checks the NCCL
 * path.
 *
 * Work reaches the rank threads as a queue of micro-batches.  A step is cut
 * into micro-batches of whole sequences; every rank runs every micro-batch in
 * queue order (stages hand activations on with send/recv inside
 * rl_model_forward), so while stage 1 works on micro-batch 0, stage 0 already
 * runs micro-batch 1.  Because the queue outlives a step, ranks_submit can
 * also put the next step (of other sequences) in flight before the last one
 * finished, which is what keeps every stage busy in steady state: within one
 * step alone a pipeline of p stages and k micro-batches idles (p-1)/(k+p-1)
 * of the time (kernels/COSTMODEL.md).  The last stage samples; its first TP
 * rank reports the results. */
#include "worker/engine/ranks.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/comm.h"
#include "kernels/gpuinfo.h"
#include "kernels/shard.h"
#include "worker/lib/now.h"

/* Micro-batches queued at once; ranks_submit waits while the queue is full. */
#define RANKS_QUEUE 64

/* On GPUs a waiting thread spins this long before it sleeps on the
 * condition variable: the caller waits out each step's device time, the
 * rank thread the caller's planning of the next, and waking a thread that
 * slept costs each decode step ~70 us (two wake-ups of idle cores,
 * kernels/PERF.md v37-v38) against a core kept busy meanwhile, as CUDA's
 * own stream synchronisation does.  CPU ranks never spin: their cores
 * compute. */
#define RANKS_SPIN_S 0.020

typedef struct ranksItem {
    rlBatch b;              /* the micro-batch, pointing into the caller's arrays */
    int32_t *seq_start;     /* rebased to the micro-batch's first token */
    rlRowSpec *rows;        /* rows rebased likewise */
    int32_t *row_map;       /* micro-batch row -> index into out */
    rlRowResult *res;       /* the last stage's results before scattering */
    rlRowResult *out;       /* the caller's results */
    int remaining;          /* ranks that have not run it yet */
} ranksItem;

typedef struct ranksRank {
    struct rlRanks *r;
    int index;
    rlShard shard;
    rlBackend *be;
    rlComm *tp, *pp;
    rlModel model;
    int model_ready;
    rlRowResult *scratch;   /* results of ranks that do not report */
    pthread_t thread;
    int started;
    uint64_t next;          /* the queue position this rank runs next */
} ranksRank;

struct rlRanks {
    rlRanksOptions o;
    int n;
    int threaded;           /* ranks run on their own threads (n > 1 or collectives always) */
    int partition[64];
    int devices[64];
    ranksRank *ranks;
    rlCommSet *comms;
    pthread_mutex_t src_mu; /* tensor lookups are made from every rank thread */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    ranksItem queue[RANKS_QUEUE];
    /* Items [head, tail) are queued; head is the oldest unfinished.  Written
     * under mu; atomic so a spinning thread may read them without it. */
    _Atomic uint64_t head, tail;
    double spin_s;          /* RANKS_SPIN_S on GPUs, 0 on CPU ranks */
    int starting;           /* ranks still setting up */
    int met[2];             /* ranks arrived at each set-up meeting point */
    long long meet_min[2];  /* the smallest value brought to it */
    int n_blocks;           /* KV blocks every rank holds */
    int quit;
    int failed;             /* a rank failed: the ranks are out of step for good */
    rlError err;            /* the first failure */
};

static int ranks_reporter(const rlRanks *r) { return (r->o.pp - 1) * r->o.tp; }

/* Spin, without the mutex and yielding the core to anything runnable, until
 * *v reaches target or r->spin_s passes.  Only a shortcut: the caller then
 * takes the mutex and waits on the condition variable as before, which also
 * covers quitting and failures (a failed layout still drains its queue, so
 * head keeps moving). */
static void ranks_spin(const rlRanks *r, const _Atomic uint64_t *v, uint64_t target) {
    if (!r->spin_s || atomic_load(v) >= target) return;
    double until = now_s() + r->spin_s;
    for (unsigned i = 1; atomic_load(v) < target; i++) {
        if (i % 64 == 0 && now_s() > until) return;
        sched_yield();
    }
}

static void ranks_item_free(ranksItem *it) {
    free(it->seq_start);
    free(it->rows);
    free(it->row_map);
    free(it->res);
    memset(it, 0, sizeof(*it));
}

/* Lookups go through one lock: a checkpoint reader need not be thread-safe. */
static int ranks_lookup(void *ctx, const char *name, rlTensorView *out, rlError *err) {
    rlRanks *r = ctx;
    pthread_mutex_lock(&r->src_mu);
    int rc = r->o.src(r->o.src_ctx, name, out, err);
    pthread_mutex_unlock(&r->src_mu);
    return rc;
}

static int ranks_cpu_threads(const rlRanks *r) {
    int total = r->o.threads > 0 ? r->o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int each = total / r->n;
    return each > 0 ? each : 1;
}

/* Set-up meeting points: every rank brings a value and all leave with the
 * smallest, or with an error when any rank failed.  Point 0 follows backend
 * creation, so a rank that cannot even open its device (missing, busy, no
 * driver) stops the set-up before the others block in NCCL's init waiting
 * for it; its own error is the one ranks_open reports.  Point 1 agrees on
 * the KV blocks every rank can hold once its weights are loaded. */
enum { RANKS_MEET_BACKENDS, RANKS_MEET_KV };

static int ranks_meet(rlRanks *r, int point, long long v, long long *min, rlError *err) {
    pthread_mutex_lock(&r->mu);
    if (r->met[point] == 0 || v < r->meet_min[point]) r->meet_min[point] = v;
    r->met[point]++;
    pthread_cond_broadcast(&r->cv);
    while (r->met[point] < r->n && !r->failed) pthread_cond_wait(&r->cv, &r->mu);
    int failed = r->failed;
    if (min) *min = r->meet_min[point];
    pthread_mutex_unlock(&r->mu);
    return failed ? rl_error(err, RL_EINTERNAL, "stopped because another rank failed to start")
                  : 0;
}

/* KV blocks this rank's device holds after its weights (n_blocks = 0). */
static int rank_kv_capacity(ranksRank *k, long long *cap, rlError *err) {
    const rlRanksOptions *o = &k->r->o;
    size_t per_block = rl_model_kv_bytes_per_token(&o->cfg, &k->shard, k->be->act_dtype) *
                       (size_t)o->block_size;
    *cap = 1LL << 30; /* a rank with no KV heads holds any number */
    if (!per_block) return 0;
    if (!k->be->ops->kv_capacity)
        return rl_error(err, RL_EUSAGE, "the %s backend cannot size its KV cache from free "
                        "memory; give the number of KV blocks (--kv-cache-memory)",
                        k->be->ops->name);
    int n = 0;
    double util = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.90;
    if (k->be->ops->kv_capacity(k->be, per_block, o->block_size, 1, util, &n, err)) return -1;
    *cap = n;
    return 0;
}

static int rank_setup(ranksRank *k, rlError *err) {
    rlRanks *r = k->r;
    const rlRanksOptions *o = &r->o;
    int cuda = o->backend && !strcmp(o->backend, "cuda");
    rlBackendOptions bo = {
        .threads = ranks_cpu_threads(r),
        .device = r->devices[k->index],
        .dtype = o->dtype,
        .batch_invariant = o->batch_invariant,
        .eager = o->eager,
    };
    k->be = cuda ? rl_backend_cuda_create(&bo, err) : rl_backend_cpu_create(&bo, err);
    if (!k->be) return -1;
    if (r->n > 1 && ranks_meet(r, RANKS_MEET_BACKENDS, 0, NULL, err)) return -1;
    if (r->comms && r->comms->ops->join(r->comms, k->index, &k->tp, &k->pp, err)) return -1;
    rlTensorLookup src = o->src ? (r->n > 1 ? ranks_lookup : o->src) : NULL;
    void *src_ctx = r->n > 1 ? (void *)r : o->src_ctx;
    if (rl_model_init(&k->model, &o->cfg, &k->shard, k->be, k->tp, k->pp, src, src_ctx,
                      o->dummy_seed, o->max_tokens, o->max_rows, err))
        return -1;
    k->model_ready = 1;
    if (o->batch_invariant && rl_model_invariant_reduce(&k->model, err)) return -1;
    long long n_blocks = o->n_blocks;
    if (n_blocks == 0) {
        /* A failure here reaches ranks_fail in rank_main, which releases
         * the others from the meeting. */
        if (rank_kv_capacity(k, &n_blocks, err)) return -1;
        if (r->n > 1 && ranks_meet(r, RANKS_MEET_KV, n_blocks, &n_blocks, err)) return -1;
        r->n_blocks = (int)n_blocks; /* the same value from every rank */
    }
    if (k->be->ops->kv_init(k->be, k->shard.n_layers, (int)n_blocks, o->block_size,
                            k->shard.n_kv_heads, o->cfg.head_dim, err))
        return rl_error_wrap(err, "KV cache of %lld blocks x %d tokens", n_blocks,
                             o->block_size);
    k->scratch = calloc((size_t)(o->max_rows > 0 ? o->max_rows : 1), sizeof(*k->scratch));
    if (!k->scratch) return rl_error(err, RL_EMEMORY, "out of host memory for logit rows");
    return 0;
}

static void rank_teardown(ranksRank *k) {
    if (k->model_ready) rl_model_free(&k->model);
    k->model_ready = 0;
    if (k->be) k->be->ops->destroy(k->be);
    k->be = NULL;
    free(k->scratch);
    k->scratch = NULL;
}

/* Record the first failure and stop every rank waiting in a collective. */
static void ranks_fail(rlRanks *r, const rlError *err) {
    pthread_mutex_lock(&r->mu);
    if (!r->failed) {
        r->failed = 1;
        r->err = *err;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->comms) r->comms->ops->abort(r->comms);
}

/* A failure names its rank where there are ranks to tell apart (or
 * collectives to blame); a lone rank on its own thread speaks as the
 * caller's would. */
static int rank_named(const ranksRank *k) { return k->r->comms != NULL; }

static int rank_run(ranksRank *k, ranksItem *it, rlError *err) {
    rlRanks *r = k->r;
    int reporter = k->index == ranks_reporter(r);
    if (rl_model_forward(&k->model, &it->b, reporter ? it->res : k->scratch, err))
        return rank_named(k) ? rl_error_wrap(err, "rank %d (stage %d, tensor rank %d)", k->index,
                                             k->shard.pp_rank, k->shard.tp_rank)
                             : -1;
    if (reporter)
        for (int i = 0; i < it->b.n_rows; i++) it->out[it->row_map[i]] = it->res[i];
    return 0;
}

static void *rank_main(void *arg) {
    ranksRank *k = arg;
    rlRanks *r = k->r;
    rlError err = {0};
    int ok = rank_setup(k, &err) == 0;
    if (!ok) {
        if (rank_named(k))
            rl_error_wrap(&err, "setting up rank %d (stage %d, tensor rank %d)", k->index,
                          k->shard.pp_rank, k->shard.tp_rank);
        ranks_fail(r, &err);
    }
    pthread_mutex_lock(&r->mu);
    r->starting--;
    pthread_cond_broadcast(&r->cv);
    for (;;) {
        if (k->next == r->tail && !r->quit) {
            pthread_mutex_unlock(&r->mu);
            ranks_spin(r, &r->tail, k->next + 1);
            pthread_mutex_lock(&r->mu);
        }
        while (k->next == r->tail && !r->quit) pthread_cond_wait(&r->cv, &r->mu);
        if (k->next == r->tail) break; /* quitting with nothing queued */
        ranksItem *it = &r->queue[k->next % RANKS_QUEUE];
        int skip = r->failed;
        pthread_mutex_unlock(&r->mu);
        /* After a failure the queue is drained without running it. */
        if (!skip && rank_run(k, it, &err)) ranks_fail(r, &err);
        pthread_mutex_lock(&r->mu);
        k->next++;
        if (--it->remaining == 0) {
            ranks_item_free(it);
            while (r->head < r->tail && r->queue[r->head % RANKS_QUEUE].remaining == 0) r->head++;
            pthread_cond_broadcast(&r->cv);
        }
    }
    pthread_mutex_unlock(&r->mu);
    /* Device memory is freed by the thread whose device it is. */
    rank_teardown(k);
    return NULL;
}

static void ranks_print(const rlRanks *r, const rlShard *plan) {
    fprintf(stderr, "redlm: tp %d x pp %d layout, %s ranks\n", r->o.tp, r->o.pp,
            r->o.backend ? r->o.backend : "cpu");
    rl_shard_print(stderr, &r->o.cfg, plan, r->o.tp, r->o.pp, r->o.dtype, r->o.dtype);
}

/* A TP group all-reduces twice per layer: over PCIe or between sockets that
 * costs more than the split saves, so say so before the weights load. */
static void ranks_warn_links(const rlRanks *r) {
    for (int s = 0; s < r->o.pp; s++)
        for (int a = 0; a < r->o.tp; a++)
            for (int b = a + 1; b < r->o.tp; b++) {
                int da = r->devices[s * r->o.tp + a], db = r->devices[s * r->o.tp + b];
                if (rl_gpu_link_fast(da, db) != 0) continue;
                char link[16];
                rl_gpu_link_name(rl_gpu_link(da, db), link, sizeof(link));
                fprintf(stderr, "redlm: warning: the TP group of stage %d spans GPU %d and GPU %d "
                        "over a %s link, not NVLink: its all-reduces will be slow. Order "
                        "--devices so that NVLink peers are adjacent (`redlm doctor` shows the "
                        "topology)\n", s, da, db, link);
            }
}

void ranks_close(rlRanks *r) {
    if (!r) return;
    if (r->threaded) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < r->n; i++)
            if (r->ranks[i].started) pthread_join(r->ranks[i].thread, NULL);
    }
    for (int i = 0; r->ranks && i < r->n; i++) rank_teardown(&r->ranks[i]);
    for (uint64_t q = r->head; q < r->tail; q++) ranks_item_free(&r->queue[q % RANKS_QUEUE]);
    if (r->comms) r->comms->ops->destroy(r->comms);
    free(r->ranks);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->src_mu);
    free(r);
}

static rlCommSet *ranks_comms(const rlRanksOptions *o, rlError *err) {
    rlCommSet *s;
    if (o->backend && !strcmp(o->backend, "cuda")) {
#ifdef RL_HAVE_CUDA
        s = rl_comm_nccl_create(o->tp, o->pp, o->devices, o->nccl_timeout_s, err);
#else
        rl_error(err, RL_EDEVICE, "this redlm was built without CUDA, so it has no NCCL for a "
                 "%d x %d layout of GPU ranks; rebuild with nvcc, or use --backend cpu",
                 o->tp, o->pp);
        return NULL;
#endif
    } else {
        s = rl_comm_shm_create(o->tp, o->pp, err);
    }
    if (s) s->every_group = o->collectives;
    return s;
}

rlRanks *ranks_open(const rlRanksOptions *o, rlError *err) {
    if (o->tp < 1 || o->pp < 1 || o->tp * o->pp > 64) {
        rl_error(err, RL_EUSAGE, "a layout needs 1 to 64 ranks (--tp %d x --pp %d)", o->tp, o->pp);
        return NULL;
    }
    rlRanks *r = calloc(1, sizeof(*r));
    if (!r) {
        rl_error(err, RL_EMEMORY, "out of host memory");
        return NULL;
    }
    r->o = *o;
    r->n = o->tp * o->pp;
    r->threaded = r->n > 1 || o->collectives || o->thread;
    r->spin_s = o->backend && strcmp(o->backend, "cpu") ? RANKS_SPIN_S : 0;
    r->n_blocks = o->n_blocks;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_mutex_init(&r->src_mu, NULL);
    if (o->pp_partition) {
        memcpy(r->partition, o->pp_partition, sizeof(int) * (size_t)o->pp);
        r->o.pp_partition = r->partition;
    }
    for (int i = 0; i < r->n; i++) r->devices[i] = o->devices ? o->devices[i] : i;
    r->o.devices = r->devices;
    r->ranks = calloc((size_t)r->n, sizeof(*r->ranks));
    rlShard *plan = calloc((size_t)r->n, sizeof(*plan));
    if (!r->ranks || !plan) {
        free(plan);
        rl_error(err, RL_EMEMORY, "out of host memory");
        goto fail;
    }
    if (rl_shard_plan(&o->cfg, o->tp, o->pp, r->o.pp_partition, plan, err)) {
        free(plan);
        goto fail;
    }
    for (int i = 0; i < r->n; i++) r->ranks[i] = (ranksRank){.r = r, .index = i, .shard = plan[i]};
    if (!o->quiet) ranks_print(r, plan);
    if (o->backend && !strcmp(o->backend, "cuda") && o->tp > 1) ranks_warn_links(r);
    free(plan);

    if (!r->threaded) {
        if (rank_setup(&r->ranks[0], err)) goto fail;
        return r;
    }

    if ((r->n > 1 || o->collectives) && !(r->comms = ranks_comms(&r->o, err))) goto fail;
    r->starting = r->n;
    for (int i = 0; i < r->n; i++) {
        if (pthread_create(&r->ranks[i].thread, NULL, rank_main, &r->ranks[i])) {
            rlError e;
            rl_error(&e, RL_EINTERNAL, "cannot start the thread of rank %d", i);
            pthread_mutex_lock(&r->mu);
            r->starting -= r->n - i;
            pthread_mutex_unlock(&r->mu);
            ranks_fail(r, &e);
            break;
        }
        r->ranks[i].started = 1;
    }
    pthread_mutex_lock(&r->mu);
    while (r->starting > 0) pthread_cond_wait(&r->cv, &r->mu);
    int failed = r->failed;
    if (failed && err) *err = r->err;
    pthread_mutex_unlock(&r->mu);
    if (failed) goto fail;
    return r;

fail:
    ranks_close(r);
    return NULL;
}

/* How many micro-batches to cut a step into.  More micro-batches shrink the
 * pipeline's fill and drain ((p-1)/(k+p-1) idle) but each re-reads the
 * stage's weights, which on a GPU costs as much as a decode step's whole
 * compute: cut only when the micro-batches stay big enough to be
 * compute-bound (COSTMODEL.md), and always on CPU ranks, which are. */
static int ranks_micro_count(const rlRanks *r, const rlBatch *b) {
    if (r->o.pp == 1) return 1;
    int k = r->o.micro_batches;
    if (k <= 0) {
        int cuda = r->o.backend && !strcmp(r->o.backend, "cuda");
        k = 2 * r->o.pp;
        if (cuda && b->n_tokens / k < 256) k = b->n_tokens / 256 > 1 ? b->n_tokens / 256 : 1;
    }
    return k < b->n_seqs ? k : b->n_seqs;
}

/* Fill it with sequences [s0, s1) of b. */
static int ranks_item_make(ranksItem *it, const rlBatch *b, rlRowResult *out, int s0, int s1,
                           int remaining, rlError *err) {
    memset(it, 0, sizeof(*it));
    int t0 = b->seq_start[s0], t1 = b->seq_start[s1], ns = s1 - s0, nr = 0;
    for (int i = 0; i < b->n_rows; i++) nr += b->rows[i].token >= t0 && b->rows[i].token < t1;
    it->seq_start = malloc(sizeof(int32_t) * (size_t)(ns + 1));
    it->rows = malloc(sizeof(rlRowSpec) * (size_t)(nr ? nr : 1));
    it->row_map = malloc(sizeof(int32_t) * (size_t)(nr ? nr : 1));
    it->res = calloc((size_t)(nr ? nr : 1), sizeof(rlRowResult));
    if (!it->seq_start || !it->rows || !it->row_map || !it->res) {
        ranks_item_free(it);
        return rl_error(err, RL_EMEMORY, "out of host memory queueing a step");
    }
    for (int s = 0; s <= ns; s++) it->seq_start[s] = b->seq_start[s0 + s] - t0;
    nr = 0;
    for (int i = 0; i < b->n_rows; i++) {
        if (b->rows[i].token < t0 || b->rows[i].token >= t1) continue;
        it->rows[nr] = b->rows[i];
        it->rows[nr].token -= t0;
        it->row_map[nr++] = i;
    }
    it->b = (rlBatch){
        .n_seqs = ns,
        .n_tokens = t1 - t0,
        .tokens = b->tokens + t0,
        .positions = b->positions + t0,
        .slots = b->slots + t0,
        .seq_start = it->seq_start,
        .seq_len = b->seq_len + s0,
        .block_tables = b->block_tables + (size_t)s0 * (size_t)b->max_blocks,
        .max_blocks = b->max_blocks,
        .n_rows = nr,
        .rows = it->rows,
        .n_adjs = b->n_adjs,
        .adjs = b->adjs,
        .n_pen_fills = b->n_pen_fills,
        .pen_fills = b->pen_fills,
    };
    it->out = out;
    it->remaining = remaining;
    return 0;
}

static int ranks_check(const rlRanks *r, const rlBatch *b, rlError *err) {
    if (b->n_tokens > r->o.max_tokens || b->n_rows > r->o.max_rows)
        return rl_error(err, RL_EINTERNAL,
                        "a step of %d tokens and %d logit rows exceeds the ranks' sizes "
                        "(%d tokens, %d rows)", b->n_tokens, b->n_rows, r->o.max_tokens,
                        r->o.max_rows);
    if (b->n_seqs < 0 || (b->n_seqs > 0 && b->seq_start[b->n_seqs] != b->n_tokens))
        return rl_error(err, RL_EINTERNAL, "a step whose sequences cover %d of its %d tokens",
                        b->n_seqs > 0 ? b->seq_start[b->n_seqs] : 0, b->n_tokens);
    /* Checked here as well as in the model: a rank refusing a step after the
     * others ran part of it would leave the layout out of step for good. */
    for (int t = 0; t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= r->o.cfg.vocab_size)
            return rl_error(err, RL_EINPUT, "token id %d is outside the model's vocabulary "
                            "(0..%d)", b->tokens[t], r->o.cfg.vocab_size - 1);
    for (int i = 0; i < b->n_rows; i++)
        if (b->rows[i].token < 0 || b->rows[i].token >= b->n_tokens)
            return rl_error(err, RL_EINTERNAL, "logit row %d points at token %d of %d", i,
                            b->rows[i].token, b->n_tokens);
    return 0;
}

int ranks_submit(rlRanks *r, const rlBatch *b, rlRowResult *out, uint64_t *ticket, rlError *err) {
    if (ranks_check(r, b, err)) return -1;
    if (!r->threaded) {
        *ticket = 0;
        return b->n_tokens ? rl_model_forward(&r->ranks[0].model, b, out, err) : 0;
    }
    int k = ranks_micro_count(r, b);
    pthread_mutex_lock(&r->mu);
    int s0 = 0;
    for (int m = 0; m < k && !r->failed; m++) {
        /* Cut where the running token count passes the m-th share, so the
         * micro-batches carry similar work whatever the sequences' lengths. */
        int s1 = s0 + 1;
        int64_t share = (int64_t)b->n_tokens * (m + 1) / k;
        while (s1 < b->n_seqs - (k - m - 1) && b->seq_start[s1] < share) s1++;
        if (m == k - 1) s1 = b->n_seqs;
        while (r->tail - r->head >= RANKS_QUEUE && !r->failed) pthread_cond_wait(&r->cv, &r->mu);
        if (r->failed) break;
        rlError e;
        if (ranks_item_make(&r->queue[r->tail % RANKS_QUEUE], b, out, s0, s1, r->n, &e)) {
            /* Part of the step may be queued already: the layout cannot
             * finish it, so it is failed like a rank failure. */
            pthread_mutex_unlock(&r->mu);
            ranks_fail(r, &e);
            pthread_mutex_lock(&r->mu);
            break;
        }
        r->tail++;
        pthread_cond_broadcast(&r->cv);
        s0 = s1;
    }
    *ticket = r->tail;
    /* As in ranks_wait: on failure, return only once no rank reads b. */
    while (r->failed && r->head < r->tail) pthread_cond_wait(&r->cv, &r->mu);
    int failed = r->failed;
    if (failed && err) *err = r->err;
    pthread_mutex_unlock(&r->mu);
    return failed ? -1 : 0;
}

int ranks_wait(rlRanks *r, uint64_t ticket, rlError *err) {
    if (!r->threaded) return 0;
    ranks_spin(r, &r->head, ticket);
    pthread_mutex_lock(&r->mu);
    while (r->head < ticket && !r->failed) pthread_cond_wait(&r->cv, &r->mu);
    /* On failure, the ranks drain the queue without running it; wait for
     * that, so no rank still reads a batch the caller is about to free. */
    while (r->failed && r->head < r->tail) pthread_cond_wait(&r->cv, &r->mu);
    int failed = r->failed;
    if (failed && err) *err = r->err;
    pthread_mutex_unlock(&r->mu);
    return failed ? -1 : 0;
}

int ranks_async(const rlRanks *r) { return r->threaded; }

int ranks_n_blocks(const rlRanks *r) { return r->n_blocks; }

int ranks_forward(rlRanks *r, const rlBatch *b, rlRowResult *out, rlError *err) {
    uint64_t ticket;
    if (ranks_submit(r, b, out, &ticket, err)) return -1;
    return ranks_wait(r, ticket, err);
}

/* comm_shm.c: collectives between CPU ranks that are threads of this process.
 *
 * Every rank's buffer is ordinary host memory, so a collective is pointers
 * posted to a shared slot, a barrier, and plain loads and stores.  Nothing is
 * staged through a shared scratch buffer: in an all-reduce rank r owns the
 * r-th slice of the elements, sums that slice over every rank's buffer in
 * rank order 0..size-1 (fp32 accumulation, one rounding to the dtype) and
 * stores the sum back into every buffer.  Slices never overlap, so no two
 * threads touch one element between the barriers, and every rank ends with
 * the same bits whatever the thread timing: the model's TP ranks then stay in
 * lock-step on identical hidden states.  Cost per all-reduce: two barriers,
 * n reads and n writes per rank.
 *
 * Point-to-point messages (the pipeline's activations) are copied into a FIFO
 * per (sender, receiver) pair, so a send never waits for its receiver: a
 * pipeline stage hands a micro-batch on and starts the next while the
 * following stage works.
 *
 * Waits use condition variables, not spinning: ranks often share few cores.
 * A failing rank aborts the set, which wakes every waiter with an error. */
#include "kernels/comm.h"
#include "kernels/half.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct shmMsg {
    struct shmMsg *next;
    size_t bytes;
    unsigned char data[];
} shmMsg;

typedef struct shmSet shmSet;

/* One group: a TP group or a pipeline chain. */
typedef struct shmGroup {
    shmSet *set;
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;                /* barrier: ranks waiting in this generation */
    uint64_t generation;
    const void **posted;        /* [size] each rank's buffer for this collective */
    shmMsg **head, **tail;      /* [size * size] FIFO from rank s to rank d at s * size + d */
} shmGroup;

typedef struct shmComm {
    rlComm base;
    shmGroup *g;
} shmComm;

struct shmSet {
    rlCommSet base;
    atomic_int aborted;
    shmGroup *tp_groups;        /* [pp] */
    shmGroup *pp_groups;        /* [tp] */
    shmComm *comms;             /* [2 * tp * pp]: rank i's TP comm at 2i, PP comm at 2i + 1 */
};

static int shm_aborted(shmGroup *g, rlError *err) {
    return rl_error(err, RL_ECOMM,
                    "a collective between CPU ranks was cancelled because another rank of "
                    "this group (%d ranks) failed; its own error is the one to read", g->size);
}

/* Every rank of the group waits here until all have arrived. */
static int shm_barrier(shmGroup *g, rlError *err) {
    pthread_mutex_lock(&g->mu);
    uint64_t gen = g->generation;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->generation && !atomic_load(&g->set->aborted))
            pthread_cond_wait(&g->cv, &g->mu);
    }
    int released = gen != g->generation;
    pthread_mutex_unlock(&g->mu);
    return released ? 0 : shm_aborted(g, err);
}

static float shm_load(const void *p, size_t i, rlDtype t) {
    switch (t) {
    case RL_F32: return ((const float *)p)[i];
    case RL_BF16: return rl_bf16_to_f32(((const uint16_t *)p)[i]);
    case RL_F16: return rl_f16_to_f32(((const uint16_t *)p)[i]);
    default: break;  /* storage-only dtypes (quantized checkpoints) never reach a collective */
    }
    return 0;
}

static void shm_store(void *p, size_t i, rlDtype t, float v) {
    switch (t) {
    case RL_F32: ((float *)p)[i] = v; break;
    case RL_BF16: ((uint16_t *)p)[i] = rl_f32_to_bf16(v); break;
    case RL_F16: ((uint16_t *)p)[i] = rl_f32_to_f16(v); break;
    default: break;
    }
}

static shmGroup *shm_group(rlComm *c) { return ((shmComm *)c)->g; }

static int shm_all_reduce_sum(rlComm *c, void *buf, size_t n, rlDtype dtype, rlError *err) {
    shmGroup *g = shm_group(c);
    if (g->size == 1) return 0;
    g->posted[c->rank] = buf;
    if (shm_barrier(g, err)) return -1;
    size_t lo = n * (size_t)c->rank / (size_t)g->size;
    size_t hi = n * (size_t)(c->rank + 1) / (size_t)g->size;
    for (size_t i = lo; i < hi; i++) {
        float s = 0;
        for (int k = 0; k < g->size; k++) s += shm_load(g->posted[k], i, dtype);
        for (int k = 0; k < g->size; k++) shm_store((void *)g->posted[k], i, dtype, s);
    }
    return shm_barrier(g, err);
}

static int shm_all_gather(rlComm *c, const void *send, void *recv, size_t n, rlDtype dtype,
                          rlError *err) {
    shmGroup *g = shm_group(c);
    size_t bytes = n * rl_dtype_size(dtype);
    g->posted[c->rank] = send;
    if (shm_barrier(g, err)) return -1;
    for (int k = 0; k < g->size; k++)
        memmove((unsigned char *)recv + (size_t)k * bytes, g->posted[k], bytes);
    return shm_barrier(g, err);
}

static int shm_broadcast(rlComm *c, void *buf, size_t bytes, int root, rlError *err) {
    shmGroup *g = shm_group(c);
    if (root < 0 || root >= g->size)
        return rl_error(err, RL_EINTERNAL, "broadcast from rank %d in a group of %d", root,
                        g->size);
    if (g->size == 1) return 0;
    g->posted[c->rank] = buf;
    if (shm_barrier(g, err)) return -1;
    if (c->rank != root) memcpy(buf, g->posted[root], bytes);
    return shm_barrier(g, err);
}

static int shm_check_peer(rlComm *c, int peer, rlError *err) {
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return rl_error(err, RL_EINTERNAL, "rank %d of %d cannot exchange with rank %d",
                        c->rank, c->size, peer);
    return 0;
}

static int shm_send(rlComm *c, const void *buf, size_t bytes, int peer, rlError *err) {
    if (shm_check_peer(c, peer, err)) return -1;
    shmGroup *g = shm_group(c);
    shmMsg *m = malloc(sizeof(*m) + bytes);
    if (!m) return rl_error(err, RL_EMEMORY, "out of host memory queueing a %zu-byte message",
                            bytes);
    m->next = NULL;
    m->bytes = bytes;
    memcpy(m->data, buf, bytes);
    size_t q = (size_t)c->rank * (size_t)g->size + (size_t)peer;
    pthread_mutex_lock(&g->mu);
    if (g->tail[q]) g->tail[q]->next = m;
    else g->head[q] = m;
    g->tail[q] = m;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int shm_recv(rlComm *c, void *buf, size_t bytes, int peer, rlError *err) {
    if (shm_check_peer(c, peer, err)) return -1;
    shmGroup *g = shm_group(c);
    size_t q = (size_t)peer * (size_t)g->size + (size_t)c->rank;
    pthread_mutex_lock(&g->mu);
    while (!g->head[q] && !atomic_load(&g->set->aborted)) pthread_cond_wait(&g->cv, &g->mu);
    shmMsg *m = g->head[q];
    if (m) {
        g->head[q] = m->next;
        if (!m->next) g->tail[q] = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    if (!m) return shm_aborted(g, err);
    int rc = 0;
    if (m->bytes != bytes)
        rc = rl_error(err, RL_EINTERNAL,
                      "rank %d expected a %zu-byte message from rank %d and got %zu bytes: "
                      "the two ranks disagree about the step", c->rank, bytes, peer, m->bytes);
    else
        memcpy(buf, m->data, bytes);
    free(m);
    return rc;
}

/* Communicators belong to the set and are freed with it. */
static void shm_comm_destroy(rlComm *c) { (void)c; }

static const rlCommOps shm_comm_ops = {
    .all_reduce_sum = shm_all_reduce_sum,
    .all_gather = shm_all_gather,
    .broadcast = shm_broadcast,
    .send = shm_send,
    .recv = shm_recv,
    .destroy = shm_comm_destroy,
};

static int shm_group_init(shmGroup *g, shmSet *set, int size) {
    g->set = set;
    g->size = size;
    g->posted = calloc((size_t)size, sizeof(*g->posted));
    g->head = calloc((size_t)size * (size_t)size, sizeof(*g->head));
    g->tail = calloc((size_t)size * (size_t)size, sizeof(*g->tail));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g->posted && g->head && g->tail ? 0 : -1;
}

static void shm_group_free(shmGroup *g) {
    if (!g->set) return;
    for (int q = 0; g->head && q < g->size * g->size; q++) {
        for (shmMsg *m = g->head[q], *next; m; m = next) {
            next = m->next;
            free(m);
        }
    }
    free(g->posted);
    free(g->head);
    free(g->tail);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

static int shm_join(rlCommSet *s, int rank, rlComm **tp, rlComm **pp, rlError *err) {
    shmSet *set = s->impl;
    if (rank < 0 || rank >= s->tp * s->pp)
        return rl_error(err, RL_EINTERNAL, "rank %d joining a %dx%d layout", rank, s->tp, s->pp);
    *tp = s->tp > 1 || s->every_group ? &set->comms[2 * rank].base : NULL;
    *pp = s->pp > 1 || s->every_group ? &set->comms[2 * rank + 1].base : NULL;
    return 0;
}

static void shm_abort(rlCommSet *s) {
    shmSet *set = s->impl;
    atomic_store(&set->aborted, 1);
    shmGroup *groups[2] = {set->tp_groups, set->pp_groups};
    int counts[2] = {s->pp, s->tp};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < counts[k]; i++) {
            pthread_mutex_lock(&groups[k][i].mu);
            pthread_cond_broadcast(&groups[k][i].cv);
            pthread_mutex_unlock(&groups[k][i].mu);
        }
    }
}

static void shm_destroy(rlCommSet *s) {
    if (!s) return;
    shmSet *set = s->impl;
    for (int i = 0; set->tp_groups && i < s->pp; i++) shm_group_free(&set->tp_groups[i]);
    for (int i = 0; set->pp_groups && i < s->tp; i++) shm_group_free(&set->pp_groups[i]);
    free(set->tp_groups);
    free(set->pp_groups);
    free(set->comms);
    free(set);
}

static const rlCommSetOps shm_set_ops = {
    .join = shm_join,
    .abort = shm_abort,
    .destroy = shm_destroy,
};

rlCommSet *rl_comm_shm_create(int tp, int pp, rlError *err) {
    if (tp < 1 || pp < 1) {
        rl_error(err, RL_EUSAGE, "a layout needs --tp and --pp of at least 1 (got %d x %d)", tp,
                 pp);
        return NULL;
    }
    shmSet *set = calloc(1, sizeof(*set));
    if (!set) goto oom;
    set->base = (rlCommSet){.ops = &shm_set_ops, .tp = tp, .pp = pp, .impl = set};
    atomic_init(&set->aborted, 0);
    set->tp_groups = calloc((size_t)pp, sizeof(*set->tp_groups));
    set->pp_groups = calloc((size_t)tp, sizeof(*set->pp_groups));
    set->comms = calloc(2 * (size_t)tp * (size_t)pp, sizeof(*set->comms));
    if (!set->tp_groups || !set->pp_groups || !set->comms) goto oom;
    for (int i = 0; i < pp; i++)
        if (shm_group_init(&set->tp_groups[i], set, tp)) goto oom;
    for (int i = 0; i < tp; i++)
        if (shm_group_init(&set->pp_groups[i], set, pp)) goto oom;
    for (int r = 0; r < tp * pp; r++) {
        int tr = r % tp, pr = r / tp;
        set->comms[2 * r] = (shmComm){{&shm_comm_ops, tr, tp, NULL}, &set->tp_groups[pr]};
        set->comms[2 * r + 1] = (shmComm){{&shm_comm_ops, pr, pp, NULL}, &set->pp_groups[tr]};
        set->comms[2 * r].base.impl = &set->comms[2 * r];
        set->comms[2 * r + 1].base.impl = &set->comms[2 * r + 1];
    }
    return &set->base;
oom:
    if (set) shm_destroy(&set->base);
    rl_error(err, RL_EMEMORY, "out of host memory creating the communicators of a %dx%d layout",
             tp, pp);
    return NULL;
}

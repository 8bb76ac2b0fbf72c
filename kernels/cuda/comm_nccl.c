/* comm_nccl.c: collectives between GPU ranks (threads of this process) over NCCL.
 *
 * One unique id per group (each stage's TP group, each TP rank's pipeline
 * chain) is made up front; every rank thread then joins with
 * ncclCommInitRank for its two groups inside one ncclGroupStart/End, on its
 * own device.  A group of one rank gets a communicator only when the set
 * asks for every group (--collectives always); its rank makes the id itself,
 * since no one else needs it.  Each rank prints the NCCL version and what
 * NCCL reports for its communicators, so a log shows that NCCL really ran.
 * NCCL_NVLS_ENABLE=0 is set unless the user set it: NVLink SHARP needs
 * multicast objects that shared or partitioned hosts often refuse, which
 * shows up as a hang at init.
 *
 * Every call is synchronous for the host: the model syncs its backend before
 * a collective, the collective runs on this rank's comm stream and is waited
 * for, so the backend's next kernels see the result without sharing streams.
 * A send is waited for too, because the model reuses the sent buffer for its
 * next micro-batch: a stage can therefore run at most one micro-batch ahead
 * of the next (see kernels/COSTMODEL.md).
 *
 * A watchdog thread watches each rank's current NCCL step; one that hangs
 * past the timeout ends the process (NCCL offers no safe way back from a
 * collective a peer never joins) with what a person needs: the ranks stuck
 * and in what, their devices, the topology, and the variables to check. */
#include "kernels/comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/gpuinfo.h"

#define NCCL_MAX_RANKS 64

typedef struct ncclSet ncclSet;

typedef struct ncclRankComm {
    rlComm base;
    ncclSet *set;
    int global;             /* the layout rank using it */
    ncclComm_t comm;
} ncclRankComm;

struct ncclSet {
    rlCommSet base;
    int devices[NCCL_MAX_RANKS];
    ncclUniqueId tp_ids[NCCL_MAX_RANKS], pp_ids[NCCL_MAX_RANKS];
    ncclRankComm comms[2 * NCCL_MAX_RANKS];     /* rank i: TP at 2i, PP at 2i + 1 */
    cudaStream_t streams[NCCL_MAX_RANKS];
    double timeout_s;

    pthread_t watchdog;
    int watchdog_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    double busy_since[NCCL_MAX_RANKS];          /* 0: not in an NCCL step */
    const char *busy_what[NCCL_MAX_RANKS];
};

static double nccl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nccl_busy(ncclSet *s, int rank, const char *what) {
    pthread_mutex_lock(&s->mu);
    s->busy_since[rank] = what ? nccl_now() : 0;
    s->busy_what[rank] = what;
    pthread_mutex_unlock(&s->mu);
}

static void nccl_diagnose(ncclSet *s, double now) {
    int n = s->base.tp * s->base.pp;
    fprintf(stderr,
            "redlm: an NCCL step hung for more than %.0f s (--nccl-timeout); stopping the process, "
            "because a collective that a peer never joins cannot be cancelled safely.\n"
            "layout: tp %d x pp %d (rank i = stage i / %d, tensor rank i %% %d)\n",
            s->timeout_s, s->base.tp, s->base.pp, s->base.tp, s->base.tp);
    for (int i = 0; i < n; i++) {
        if (s->busy_since[i] > 0)
            fprintf(stderr, "  rank %d (stage %d, tensor rank %d) on GPU %d: stuck in %s for %.0f s\n",
                    i, i / s->base.tp, i % s->base.tp, s->devices[i], s->busy_what[i],
                    now - s->busy_since[i]);
        else
            fprintf(stderr, "  rank %d (stage %d, tensor rank %d) on GPU %d: not in NCCL (waiting "
                    "on its own work, or already failed)\n", i, i / s->base.tp, i % s->base.tp,
                    s->devices[i]);
    }
    fprintf(stderr, "topology of the devices (from NVML):\n");
    rl_gpu_topology_print(stderr, s->devices, n);
    static const char *vars[] = {"NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
                                 "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_SOCKET_IFNAME",
                                 "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES"};
    fprintf(stderr, "environment:");
    for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]); k++) {
        const char *v = getenv(vars[k]);
        fprintf(stderr, " %s=%s", vars[k], v ? v : "(unset)");
    }
    fprintf(stderr,
            "\nwhat to check: rerun with NCCL_DEBUG=INFO to see which transport hangs; a TP "
            "group across SYS/PHB links or a container without shared memory often needs "
            "NCCL_P2P_LEVEL=SYS or NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1; on a single host "
            "set NCCL_IB_DISABLE=1; `redlm doctor --devices ...` shows busy cards and links.\n");
}

static void *nccl_watchdog(void *arg) {
    ncclSet *s = arg;
    int n = s->base.tp * s->base.pp;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        double now = nccl_now();
        for (int i = 0; i < n && !s->stop; i++) {
            if (s->busy_since[i] > 0 && now - s->busy_since[i] > s->timeout_s) {
                nccl_diagnose(s, now);
                _exit(RL_ECOMM);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int nccl_fail(ncclSet *s, int rank, ncclResult_t rc, const char *what, rlError *err) {
    return rl_error(err, RL_ECOMM,
                    "NCCL %s failed on rank %d (GPU %d): %s. Rerun with NCCL_DEBUG=INFO for the "
                    "transport NCCL chose; `redlm doctor` checks the devices and NCCL variables",
                    what, rank, s->devices[rank], ncclGetErrorString(rc));
}

static int nccl_cuda_fail(ncclSet *s, int rank, cudaError_t rc, const char *what, rlError *err) {
    return rl_error(err, RL_EDEVICE, "CUDA %s failed on rank %d (GPU %d): %s", what, rank,
                    s->devices[rank], cudaGetErrorString(rc));
}

static ncclDataType_t nccl_dtype(rlDtype t) {
    return t == RL_F32 ? ncclFloat32 : t == RL_F16 ? ncclFloat16 : ncclBfloat16;
}

/* Issue one NCCL call on the rank's stream and wait for it, watched. */
#define NCCL_STEP(c, what, call)                                                  \
    do {                                                                          \
        ncclRankComm *rc_ = (ncclRankComm *)(c);                                  \
        ncclSet *s_ = rc_->set;                                                   \
        nccl_busy(s_, rc_->global, what);                                         \
        ncclResult_t r_ = (call);                                                 \
        cudaError_t e_ = r_ == ncclSuccess ? cudaStreamSynchronize(s_->streams[rc_->global]) \
                                           : cudaSuccess;                         \
        nccl_busy(s_, rc_->global, NULL);                                         \
        if (r_ != ncclSuccess) return nccl_fail(s_, rc_->global, r_, what, err);  \
        if (e_ != cudaSuccess) return nccl_cuda_fail(s_, rc_->global, e_, what, err); \
        return 0;                                                                 \
    } while (0)

static cudaStream_t nccl_stream(rlComm *c) {
    ncclRankComm *rc = (ncclRankComm *)c;
    return rc->set->streams[rc->global];
}

static ncclComm_t nccl_comm(rlComm *c) { return ((ncclRankComm *)c)->comm; }

static int nccl_all_reduce_sum(rlComm *c, void *buf, size_t n, rlDtype dtype, rlError *err) {
    NCCL_STEP(c, "all-reduce", ncclAllReduce(buf, buf, n, nccl_dtype(dtype), ncclSum,
                                             nccl_comm(c), nccl_stream(c)));
}

static int nccl_all_gather(rlComm *c, const void *send, void *recv, size_t n, rlDtype dtype,
                           rlError *err) {
    NCCL_STEP(c, "all-gather",
              ncclAllGather(send, recv, n, nccl_dtype(dtype), nccl_comm(c), nccl_stream(c)));
}

static int nccl_broadcast(rlComm *c, void *buf, size_t bytes, int root, rlError *err) {
    NCCL_STEP(c, "broadcast",
              ncclBroadcast(buf, buf, bytes, ncclUint8, root, nccl_comm(c), nccl_stream(c)));
}

static int nccl_send(rlComm *c, const void *buf, size_t bytes, int peer, rlError *err) {
    NCCL_STEP(c, "send", ncclSend(buf, bytes, ncclUint8, peer, nccl_comm(c), nccl_stream(c)));
}

static int nccl_recv(rlComm *c, void *buf, size_t bytes, int peer, rlError *err) {
    NCCL_STEP(c, "recv", ncclRecv(buf, bytes, ncclUint8, peer, nccl_comm(c), nccl_stream(c)));
}

/* Communicators belong to the set and are destroyed with it. */
static void nccl_comm_destroy(rlComm *c) { (void)c; }

static const rlCommOps nccl_comm_ops = {
    .all_reduce_sum = nccl_all_reduce_sum,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .destroy = nccl_comm_destroy,
};

/* NCCL's own view of a rank's communicator, for the start-up line. */
static void nccl_describe(char *buf, size_t len, const char *name, ncclComm_t comm) {
    int dev = -1, rank = -1, count = 0;
    if (!comm || ncclCommCuDevice(comm, &dev) != ncclSuccess ||
        ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &count) != ncclSuccess)
        snprintf(buf, len, "no %s communicator", name);
    else
        snprintf(buf, len, "%s communicator rank %d of %d on CUDA device %d", name, rank, count,
                 dev);
}

static void nccl_report(ncclSet *s, int rank) {
    int v = 0;
    ncclGetVersion(&v);
    /* major*10000 + minor*100 + patch since NCCL 2.9; major*1000 + minor*100 + patch before */
    int major = v >= 10000 ? v / 10000 : v / 1000;
    int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
    char t[96], p[96];
    nccl_describe(t, sizeof(t), "TP", s->comms[2 * rank].comm);
    nccl_describe(p, sizeof(p), "pipeline", s->comms[2 * rank + 1].comm);
    fprintf(stderr, "redlm: NCCL %d.%d.%d initialised for rank %d on GPU %d: %s, %s\n", major,
            minor, v % 100, rank, s->devices[rank], t, p);
}

static int nccl_join(rlCommSet *base, int rank, rlComm **tp, rlComm **pp, rlError *err) {
    ncclSet *s = base->impl;
    int T = base->tp, P = base->pp, tr = rank % T, pr = rank / T;
    int with_tp = T > 1 || base->every_group, with_pp = P > 1 || base->every_group;
    *tp = *pp = NULL;
    cudaError_t ce = cudaSetDevice(s->devices[rank]);
    if (ce == cudaSuccess)
        ce = cudaStreamCreateWithFlags(&s->streams[rank], cudaStreamNonBlocking);
    if (ce != cudaSuccess) return nccl_cuda_fail(s, rank, ce, "set-up", err);
    ncclRankComm *t = &s->comms[2 * rank], *p = &s->comms[2 * rank + 1];
    *t = (ncclRankComm){{&nccl_comm_ops, tr, T, t}, s, rank, NULL};
    *p = (ncclRankComm){{&nccl_comm_ops, pr, P, p}, s, rank, NULL};
    /* Groups of one: this rank is the only user of the id (tp_ids[pr] or pp_ids[tr]). */
    ncclResult_t r = ncclSuccess;
    if (T == 1 && with_tp) r = ncclGetUniqueId(&s->tp_ids[pr]);
    if (r == ncclSuccess && P == 1 && with_pp) r = ncclGetUniqueId(&s->pp_ids[tr]);
    if (r != ncclSuccess) return nccl_fail(s, rank, r, "communicator id", err);
    nccl_busy(s, rank, "communicator init (ncclCommInitRank)");
    r = ncclGroupStart();
    if (r == ncclSuccess && with_tp) r = ncclCommInitRank(&t->comm, T, s->tp_ids[pr], tr);
    if (r == ncclSuccess && with_pp) r = ncclCommInitRank(&p->comm, P, s->pp_ids[tr], pr);
    ncclResult_t r2 = ncclGroupEnd();
    nccl_busy(s, rank, NULL);
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) return nccl_fail(s, rank, r, "communicator init", err);
    if (with_tp) *tp = &t->base;
    if (with_pp) *pp = &p->base;
    if (with_tp || with_pp) nccl_report(s, rank);
    return 0;
}

static void nccl_abort(rlCommSet *base) {
    ncclSet *s = base->impl;
    for (int i = 0; i < 2 * base->tp * base->pp; i++)
        if (s->comms[i].comm) ncclCommAbort(s->comms[i].comm), s->comms[i].comm = NULL;
}

static void nccl_destroy(rlCommSet *base) {
    ncclSet *s = base->impl;
    if (s->watchdog_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watchdog, NULL);
    }
    for (int i = 0; i < 2 * base->tp * base->pp; i++)
        if (s->comms[i].comm) ncclCommDestroy(s->comms[i].comm);
    for (int i = 0; i < base->tp * base->pp; i++)
        if (s->streams[i]) cudaSetDevice(s->devices[i]), cudaStreamDestroy(s->streams[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static const rlCommSetOps nccl_set_ops = {
    .join = nccl_join,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

rlCommSet *rl_comm_nccl_create(int tp, int pp, const int *devices, double timeout_s,
                               rlError *err) {
    int n = tp * pp;
    if (tp < 1 || pp < 1 || n > NCCL_MAX_RANKS) {
        rl_error(err, RL_EUSAGE, "a layout of tp %d x pp %d is not between 1 and %d ranks", tp,
                 pp, NCCL_MAX_RANKS);
        return NULL;
    }
    /* Before NCCL reads its environment (at the first call below). */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclSet *s = calloc(1, sizeof(*s));
    if (!s) {
        rl_error(err, RL_EMEMORY, "out of host memory");
        return NULL;
    }
    s->base = (rlCommSet){.ops = &nccl_set_ops, .tp = tp, .pp = pp, .impl = s};
    s->timeout_s = timeout_s > 0 ? timeout_s : 600;
    memcpy(s->devices, devices, sizeof(int) * (size_t)n);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < pp && r == ncclSuccess && tp > 1; i++) r = ncclGetUniqueId(&s->tp_ids[i]);
    for (int i = 0; i < tp && r == ncclSuccess && pp > 1; i++) r = ncclGetUniqueId(&s->pp_ids[i]);
    if (r != ncclSuccess) {
        rl_error(err, RL_ECOMM, "NCCL cannot make a communicator id: %s (NCCL_DEBUG=INFO says "
                 "why; `redlm doctor` checks the setup)", ncclGetErrorString(r));
        nccl_destroy(&s->base);
        return NULL;
    }
    if (pthread_create(&s->watchdog, NULL, nccl_watchdog, s)) {
        rl_error(err, RL_EINTERNAL, "cannot start the NCCL watchdog thread");
        nccl_destroy(&s->base);
        return NULL;
    }
    s->watchdog_started = 1;
    return &s->base;
}

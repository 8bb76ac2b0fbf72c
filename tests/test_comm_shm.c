/* test_comm_shm.c: the shared-memory collectives between CPU rank threads.
 *
 * All-reduce must give every rank the same bits, equal to the sum taken in
 * rank order (the model's TP ranks rely on it to stay in step); all-gather
 * and broadcast must place every rank's bytes; send/recv must keep each
 * pair's order and never make the sender wait; abort must wake waiters.
 * Groups of one rank (every_group, for --collectives always) must work too. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/comm.h"
#include "kernels/half.h"

#define MAXR 8

typedef struct job {
    rlCommSet *set;
    int rank;
    int (*fn)(struct job *j, rlComm *tp, rlComm *pp);
    void *ctx;
    int rc;
} job;

static void *job_main(void *arg) {
    job *j = arg;
    rlComm *tp, *pp;
    rlError err;
    j->rc = j->set->ops->join(j->set, j->rank, &tp, &pp, &err);
    if (!j->rc) j->rc = j->fn(j, tp, pp);
    if (j->rc) j->set->ops->abort(j->set); /* a failed check must not hang its peers */
    return NULL;
}

/* Run fn on every rank of a tp x pp set, each in its own thread; every
 * asks for communicators of groups of one rank too. */
static void run_ranks_every(int tp, int pp, int every, int (*fn)(job *, rlComm *, rlComm *),
                            void *ctx, int *rcs) {
    rlError err;
    rlCommSet *set = rl_comm_shm_create(tp, pp, &err);
    assert_non_null(set);
    set->every_group = every;
    pthread_t th[MAXR];
    job jobs[MAXR];
    for (int i = 0; i < tp * pp; i++) {
        jobs[i] = (job){set, i, fn, ctx, -1};
        assert_int_equal(pthread_create(&th[i], NULL, job_main, &jobs[i]), 0);
    }
    for (int i = 0; i < tp * pp; i++) {
        pthread_join(th[i], NULL);
        rcs[i] = jobs[i].rc;
    }
    set->ops->destroy(set);
}

static void run_ranks(int tp, int pp, int (*fn)(job *, rlComm *, rlComm *), void *ctx,
                      int *rcs) {
    run_ranks_every(tp, pp, 0, fn, ctx, rcs);
}

#define N 1001

typedef struct reduceCtx {
    rlDtype dtype;
    unsigned char in[MAXR][N * 4];
    unsigned char out[MAXR][N * 4];
} reduceCtx;

static float value(int rank, int i) {
    /* Magnitudes far apart, so the order of summation changes the bits. */
    uint32_t h = (uint32_t)(rank * 7919 + i) * 2654435761u;
    return (float)((double)(h % 20001) / 10000.0 - 1.0) * (float)pow(10.0, (rank + i) % 7 - 3);
}

static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }

static int reduce_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)pp;
    reduceCtx *c = j->ctx;
    memcpy(c->out[j->rank], c->in[j->rank], sizeof(c->in[0]));
    rlError err;
    return tp ? tp->ops->all_reduce_sum(tp, c->out[j->rank], N, c->dtype, &err) : 0;
}

static void check_all_reduce(rlDtype dtype, int size) {
    reduceCtx *c = calloc(1, sizeof(*c));
    c->dtype = dtype;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++) {
            float v = value(r, i);
            if (dtype == RL_F32) memcpy(c->in[r] + 4 * i, &v, 4);
            else { uint16_t h = dtype == RL_BF16 ? to_bf16(v) : 0x3c00 ^ (uint16_t)(i & 0x3ff);
                   memcpy(c->in[r] + 2 * i, &h, 2); }
        }
    int rcs[MAXR];
    run_ranks(size, 1, reduce_rank, c, rcs);
    size_t bytes = N * rl_dtype_size(dtype);
    for (int r = 0; r < size; r++) {
        assert_int_equal(rcs[r], 0);
        assert_memory_equal(c->out[r], c->out[0], bytes);
    }
    if (dtype == RL_F32) {
        for (int i = 0; i < N; i++) {
            float s = 0, got;
            for (int r = 0; r < size; r++) s += value(r, i);
            memcpy(&got, c->out[0] + 4 * i, 4);
            assert_memory_equal(&got, &s, 4);
        }
    }
    free(c);
}

static void test_all_reduce_f32(void **state) {
    (void)state;
    for (int size = 1; size <= 6; size++) check_all_reduce(RL_F32, size);
}

static void test_all_reduce_half(void **state) {
    (void)state;
    check_all_reduce(RL_BF16, 3);
    check_all_reduce(RL_F16, 4);
}

/* Repeated all-reduces over the same ranks give the same bits every time. */
static int repeat_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)pp;
    float *buf = malloc(N * sizeof(float)), *first = malloc(N * sizeof(float));
    rlError err;
    int rc = 0;
    for (int it = 0; it < 50 && !rc; it++) {
        for (int i = 0; i < N; i++) buf[i] = value(j->rank, i + it);
        rc = tp->ops->all_reduce_sum(tp, buf, N, RL_F32, &err);
        if (it == 0) memcpy(first, buf, N * sizeof(float));
        for (int i = 0; i < N && !rc && it == 0; i++) {
            float s = 0;
            for (int r = 0; r < tp->size; r++) s += value(r, i);
            if (memcmp(&s, &buf[i], 4)) rc = -2;
        }
    }
    free(buf);
    free(first);
    return rc;
}

static void test_all_reduce_repeated(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks(4, 1, repeat_rank, NULL, rcs);
    for (int r = 0; r < 4; r++) assert_int_equal(rcs[r], 0);
}

static int gather_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)pp;
    int32_t send[3], recv[3 * MAXR], root[4] = {0};
    for (int i = 0; i < 3; i++) send[i] = j->rank * 100 + i;
    rlError err;
    if (tp->ops->all_gather(tp, send, recv, 3, RL_F32, &err)) return -1;
    for (int r = 0; r < tp->size; r++)
        for (int i = 0; i < 3; i++)
            if (recv[3 * r + i] != r * 100 + i) return -2;
    if (tp->rank == 2) root[0] = 42, root[3] = 7;
    if (tp->ops->broadcast(tp, root, sizeof(root), 2, &err)) return -3;
    return root[0] == 42 && root[3] == 7 ? 0 : -4;
}

static void test_all_gather_broadcast(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks(5, 1, gather_rank, NULL, rcs);
    for (int r = 0; r < 5; r++) assert_int_equal(rcs[r], 0);
}

/* A 2 x 3 layout: each TP pair all-reduces while the pipeline chains pass
 * 200 messages of varying sizes down the stages, in order, without the
 * sender waiting for the receiver. */
static int pipe_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)j;
    rlError err;
    int stage = pp->rank, last = pp->size - 1;
    for (int m = 0; m < 200; m++) {
        int len = 1 + m % 17;
        int32_t msg[17];
        if (stage == 0) {
            for (int i = 0; i < len; i++) msg[i] = m * 1000 + i + tp->rank;
        } else {
            if (pp->ops->recv(pp, msg, sizeof(int32_t) * (size_t)len, stage - 1, &err)) return -1;
            for (int i = 0; i < len; i++)
                if (msg[i] != m * 1000 + i + tp->rank + stage) return -2;
        }
        float x = (float)(tp->rank + 1);
        if (tp->ops->all_reduce_sum(tp, &x, 1, RL_F32, &err) || x != 3.0f) return -3;
        for (int i = 0; i < len; i++) msg[i]++;
        if (stage < last && pp->ops->send(pp, msg, sizeof(int32_t) * (size_t)len, stage + 1, &err))
            return -4;
    }
    return 0;
}

static void test_pipeline_order(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks(2, 3, pipe_rank, NULL, rcs);
    for (int r = 0; r < 6; r++) assert_int_equal(rcs[r], 0);
}

/* A receiver whose sender failed is woken with an error. */
static int abort_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)tp;
    rlError err;
    if (j->rank == 0) {
        j->set->ops->abort(j->set);
        return 0;
    }
    char b[4];
    int rc = pp->ops->recv(pp, b, sizeof(b), 0, &err);
    return rc == -1 && err.code == RL_ECOMM ? 0 : -1;
}

static void test_abort_wakes(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks(1, 2, abort_rank, NULL, rcs);
    assert_int_equal(rcs[0], 0);
    assert_int_equal(rcs[1], 0);
}

/* A message of the wrong size is an error, not a silent truncation. */
static int size_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)tp;
    rlError err;
    char b[8] = {0};
    if (j->rank == 0) return pp->ops->send(pp, b, 8, 1, &err);
    return pp->ops->recv(pp, b, 4, 0, &err) == -1 && err.code == RL_EINTERNAL ? 0 : -1;
}

static void test_size_mismatch(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks(1, 2, size_rank, NULL, rcs);
    assert_int_equal(rcs[0], 0);
    assert_int_equal(rcs[1], 0);
}

/* A 2x1 set asked for every group: each rank also gets a pipeline group of
 * one, where reduce, gather and broadcast keep or copy its own data and a
 * message to itself is refused rather than left to hang. */
static int alone_rank(job *j, rlComm *tp, rlComm *pp) {
    (void)j;
    rlError err;
    float a[3] = {1.5f, -0.0f, 3e-8f}, b[3] = {0}, keep[3];
    memcpy(keep, a, sizeof(a));
    if (!tp || !pp || tp->size != 2 || pp->size != 1 || pp->rank != 0) return -1;
    if (pp->ops->all_reduce_sum(pp, a, 3, RL_F32, &err) || memcmp(a, keep, sizeof(a))) return -1;
    if (pp->ops->all_gather(pp, a, b, 3, RL_F32, &err) || memcmp(b, keep, sizeof(b))) return -1;
    if (pp->ops->broadcast(pp, a, sizeof(a), 0, &err) || memcmp(a, keep, sizeof(a))) return -1;
    if (!pp->ops->broadcast(pp, a, sizeof(a), 1, &err)) return -1;
    if (!pp->ops->send(pp, a, sizeof(a), 0, &err) || !pp->ops->recv(pp, b, sizeof(b), 0, &err))
        return -1;
    return 0;
}

static void test_groups_of_one(void **state) {
    (void)state;
    int rcs[MAXR];
    run_ranks_every(2, 1, 1, alone_rank, NULL, rcs);
    assert_int_equal(rcs[0], 0);
    assert_int_equal(rcs[1], 0);
}

/* The 16-bit roundings the all-reduce ends with: every finite value survives
 * a round trip, and halfway cases go to the even neighbour. */
static void test_half_rounding(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t x = (uint16_t)h;
        if ((x & 0x7c00) != 0x7c00) assert_int_equal(rl_f32_to_f16(rl_f16_to_f32(x)), x);
        if ((x & 0x7f80) != 0x7f80) assert_int_equal(rl_f32_to_bf16(rl_bf16_to_f32(x)), x);
    }
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to 1 (even); 1 + 3 * 2^-11 to 1 + 2^-9 */
    assert_int_equal(rl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(rl_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(rl_f32_to_f16(70000.0f), 0x7c00);
    assert_int_equal(rl_f32_to_f16(0x1p-25f), 0x0000);       /* half the smallest subnormal: even */
    assert_int_equal(rl_f32_to_f16(0x1.8p-24f), 0x0002);     /* 1.5 subnormal units: even (2) */
    assert_int_equal(rl_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(rl_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_reduce_f32),    cmocka_unit_test(test_all_reduce_half),
        cmocka_unit_test(test_all_reduce_repeated), cmocka_unit_test(test_all_gather_broadcast),
        cmocka_unit_test(test_pipeline_order),    cmocka_unit_test(test_abort_wakes),
        cmocka_unit_test(test_size_mismatch),     cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_groups_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

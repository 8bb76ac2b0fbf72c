/* test_model_comm.c: the model with a TP communicator of one rank.
 *
 * `--collectives always` gives a 1x1 layout communicators of one rank so that
 * one device runs the collectives a TP group runs.  That is only worth
 * something if the model really calls them: here a counting communicator
 * wraps a real one (shared memory on CPU; NCCL with RL_TEST_BACKEND=cuda,
 * from tests/gpu_nccl.sh) and must see one all-reduce for the embedding, two
 * per layer and one gather of the logits per step, and the results must be
 * the bits of the same model run with no communicator.  Dummy weights of a
 * small shape keep it to a fraction of a second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/comm.h"
#include "kernels/model.h"

#define T 12            /* prompt tokens */
#define BLOCK 16

static const rlModelConfig CFG = {
    .hidden_size = 64, .num_layers = 3, .num_heads = 4, .num_kv_heads = 2, .head_dim = 16,
    .intermediate_size = 96, .vocab_size = 300, .max_position_embeddings = 64,
    .rope_theta = 10000, .rms_norm_eps = 1e-6, .torch_dtype = RL_BF16, .bos_id = -1,
};

static int CUDA;

/* Forwards to a real communicator and counts what the model asks of it. */
typedef struct countComm {
    rlComm base;
    rlComm *inner;
    int reduces, gathers, others;
} countComm;

static countComm *counted(rlComm *c) { return (countComm *)c; }

static int count_all_reduce(rlComm *c, void *buf, size_t n, rlDtype dtype, rlError *err) {
    counted(c)->reduces++;
    rlComm *in = counted(c)->inner;
    return in->ops->all_reduce_sum(in, buf, n, dtype, err);
}

static int count_all_gather(rlComm *c, const void *send, void *recv, size_t n, rlDtype dtype,
                            rlError *err) {
    counted(c)->gathers++;
    rlComm *in = counted(c)->inner;
    return in->ops->all_gather(in, send, recv, n, dtype, err);
}

static int count_broadcast(rlComm *c, void *buf, size_t bytes, int root, rlError *err) {
    counted(c)->others++;
    rlComm *in = counted(c)->inner;
    return in->ops->broadcast(in, buf, bytes, root, err);
}

static int count_send(rlComm *c, const void *buf, size_t bytes, int peer, rlError *err) {
    counted(c)->others++;
    rlComm *in = counted(c)->inner;
    return in->ops->send(in, buf, bytes, peer, err);
}

static int count_recv(rlComm *c, void *buf, size_t bytes, int peer, rlError *err) {
    counted(c)->others++;
    rlComm *in = counted(c)->inner;
    return in->ops->recv(in, buf, bytes, peer, err);
}

static void count_destroy(rlComm *c) { (void)c; }

static const rlCommOps count_ops = {count_all_reduce, count_all_gather, count_broadcast,
                                    count_send, count_recv, count_destroy};

typedef struct run {
    rlBackend *be;
    rlModel m;
    rlRowResult res[T];
} run;

/* One prompt in one step: every row scores the next token, the last samples. */
static void forward(run *r, rlComm *tp) {
    rlError err = {0};
    rlBackendOptions bo = {.threads = 1, .dtype = RL_BF16};
    r->be = CUDA ? rl_backend_cuda_create(&bo, &err) : rl_backend_cpu_create(&bo, &err);
    if (!r->be) fail_msg("%s", err.msg);
    rlShard shard;
    if (rl_shard_plan(&CFG, 1, 1, NULL, &shard, &err) ||
        rl_model_init(&r->m, &CFG, &shard, r->be, tp, NULL, NULL, NULL, 42, T, T, &err) ||
        r->be->ops->kv_init(r->be, shard.n_layers, 1, BLOCK, shard.n_kv_heads, CFG.head_dim,
                            &err))
        fail_msg("%s", err.msg);
    int32_t tokens[T], pos[T], seq_start[2] = {0, T}, seq_len[1] = {T}, table[1] = {0};
    rlRowSpec rows[T];
    for (int t = 0; t < T; t++) {
        tokens[t] = (t * 37 + 5) % CFG.vocab_size;
        pos[t] = t;
    }
    for (int t = 0; t < T; t++)
        rows[t] = (rlRowSpec){.token = t, .target = t + 1 < T ? tokens[t + 1] : -1, .n_top = 3,
                              .sample = t == T - 1, .top_p = 1};
    rlBatch b = {.n_seqs = 1, .n_tokens = T, .tokens = tokens, .positions = pos, .slots = pos,
                 .seq_start = seq_start, .seq_len = seq_len, .block_tables = table,
                 .max_blocks = 1, .n_rows = T, .rows = rows};
    memset(r->res, 0, sizeof(r->res));
    if (rl_model_forward(&r->m, &b, r->res, &err)) fail_msg("%s", err.msg);
}

static void release(run *r) {
    rl_model_free(&r->m);
    r->be->ops->destroy(r->be);
}

static rlCommSet *one_rank_set(rlError *err) {
#ifdef RL_HAVE_CUDA
    if (CUDA) return rl_comm_nccl_create(1, 1, (const int[]){0}, 60, err);
#endif
    return rl_comm_shm_create(1, 1, err);
}

static void test_one_rank_group(void **state) {
    (void)state;
    rlError err = {0};
    run alone, with;
    forward(&alone, NULL);

    rlCommSet *set = one_rank_set(&err);
    if (!set) fail_msg("%s", err.msg);
    rlComm *tp = NULL, *pp = NULL;
    /* Without every_group a 1x1 layout gets no communicator at all. */
    if (set->ops->join(set, 0, &tp, &pp, &err)) fail_msg("%s", err.msg);
    assert_null(tp);
    assert_null(pp);
    set->ops->destroy(set);

    set = one_rank_set(&err);
    if (!set) fail_msg("%s", err.msg);
    set->every_group = 1;
    if (set->ops->join(set, 0, &tp, &pp, &err)) fail_msg("%s", err.msg);
    assert_non_null(tp);
    assert_non_null(pp);
    assert_int_equal(tp->size, 1);
    assert_int_equal(tp->rank, 0);
    assert_int_equal(pp->size, 1);
    countComm cc = {.base = {&count_ops, 0, 1, NULL}, .inner = tp};
    cc.base.impl = &cc;
    forward(&with, &cc.base);
    assert_int_equal(cc.reduces, 1 + 2 * CFG.num_layers);
    assert_int_equal(cc.gathers, 1);
    assert_int_equal(cc.others, 0);
    for (int i = 0; i < T; i++)
        if (memcmp(&alone.res[i], &with.res[i], sizeof(rlRowResult)))
            fail_msg("row %d differs with a one-rank communicator: token %d vs %d, target "
                     "logprob %.9g vs %.9g", i, with.res[i].token, alone.res[i].token,
                     with.res[i].target_logprob, alone.res[i].target_logprob);
    print_message("%s: %d all-reduces and %d gather through a communicator of one rank, "
                  "results bit-identical\n", CUDA ? "NCCL" : "shared memory", cc.reduces,
                  cc.gathers);
    release(&with);
    release(&alone);
    set->ops->destroy(set);
}

int main(void) {
    const char *backend = getenv("RL_TEST_BACKEND");
    CUDA = backend && !strcmp(backend, "cuda");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_rank_group)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

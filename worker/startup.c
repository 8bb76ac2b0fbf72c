/* startup.c: start-up checks (see startup.h). */
#include "startup.h"

#include "plan.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static double startup_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int startup_wait_redis(const rlRedisUrl *u, int wait_s, rlError *err) {
    double end = startup_now() + wait_s;
    for (;;) {
        redisContext *c = redis_url_connect(u, (struct timeval){2, 0}, err);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type != REDIS_REPLY_ERROR;
            if (!ok)
                rl_error(err, RL_EREDIS, "Redis at %s:%d accepted the connection but PING "
                         "failed: %s", u->host, u->port, r ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return 0;
        }
        if (startup_now() >= end) break;
        sleep(1);
    }
    char last[1024];
    memcpy(last, err->msg, sizeof(last) - 1);
    last[sizeof(last) - 1] = 0;
    return rl_error(err, RL_EREDIS,
                    "%s (gave up after %d s at start, --redis-wait); start redis-server there or "
                    "pass the right --redis URL (`redlm doctor --redis URL` checks it)",
                    last, wait_s);
}

int startup_check_plan(const rlModelConfig *cfg, const rlEngineOptions *o, FILE *log,
                       long long *kv_blocks, rlError *err) {
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    int dev[RL_PLAN_MAX_GPUS], n = o->devices ? o->n_devices : tp * pp;
    if (n > RL_PLAN_MAX_GPUS || n < 1)
        return rl_error(err, RL_EUSAGE, "%d devices: give between 1 and %d", n, RL_PLAN_MAX_GPUS);
    if (plan_check_gpu_count(1, tp, pp, n, err)) return -1;
    for (int i = 0; i < n; i++) dev[i] = o->devices ? o->devices[i] : i;
    rlPlanOptions po;
    plan_options_init(&po, 0, 0);
    po.dtype = !strcmp(o->dtype, "fp16") ? RL_F16 : !strcmp(o->dtype, "fp32") ? RL_F32 : RL_BF16;
    po.max_model_len = o->max_model_len;
    po.max_num_seqs = o->max_num_seqs;
    po.max_num_batched_tokens = o->max_num_batched_tokens;
    po.block_size = o->block_size;
    po.gpu_memory_utilization = o->gpu_memory_utilization;
    if (plan_read_devices(dev, n, &po, err)) return -1;
    rlPlan p;
    int rc = plan_layout(cfg, &po, 1, tp, pp, &p, err);
    if (p.n_layouts) plan_print(log, &p);
    if (!rc) *kv_blocks = p.layouts[0].kv_blocks[0];
    plan_free(&p);
    return rc;
}

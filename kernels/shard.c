/* shard.c: planning which heads, MLP columns, vocabulary rows and layers each
 * rank of a TP x PP layout owns (see shard.h for the rules).
 *
 * Query heads are split as contiguous, near-equal ranges rather than by whole
 * KV-head groups: on Qwen2.5-7B (28 heads, 4 KV heads) at TP 3 whole groups
 * would give 14/7/7 heads, near-equal ranges give 10/9/9 at the price of one
 * or two replicated KV heads, which cost KV memory but no extra compute in
 * the projections that dominate.  The MLP is split in units of 128 columns
 * so every rank's GEMM keeps a width the BLAS and tensor-core tiles like;
 * narrower widths fall back to smaller power-of-two units. */
#include "kernels/shard.h"

#include <string.h>

/* Start of part r when n items are cut into `parts` near-equal ranges. */
static int shard_cut(int n, int parts, int r) {
    return (int)((long long)n * r / parts);
}

/* The widest power-of-two unit (at most 128) that divides the MLP width and
 * still leaves every rank at least one unit, else 1. */
static int shard_mlp_unit(int width, int tp) {
    for (int u = 128; u > 1; u /= 2)
        if (width % u == 0 && width / u >= tp) return u;
    return 1;
}

int rl_shard_plan(const rlModelConfig *cfg, int tp, int pp, const int *partition,
                  rlShard *out, rlError *err) {
    if (tp < 1 || pp < 1)
        return rl_error(err, RL_EUSAGE,
                        "invalid layout TP %d x PP %d: both sizes must be at least 1 "
                        "(e.g. --tp 2 --pp 1)", tp, pp);
    if (cfg->num_layers < 1 || cfg->num_heads < 1 || cfg->num_kv_heads < 1 ||
        cfg->num_heads % cfg->num_kv_heads != 0 || cfg->intermediate_size < 1 ||
        cfg->vocab_size < 1 || cfg->hidden_size < 1 || cfg->head_dim < 1)
        return rl_error(err, RL_EMODEL,
                        "cannot shard a model with %d layers, %d heads, %d KV heads, MLP %d, "
                        "vocab %d: every size must be positive and the heads a multiple of "
                        "the KV heads; check config.json",
                        cfg->num_layers, cfg->num_heads, cfg->num_kv_heads,
                        cfg->intermediate_size, cfg->vocab_size);
    if (pp > cfg->num_layers)
        return rl_error(err, RL_EUSAGE,
                        "PP %d is more pipeline stages than the model's %d layers: every stage "
                        "needs at least one layer; use --pp %d or fewer",
                        pp, cfg->num_layers, cfg->num_layers);

    int layer_start[pp + 1];
    layer_start[0] = 0;
    for (int s = 0; s < pp; s++) {
        int n = partition ? partition[s] : shard_cut(cfg->num_layers, pp, s + 1) -
                                               shard_cut(cfg->num_layers, pp, s);
        if (n < 1)
            return rl_error(err, RL_EUSAGE,
                            "--pp-layer-partition gives stage %d %d layers: every stage needs "
                            "at least one", s, n);
        layer_start[s + 1] = layer_start[s] + n;
    }
    if (layer_start[pp] != cfg->num_layers)
        return rl_error(err, RL_EUSAGE,
                        "--pp-layer-partition adds up to %d layers but the model has %d: give "
                        "%d numbers summing to %d", layer_start[pp], cfg->num_layers, pp,
                        cfg->num_layers);

    int group = cfg->num_heads / cfg->num_kv_heads;
    int unit = shard_mlp_unit(cfg->intermediate_size, tp);
    int units = cfg->intermediate_size / unit;
    for (int s = 0; s < pp; s++) {
        for (int r = 0; r < tp; r++) {
            rlShard *sh = &out[s * tp + r];
            memset(sh, 0, sizeof(*sh));
            sh->tp_rank = r, sh->tp_size = tp, sh->pp_rank = s, sh->pp_size = pp;

            sh->q_head0 = shard_cut(cfg->num_heads, tp, r);
            sh->n_q_heads = shard_cut(cfg->num_heads, tp, r + 1) - sh->q_head0;
            if (sh->n_q_heads > 0) {
                int last = sh->q_head0 + sh->n_q_heads - 1;
                sh->kv_head0 = sh->q_head0 / group;
                sh->n_kv_heads = last / group - sh->kv_head0 + 1;
            } else {
                sh->kv_head0 = 0;
                sh->n_kv_heads = 0;
            }

            sh->mlp0 = shard_cut(units, tp, r) * unit;
            sh->n_mlp = shard_cut(units, tp, r + 1) * unit - sh->mlp0;
            sh->vocab0 = shard_cut(cfg->vocab_size, tp, r);
            sh->n_vocab = shard_cut(cfg->vocab_size, tp, r + 1) - sh->vocab0;
            sh->layer0 = layer_start[s];
            sh->n_layers = layer_start[s + 1] - layer_start[s];
        }
    }
    return 0;
}

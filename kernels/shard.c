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

static int shard_gcd(int a, int b) { return b ? shard_gcd(b, a % b) : a; }
static int shard_lcm(int a, int b) { return a / shard_gcd(a, b) * b; }

/* The widest power-of-two unit (at most 128) that divides the MLP width,
 * is a multiple of `quantum` (a quantized format's group and packing) and
 * still leaves every rank at least one unit; else the narrowest such unit,
 * else quantum itself. */
static int shard_mlp_unit(int width, int tp, int quantum) {
    int fallback = quantum;
    for (int u = 128 > quantum ? 128 : quantum; u >= quantum && u > 1; u /= 2) {
        if (u % quantum || width % u) continue;
        if (width / u >= tp) return u;
        fallback = u;
    }
    return fallback;
}

/* An expert's columns go in the unit (a power of two from 128 down to 16,
 * or quantum) that gives the largest rank the fewest columns, the wider on a
 * tie: an expert is narrow (768 columns in Qwen3-30B-A3B), so a 128 unit
 * would leave TP 4 at 256 / 128 / 256 / 128 where 64 gives 192 each, and an
 * MoE layer's MLP is its experts, with nothing to even it out. */
static int shard_expert_unit(int width, int tp, int quantum) {
    int best = 0, best_max = 0;
    for (int u = 128 > quantum ? 128 : quantum; u >= quantum && u >= 16; u /= 2) {
        if (u % quantum || width % u) continue;
        int units = width / u, most = (units + tp - 1) / tp * u;
        if (!best || most < best_max) best = u, best_max = most;
    }
    return best ? best : shard_mlp_unit(width, tp, quantum);
}

/* A quantized layout cuts every layer on its format's units (kernels/quant.h):
 * o_proj's input and q/k/v's outputs at head boundaries, the MLP at its
 * unit.  Says which cut misses and what to do. */
static int shard_check_cuts(const rlModelConfig *cfg, const rlShard *sh, int tp, rlError *err) {
    const rlQuant *q = &cfg->quant;
    int ku = rl_quant_k_unit(q), nu = rl_quant_n_unit(q), hd = cfg->head_dim;
    int Q = cfg->num_heads * hd, KV = cfg->num_kv_heads * hd, I = cfg->intermediate_size;
    char fmt[64];
    for (int r = 0; r < tp; r++) {
        const struct { const char *what; int cut, whole, unit; } c[] = {
            {"o_proj's input (K)", sh[r].q_head0 * hd, Q, ku},
            {"q_proj's output (N)", sh[r].q_head0 * hd, Q, nu},
            {"k_proj/v_proj's output (N)", sh[r].kv_head0 * hd, KV, nu},
            {"k_proj/v_proj's output (N)", (sh[r].kv_head0 + sh[r].n_kv_heads) * hd, KV, nu},
            {"down_proj's input (K)", sh[r].mlp0, I, ku},
            {"gate_proj/up_proj's output (N)", sh[r].mlp0, I, nu},
        };
        for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
            if (c[i].cut % c[i].unit == 0 || c[i].cut == c[i].whole) continue;
            return rl_error(err, RL_EUSAGE,
                            "TP %d cannot split this %s checkpoint: rank %d's share of %s starts "
                            "at column %d of %d, not on a multiple of %d (whole groups and packed "
                            "words of the format; heads are %d columns wide). Choose another "
                            "--tp, or split the model with --pp instead.",
                            tp, rl_quant_name(q, fmt, sizeof(fmt)), r, c[i].what, c[i].cut,
                            c[i].whole, c[i].unit, hd);
        }
    }
    return 0;
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
    int quantum = shard_lcm(rl_quant_k_unit(&cfg->quant), rl_quant_n_unit(&cfg->quant));
    if (cfg->intermediate_size % quantum)
        return rl_error(err, RL_EMODEL,
                        "intermediate_size %d is not a multiple of %d, the group and packing "
                        "unit of the quantized weights: config.json and the quantization do "
                        "not belong together; check config.json", cfg->intermediate_size,
                        quantum);
    /* The dense MLP, every routed expert and the shared expert: column
     * ranges of each, in units (unit 0: the model has no such part). */
    int width[3] = {cfg->intermediate_size, cfg->num_experts ? cfg->moe_intermediate_size : 0,
                    cfg->num_experts ? cfg->shared_expert_size : 0};
    int unit[3], units[3];
    for (int i = 0; i < 3; i++) {
        unit[i] = !width[i] ? 1
                  : i == 0  ? shard_mlp_unit(width[i], tp, quantum)
                            : shard_expert_unit(width[i], tp, quantum);
        units[i] = width[i] / unit[i];
    }
    /* Query heads go in runs whose columns fill whole quantization units. */
    int hunit = quantum / shard_gcd(quantum, cfg->head_dim);
    if (cfg->num_heads % hunit) hunit = 1;  /* shard_check_cuts says what does not fit */
    int hunits = cfg->num_heads / hunit;
    for (int s = 0; s < pp; s++) {
        for (int r = 0; r < tp; r++) {
            rlShard *sh = &out[s * tp + r];
            memset(sh, 0, sizeof(*sh));
            sh->tp_rank = r, sh->tp_size = tp, sh->pp_rank = s, sh->pp_size = pp;

            sh->q_head0 = shard_cut(hunits, tp, r) * hunit;
            sh->n_q_heads = shard_cut(hunits, tp, r + 1) * hunit - sh->q_head0;
            if (sh->n_q_heads > 0) {
                int last = sh->q_head0 + sh->n_q_heads - 1;
                sh->kv_head0 = sh->q_head0 / group;
                sh->n_kv_heads = last / group - sh->kv_head0 + 1;
            } else {
                sh->kv_head0 = 0;
                sh->n_kv_heads = 0;
            }

            int *first[3] = {&sh->mlp0, &sh->moe0, &sh->shared0};
            int *count[3] = {&sh->n_mlp, &sh->n_moe, &sh->n_shared};
            for (int i = 0; i < 3; i++) {
                *first[i] = shard_cut(units[i], tp, r) * unit[i];
                *count[i] = shard_cut(units[i], tp, r + 1) * unit[i] - *first[i];
            }
            sh->vocab0 = shard_cut(cfg->vocab_size, tp, r);
            sh->n_vocab = shard_cut(cfg->vocab_size, tp, r + 1) - sh->vocab0;
            sh->layer0 = layer_start[s];
            sh->n_layers = layer_start[s + 1] - layer_start[s];
        }
    }
    return cfg->quant.method ? shard_check_cuts(cfg, out, tp, err) : 0;
}

void rl_shard_whole(const rlModelConfig *cfg, rlShard *out) {
    *out = (rlShard){.tp_size = 1, .pp_size = 1, .n_q_heads = cfg->num_heads,
                     .n_kv_heads = cfg->num_kv_heads, .n_mlp = cfg->intermediate_size,
                     .n_moe = cfg->num_experts ? cfg->moe_intermediate_size : 0,
                     .n_shared = cfg->num_experts ? cfg->shared_expert_size : 0,
                     .n_vocab = cfg->vocab_size, .n_layers = cfg->num_layers};
}

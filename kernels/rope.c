/* rope.c: inverse frequencies of the default, linear, YaRN and Llama 3
 * rotary embeddings, as Hugging Face's _compute_*_parameters define them
 * (modeling_rope_utils.py), in double rather than fp32: Hugging Face runs
 * these formulas in fp32, which the reference fixtures' float64 math does
 * not, and the difference is far below the tests' tolerances either way.
 * The attention factor of YaRN is resolved by the loader (it depends on
 * keys only, worker/model/modelcfg.c) and passed through here. */
#include "kernels/rope.h"

#include <math.h>

/* YaRN's "dimension that rotates num_rotations times over the context". */
static double rope_yarn_dim(double rotations, int dim, double base, double context) {
    return dim * log(context / (rotations * 2 * M_PI)) / (2 * log(base));
}

void rl_rope_frequencies(const rlModelConfig *cfg, double *inv_freq, double *scale) {
    const rlRopeScaling *r = &cfg->rope_scaling;
    int dim = cfg->head_dim, half = dim / 2;
    double base = cfg->rope_theta;
    *scale = 1.0;
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(base, 2.0 * i / dim);

    switch (r->type) {
    case RL_ROPE_DEFAULT:
        return;
    case RL_ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv_freq[i] /= r->factor;
        return;
    case RL_ROPE_YARN: {
        /* Dimensions that rotate often keep their frequency (extrapolation),
         * those that rotate less than once over the original context are
         * divided by factor (interpolation), with a linear ramp between. */
        double low = rope_yarn_dim(r->beta_fast, dim, base, r->original_max_position);
        double high = rope_yarn_dim(r->beta_slow, dim, base, r->original_max_position);
        if (r->truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;
        for (int i = 0; i < half; i++) {
            double ramp = (i - low) / (high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrapolated = inv_freq[i], interpolated = inv_freq[i] / r->factor;
            inv_freq[i] = interpolated * ramp + extrapolated * (1 - ramp);
        }
        *scale = r->attention_factor;
        return;
    }
    case RL_ROPE_LLAMA3: {
        double low_wavelen = r->original_max_position / r->low_freq_factor;
        double high_wavelen = r->original_max_position / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double wavelen = 2 * M_PI / inv_freq[i];
            if (wavelen > low_wavelen) {
                inv_freq[i] /= r->factor;
            } else if (!(wavelen < high_wavelen)) {
                double smooth = (r->original_max_position / wavelen - r->low_freq_factor) /
                                (r->high_freq_factor - r->low_freq_factor);
                inv_freq[i] = (1 - smooth) * inv_freq[i] / r->factor + smooth * inv_freq[i];
            }
        }
        return;
    }
    }
}

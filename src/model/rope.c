#include "model/rope.h"

#include <math.h>

/* torch computes base ** (arange(0, dim, 2) / dim) in float32 */
static float default_inv_freq(double base, int i, int dim) {
    float expo = (float)(2 * i) / (float)dim;
    return (float)(1.0 / (double)powf((float)base, expo));
}

static double yarn_get_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rot, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

void hr_rope_freqs(const hr_rope_params *rp, int rot_dim, int max_pos,
                   int seq_len, float *inv_freq, float *attn_factor) {
    int half = rot_dim / 2;
    double base = rp->theta, factor = rp->factor > 0 ? rp->factor : 1.0;
    *attn_factor = 1.0f;
    switch (rp->type) {
    case HR_ROPE_DEFAULT:
        for (int i = 0; i < half; i++)
            inv_freq[i] = default_inv_freq(base, i, rot_dim);
        break;
    case HR_ROPE_LINEAR:
        for (int i = 0; i < half; i++)
            inv_freq[i] = default_inv_freq(base, i, rot_dim) / (float)factor;
        break;
    case HR_ROPE_DYNAMIC: {
        int mp = rp->original_max_pos ? rp->original_max_pos : max_pos;
        int L = seq_len > mp ? seq_len : mp;
        double b = base * pow(factor * L / mp - (factor - 1), (double)rot_dim / (rot_dim - 2));
        for (int i = 0; i < half; i++)
            inv_freq[i] = default_inv_freq(b, i, rot_dim);
        break;
    }
    case HR_ROPE_LLAMA3: {
        double old = rp->original_max_pos, lo = rp->low_freq_factor,
               hi = rp->high_freq_factor;
        double lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < half; i++) {
            float f = default_inv_freq(base, i, rot_dim);
            double wl = 2 * M_PI / f;
            if (wl < hi_wl) {
                inv_freq[i] = f;
            } else if (wl > lo_wl) {
                inv_freq[i] = (float)(f / factor);
            } else {
                double s = (old / wl - lo) / (hi - lo);
                inv_freq[i] = (float)((1 - s) * f / factor + s * f);
            }
        }
        break;
    }
    case HR_ROPE_YARN: {
        int mp = rp->original_max_pos ? rp->original_max_pos : max_pos;
        double af = rp->attention_factor;
        if (af <= 0) {
            if (rp->mscale > 0 && rp->mscale_all_dim > 0)
                af = yarn_get_mscale(factor, rp->mscale) /
                     yarn_get_mscale(factor, rp->mscale_all_dim);
            else
                af = yarn_get_mscale(factor, 1.0);
        }
        *attn_factor = (float)af;
        double lo = yarn_correction_dim(rp->beta_fast, rot_dim, base, mp);
        double hi = yarn_correction_dim(rp->beta_slow, rot_dim, base, mp);
        if (rp->truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0)
            lo = 0;
        if (hi > rot_dim - 1)
            hi = rot_dim - 1;
        if (lo == hi)
            hi += 0.001;
        for (int i = 0; i < half; i++) {
            float pos_freq = powf((float)base, (float)(2 * i) / (float)rot_dim);
            float extrap = 1.0f / pos_freq, interp = 1.0f / ((float)factor * pos_freq);
            float ramp = (float)((i - lo) / (hi - lo));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp;
            inv_freq[i] = interp * (1 - ef) + extrap * ef;
        }
        break;
    }
    case HR_ROPE_LONGROPE: {
        int orig = rp->original_max_pos ? rp->original_max_pos : max_pos;
        double f = rp->original_max_pos ? (double)max_pos / orig : factor;
        double af = rp->attention_factor;
        if (af <= 0)
            af = f <= 1.0 ? 1.0 : sqrt(1 + log(f) / log((double)orig));
        *attn_factor = (float)af;
        const float *ext = seq_len > orig ? rp->long_factor : rp->short_factor;
        for (int i = 0; i < half; i++) {
            float shape = (float)(2 * i) / (float)rot_dim;
            inv_freq[i] = 1.0f / (ext[i] * powf((float)base, shape));
        }
        break;
    }
    }
}

static bool crosses(const hr_rope_params *rp, int max_pos, int old_len, int new_len) {
    if (rp->type != HR_ROPE_LONGROPE)
        return false;
    int orig = rp->original_max_pos ? rp->original_max_pos : max_pos;
    return old_len > 0 && old_len <= orig && new_len > orig;
}

bool hr_rope_needs_recompute(const hr_hparams *hp, int old_len, int new_len) {
    return crosses(&hp->rope, hp->max_pos, old_len, new_len) ||
           (hp->has_rope_local && crosses(&hp->rope_local, hp->max_pos, old_len, new_len));
}

#include "train/loss.h"
#include "core/error.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"sft", "dpo", "orpo"};

int hr_loss_parse(const char *name) {
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, NAMES[i]))
            return i;
    return -1;
}

const char *hr_loss_name(hr_loss_kind k) { return NAMES[k]; }
bool hr_loss_pairs(hr_loss_kind k) { return k != HR_LOSS_SFT; }
bool hr_loss_needs_ref(hr_loss_kind k) { return k == HR_LOSS_DPO; }

/* log sigmoid(x) and sigmoid(-x), without overflow */
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid_neg(double x) {
    return x >= 0 ? exp(-x) / (1 + exp(-x)) : 1 / (1 + exp(x));
}

static double sft(int n, const double *lp, const int *cnt, double *w) {
    long t = 0;
    double sum = 0;
    for (int s = 0; s < n; s++) {
        t += cnt[s];
        sum -= lp[s];
    }
    for (int s = 0; w && s < n; s++)
        w[s] = t ? -1.0 / t : 0;
    return t ? sum / t : 0;
}

static double dpo(double beta, int np, const double *lp, const double *ref, double *w) {
    double loss = 0;
    for (int i = 0; i < np; i++) {
        const double *p = lp + 2 * i, *r = ref + 2 * i;
        double z = beta * ((p[0] - p[1]) - (r[0] - r[1]));
        loss -= log_sigmoid(z);
        if (w) { /* d(-log sigmoid z)/dz = -sigmoid(-z) */
            double g = -sigmoid_neg(z) * beta / np;
            w[2 * i] = g;
            w[2 * i + 1] = -g;
        }
    }
    return loss / np;
}

static double orpo(double lambda, int np, const double *lp, const int *cnt, double *w) {
    long tc = 0;
    double nll = 0, ratio = 0;
    for (int i = 0; i < np; i++) {
        tc += cnt[2 * i];
        nll -= lp[2 * i];
    }
    for (int i = 0; i < np; i++) {
        int nc = cnt[2 * i], nr = cnt[2 * i + 1];
        if (w)
            w[2 * i] = w[2 * i + 1] = 0;
        if (!nc || !nr)
            continue;
        double pc = lp[2 * i] / nc, pr = lp[2 * i + 1] / nr;
        /* log(1 - e^p) = log(-expm1(p)) */
        double lo = (pc - pr) - (log(-expm1(pc)) - log(-expm1(pr)));
        ratio += log_sigmoid(lo);
        if (w) { /* d lo / d pc = 1 / (1 - e^pc), d lo / d pr = -1 / (1 - e^pr) */
            double g = -lambda / np * sigmoid_neg(lo);
            w[2 * i] = g / (-expm1(pc)) / nc;
            w[2 * i + 1] = -g / (-expm1(pr)) / nr;
        }
    }
    if (w && tc)
        for (int i = 0; i < np; i++)
            w[2 * i] -= 1.0 / tc;
    return (tc ? nll / tc : 0) - lambda * ratio / np;
}

double hr_loss_eval(hr_loss_kind k, double param, int n_seqs, const double *lp, const int *cnt,
                    const double *ref, double *w) {
    if (k == HR_LOSS_SFT)
        return sft(n_seqs, lp, cnt, w);
    for (int s = 0; w && s < n_seqs; s++)
        w[s] = 0;
    int np = n_seqs / 2;
    if (np == 0)
        return 0;
    return k == HR_LOSS_DPO ? dpo(param, np, lp, ref, w) : orpo(param, np, lp, cnt, w);
}

int hr_loss_step(hr_bp *b, const hr_bp_batch *bt, hr_loss_kind k, double param,
                 const double *ref, bool grad, double *loss, int *n_targets, hr_error *err) {
    *loss = 0;
    *n_targets = 0; /* every target of the batch, the rejected's too */
    int n = bt->n_seqs;
    if (hr_loss_pairs(k) && (n < 0 || n % 2))
        return hr_err(err, HR_EINVAL, "a preference batch of %d sequences (pairs)", n);
    size_t nn = n > 0 ? (size_t)n : 1;
    double *lp = malloc(3 * nn * sizeof *lp);
    int *cnt = malloc(nn * sizeof *cnt);
    int rc = 0;
    if (!lp || !cnt) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    double *rf = lp + nn, *w = lp + 2 * nn;
    if (hr_loss_needs_ref(k) && !ref) {
        if ((rc = hr_bp_forward(b, bt, false, rf, cnt, err)))
            goto done;
        ref = rf;
    }
    if ((rc = hr_bp_forward(b, bt, true, lp, cnt, err)))
        goto done;
    *loss = hr_loss_eval(k, param, n, lp, cnt, ref, w);
    for (int s = 0; s < n; s++)
        *n_targets += cnt[s];
    if (grad)
        hr_bp_backward(b, w);
done:
    free(lp);
    free(cnt);
    return rc;
}

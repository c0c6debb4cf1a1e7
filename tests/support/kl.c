#include "support/kl.h"

#include <math.h>

double hr_logsumexp_f64(const float *x, int n) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++)
        s += exp(x[i] - mx);
    return mx + log(s);
}

void hr_log_softmax(const float *x, double *out, int n) {
    double l = hr_logsumexp_f64(x, n);
    for (int i = 0; i < n; i++)
        out[i] = x[i] - l;
}

double hr_kl_logits(const float *p, const float *q, int n, double *work) {
    double *lp = work, *lq = work + n, kl = 0;
    hr_log_softmax(p, lp, n);
    hr_log_softmax(q, lq, n);
    for (int i = 0; i < n; i++)
        kl += exp(lp[i]) * (lp[i] - lq[i]);
    return kl;
}

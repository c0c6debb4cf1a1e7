#include "sample/sampler.h"
#include "hearth.h"

#include <math.h>
#include <stdlib.h>

int hr_sampler_init(hr_sampler *s, const hr_sampler_params *p, int n_vocab) {
    s->p = *p;
    s->n_vocab = n_vocab;
    hr_rng_seed(&s->rng, p->seed);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->order = malloc((size_t)n_vocab * sizeof *s->order);
    if (!s->probs || !s->order) {
        hr_sampler_deinit(s);
        return HR_ENOMEM;
    }
    return 0;
}

void hr_sampler_deinit(hr_sampler *s) {
    if (!s)
        return;
    free(s->probs);
    free(s->order);
    s->probs = NULL;
    s->order = NULL;
}

int32_t hr_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

static int by_prob_desc(const void *a, const void *b, void *key) {
    const float *p = key;
    float x = p[*(const int32_t *)a], y = p[*(const int32_t *)b];
    if (x != y)
        return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t hr_sampler_sample(hr_sampler *s, const float *logits) {
    int n = s->n_vocab;
    if (s->p.temp <= 0)
        return hr_argmax(logits, n);
    /* softmax(logits / temp) */
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->probs[i] = expf((logits[i] - mx) / s->p.temp);
        sum += s->probs[i];
        s->order[i] = i;
    }
    for (int i = 0; i < n; i++)
        s->probs[i] = (float)(s->probs[i] / sum);
    qsort_r(s->order, (size_t)n, sizeof *s->order, by_prob_desc, s->probs);
    int keep = n;
    if (s->p.top_p > 0 && s->p.top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += s->probs[s->order[i]];
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0) {
        float floor_p = s->probs[s->order[0]] * s->p.min_p;
        int k = 1;
        while (k < keep && s->probs[s->order[k]] >= floor_p)
            k++;
        keep = k;
    }
    if (s->p.top_k > 0 && s->p.top_k < keep)
        keep = s->p.top_k;
    double total = 0;
    for (int i = 0; i < keep; i++)
        total += s->probs[s->order[i]];
    double r = hr_rng_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += s->probs[s->order[i]];
        if (r < acc)
            return s->order[i];
    }
    return s->order[keep - 1];
}

int hr_top_logprobs(const float *logits, int n, int k, int32_t *ids, float *lps) {
    if (k > n)
        k = n;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    int have = 0;
    for (int i = 0; i < n; i++) {
        /* insertion into a k-long descending list */
        if (have == k && logits[i] <= logits[ids[k - 1]])
            continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && logits[ids[j - 1]] < logits[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int i = 0; i < have; i++)
        lps[i] = logits[ids[i]] - lse;
    return have;
}

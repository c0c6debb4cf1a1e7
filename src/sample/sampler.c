#include "sample/sampler.h"
#include "core/error.h"
#include "kernels/cpu/cpu.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct hr_sampler {
    hr_sampler_params p;
    hr_rng rng;
    int n_vocab;
    int32_t *xtc_special, *bias_ids;
    float *bias_values;
    int32_t *hist;   /* ring of the last hist_cap tokens */
    int hist_cap, hist_len, hist_head;
    uint32_t *stamp; /* [n_vocab] dedup marks for penalties */
    uint32_t stamp_gen;
    float *work;     /* [n_vocab] filtered logprobs */
    float *hval;     /* [n_vocab] heap values */
    int32_t *hid;    /* [n_vocab] heap ids */
    uint32_t *rkey;  /* [2 n_vocab] top_p's sort keys, two buffers (NULL without top_p) */
    int32_t *rid;    /* [n_vocab] top_p's second id buffer */
};

void hr_sampler_params_default(hr_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->min_tokens_to_keep = 1;
    p->xtc_threshold = 0.1f;
    p->repetition_context_size = 20;
    p->presence_context_size = 20;
    p->frequency_context_size = 20;
}

/* ---- setup ------------------------------------------------------------------ */

static int validate(const hr_sampler_params *p, int V, hr_error *err) {
    if (!(p->temp >= 0) || !isfinite(p->temp))
        return hr_err(err, HR_ERANGE, "temperature must be a non-negative number");
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return hr_err(err, HR_ERANGE, "top_p must be in [0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return hr_err(err, HR_ERANGE, "min_p must be in [0, 1]");
    if (p->min_tokens_to_keep < 1)
        return hr_err(err, HR_ERANGE, "min_tokens_to_keep must be a positive integer");
    if (p->top_k < 0 || (p->top_k > 0 && p->top_k >= V && p->temp > 0))
        return hr_err(err, HR_ERANGE, "top_k must be an integer in (0, %d), or 0 to "
                      "disable it", V);
    if (!(p->xtc_probability >= 0 && p->xtc_probability <= 1))
        return hr_err(err, HR_ERANGE, "xtc_probability must be in [0, 1]");
    if (!(p->xtc_threshold >= 0 && p->xtc_threshold <= 0.5))
        return hr_err(err, HR_ERANGE, "xtc_threshold must be in [0, 0.5]");
    if (!(p->repetition_penalty >= 0) || !isfinite(p->repetition_penalty))
        return hr_err(err, HR_ERANGE, "repetition_penalty must be a non-negative number");
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return hr_err(err, HR_ERANGE, "presence_penalty and frequency_penalty must be "
                      "finite numbers");
    if (p->repetition_context_size < 0 || p->presence_context_size < 0 ||
        p->frequency_context_size < 0)
        return hr_err(err, HR_ERANGE, "penalty context sizes must be non-negative");
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= V)
            return hr_err(err, HR_ERANGE, "logit_bias: token id %d is outside the "
                          "vocabulary (0..%d)", p->bias_ids[i], V - 1);
        if (!isfinite(p->bias_values[i]))
            return hr_err(err, HR_ERANGE, "logit_bias: the bias of token %d is not a "
                          "finite number", p->bias_ids[i]);
    }
    for (int i = 0; i < p->n_xtc_special; i++)
        if (p->xtc_special[i] < 0 || p->xtc_special[i] >= V)
            return hr_err(err, HR_ERANGE, "xtc special token %d is outside the vocabulary",
                          p->xtc_special[i]);
    return 0;
}

static void *dup_array(const void *src, size_t n, size_t size) {
    if (!n)
        return NULL;
    void *d = malloc(n * size);
    if (d)
        memcpy(d, src, n * size);
    return d;
}

/* top_p filters only inside (0, 1); its sort buffers exist only then */
static bool uses_top_p(const hr_sampler_params *p) { return p->top_p > 0 && p->top_p < 1; }

int hr_sampler_new(hr_sampler **out, const hr_sampler_params *p, int n_vocab,
                   hr_error *err) {
    *out = NULL;
    int rc = validate(p, n_vocab, err);
    if (rc)
        return rc;
    hr_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    hr_rng_seed(&s->rng, p->seed);
    int cap = 1;
    if (p->repetition_penalty != 0 && p->repetition_penalty != 1)
        cap = p->repetition_context_size > cap ? p->repetition_context_size : cap;
    if (p->presence_penalty != 0)
        cap = p->presence_context_size > cap ? p->presence_context_size : cap;
    if (p->frequency_penalty != 0)
        cap = p->frequency_context_size > cap ? p->frequency_context_size : cap;
    s->hist_cap = cap;
    s->hist = malloc((size_t)cap * sizeof *s->hist);
    s->stamp = calloc((size_t)n_vocab, sizeof *s->stamp);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->hval = malloc((size_t)n_vocab * sizeof *s->hval);
    s->hid = malloc((size_t)n_vocab * sizeof *s->hid);
    bool top_p = uses_top_p(p);
    if (top_p) {
        s->rkey = malloc((size_t)n_vocab * 2 * sizeof *s->rkey);
        s->rid = malloc((size_t)n_vocab * sizeof *s->rid);
    }
    s->xtc_special = dup_array(p->xtc_special, (size_t)p->n_xtc_special, sizeof(int32_t));
    s->bias_ids = dup_array(p->bias_ids, (size_t)p->n_bias, sizeof(int32_t));
    s->bias_values = dup_array(p->bias_values, (size_t)p->n_bias, sizeof(float));
    if (!s->hist || !s->stamp || !s->work || !s->hval || !s->hid ||
        (top_p && (!s->rkey || !s->rid)) || (p->n_xtc_special && !s->xtc_special) ||
        (p->n_bias && (!s->bias_ids || !s->bias_values))) {
        hr_sampler_free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    s->p.xtc_special = s->xtc_special;
    s->p.bias_ids = s->bias_ids;
    s->p.bias_values = s->bias_values;
    *out = s;
    return 0;
}

void hr_sampler_free(hr_sampler *s) {
    if (!s)
        return;
    free(s->hist);
    free(s->stamp);
    free(s->work);
    free(s->hval);
    free(s->hid);
    free(s->rkey);
    free(s->rid);
    free(s->xtc_special);
    free(s->bias_ids);
    free(s->bias_values);
    free(s);
}

void hr_sampler_accept(hr_sampler *s, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++) {
        s->hist[s->hist_head] = tokens[i];
        s->hist_head = (s->hist_head + 1) % s->hist_cap;
        if (s->hist_len < s->hist_cap)
            s->hist_len++;
    }
}

/* ---- logits processors -------------------------------------------------------- */

/* The i-th of the last n history tokens (n <= hist_len). */
static int32_t hist_at(const hr_sampler *s, int n, int i) {
    int start = (s->hist_head - n + s->hist_cap) % s->hist_cap;
    return s->hist[(start + i) % s->hist_cap];
}

static uint32_t new_stamp(hr_sampler *s) {
    if (++s->stamp_gen == 0) { /* wrapped: clear the marks */
        memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
        s->stamp_gen = 1;
    }
    return s->stamp_gen;
}

static void apply_processors(hr_sampler *s, float *logits) {
    const hr_sampler_params *p = &s->p;
    for (int i = 0; i < p->n_bias; i++)
        logits[p->bias_ids[i]] += p->bias_values[i];
    int n;
    /* repetition and presence: once per distinct token in the window */
    if (p->repetition_penalty != 0 && p->repetition_penalty != 1 &&
        (n = s->hist_len < p->repetition_context_size ? s->hist_len
                                                       : p->repetition_context_size) > 0) {
        uint32_t st = new_stamp(s);
        for (int i = 0; i < n; i++) {
            int32_t t = hist_at(s, n, i);
            if (s->stamp[t] == st)
                continue;
            s->stamp[t] = st;
            logits[t] = logits[t] < 0 ? logits[t] * p->repetition_penalty
                                      : logits[t] / p->repetition_penalty;
        }
    }
    if (p->presence_penalty != 0 &&
        (n = s->hist_len < p->presence_context_size ? s->hist_len
                                                    : p->presence_context_size) > 0) {
        uint32_t st = new_stamp(s);
        for (int i = 0; i < n; i++) {
            int32_t t = hist_at(s, n, i);
            if (s->stamp[t] != st) {
                s->stamp[t] = st;
                logits[t] -= p->presence_penalty;
            }
        }
    }
    /* frequency: once per occurrence */
    if (p->frequency_penalty != 0 &&
        (n = s->hist_len < p->frequency_context_size ? s->hist_len
                                                     : p->frequency_context_size) > 0)
        for (int i = 0; i < n; i++)
            logits[hist_at(s, n, i)] -= p->frequency_penalty;
}

float hr_logsumexp(const float *x, int n) {
    const hr_cpu_kernels *K = hr_cpu();
    float mx = K->max(x, n);
    return mx + (float)log(K->exp_sum(NULL, x, n, mx, 1.0f));
}

static void log_softmax(float *x, int n) {
    float lse = hr_logsumexp(x, n);
    for (int i = 0; i < n; i++)
        x[i] -= lse;
}

/* ---- the vocabulary in order without a full comparison sort: top_p sorts
 * its candidates by radix, top_k / min_p keep the k best in a heap with the
 * worst on top. Ties go to the lower id. ------------------------------------------ */

static inline int heap_less(const hr_sampler *s, int a, int b) {
    return s->hval[a] < s->hval[b] || (s->hval[a] == s->hval[b] && s->hid[a] > s->hid[b]);
}

static inline void heap_swap(hr_sampler *s, int a, int b) {
    float v = s->hval[a];
    int32_t id = s->hid[a];
    s->hval[a] = s->hval[b];
    s->hid[a] = s->hid[b];
    s->hval[b] = v;
    s->hid[b] = id;
}

/* the worst entry on top: a bounded heap of the k best so far */
static void sift_down(hr_sampler *s, int i, int n) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(s, l, m))
            m = l;
        if (r < n && heap_less(s, r, m))
            m = r;
        if (m == i)
            return;
        heap_swap(s, i, m);
        i = m;
    }
}

/* The ids of the entries of w at or above floor (finite), best first, ties
 * in id order, into *ids; returns their count. A stable radix sort, a byte
 * a pass, of keys that order the floats descending (-0 counted as +0, its
 * equal), taken in id order: linear where popping a heap of most of a
 * 152k vocabulary (a flat distribution) took 10 ms. */
static int sort_desc(hr_sampler *s, const float *w, float floor, const int32_t **ids) {
    uint32_t *key = s->rkey, *key2 = s->rkey + s->n_vocab;
    int32_t *id = s->hid, *id2 = s->rid;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (w[i] >= floor && w[i] > -INFINITY) {
            float v = w[i] + 0.0f; /* -0 + 0 = +0 */
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            key[n] = u & 0x80000000u ? u : ~(u | 0x80000000u); /* ascending: v descending */
            id[n++] = i;
        }
    for (int shift = 0; shift < 32; shift += 8) {
        int at[256] = {0};
        for (int i = 0; i < n; i++)
            at[key[i] >> shift & 255]++;
        if (n == 0 || at[key[0] >> shift & 255] == n)
            continue; /* one digit for all: already in order */
        for (int b = 0, sum = 0; b < 256; b++) {
            int c = at[b];
            at[b] = sum;
            sum += c;
        }
        for (int i = 0; i < n; i++) {
            int j = at[key[i] >> shift & 255]++;
            key2[j] = key[i];
            id2[j] = id[i];
        }
        uint32_t *tk = key;
        key = key2;
        key2 = tk;
        int32_t *ti = id;
        id = id2;
        id2 = ti;
    }
    *ids = id;
    return n;
}

/* Stamp the k best finite entries of w (ties: the lower id) with a new
 * stamp, which it returns: one pass keeping the k best so far in a heap
 * with the worst on top, so most entries cost a comparison. */
static uint32_t stamp_best(hr_sampler *s, const float *w, int k) {
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        if (!(w[i] > -INFINITY))
            continue;
        if (n < k) {
            s->hval[n] = w[i];
            s->hid[n++] = i;
            for (int j = n - 1; j > 0;) { /* sift up: the worst rises */
                int p = (j - 1) / 2;
                if (!heap_less(s, j, p))
                    break;
                heap_swap(s, j, p);
                j = p;
            }
        } else if (w[i] > s->hval[0]) { /* equal: a later id loses the tie */
            s->hval[0] = w[i];
            s->hid[0] = i;
            sift_down(s, 0, n);
        }
    }
    uint32_t st = new_stamp(s);
    for (int i = 0; i < n; i++)
        s->stamp[s->hid[i]] = st;
    return st;
}

static void drop_unstamped(hr_sampler *s, float *w, uint32_t st) {
    for (int i = 0; i < s->n_vocab; i++)
        if (s->stamp[i] != st)
            w[i] = -INFINITY;
}

/* ---- filters on logprobs (mlx-lm apply_*) --------------------------------------- */

static void apply_top_p(hr_sampler *s, float *w) {
    /* keep token t iff the probability mass strictly above it is < top_p.
     * The tokens below floor hold less than (1 - top_p) / e together, so
     * the kept ones are among those at or above it: the sort starts with
     * only those (all of them again, should rounding leave it short). */
    float floor = logf((1.0f - s->p.top_p) / (float)s->n_vocab) - 1.0f;
    for (;;) {
        const int32_t *ids;
        int n = sort_desc(s, w, floor, &ids);
        uint32_t st = new_stamp(s);
        double above = 0;
        for (int i = 0; i < n && above < s->p.top_p; i++) {
            s->stamp[ids[i]] = st;
            above += exp((double)w[ids[i]]);
        }
        if (above >= s->p.top_p || floor == -INFINITY) {
            drop_unstamped(s, w, st);
            return;
        }
        floor = -INFINITY;
    }
}

static void apply_min_p(hr_sampler *s, float *w) {
    float floor_lp = hr_cpu()->max(w, s->n_vocab) + logf(s->p.min_p);
    /* the top min_tokens_to_keep survive whatever their probability */
    uint32_t st = stamp_best(s, w, s->p.min_tokens_to_keep);
    for (int i = 0; i < s->n_vocab; i++)
        if (w[i] < floor_lp && s->stamp[i] != st)
            w[i] = -INFINITY;
}

static void apply_xtc(hr_sampler *s, float *w) {
    double u = hr_rng_uniform(&s->rng);
    if (u > s->p.xtc_probability)
        return;
    /* probs = softmax(w); remove every token above the threshold except the
     * least likely of them; special tokens are never removed */
    double lse = hr_logsumexp(w, s->n_vocab), thr = s->p.xtc_threshold, min_above = INFINITY;
    for (int i = 0; i < s->n_vocab; i++) {
        double pr = exp(w[i] - lse);
        if (pr > thr && pr < min_above)
            min_above = pr;
    }
    uint32_t st = new_stamp(s);
    for (int i = 0; i < s->p.n_xtc_special; i++)
        s->stamp[s->p.xtc_special[i]] = st;
    for (int i = 0; i < s->n_vocab; i++)
        if (exp(w[i] - lse) > min_above && s->stamp[i] != st)
            w[i] = -INFINITY;
}

static void apply_top_k(hr_sampler *s, float *w) {
    drop_unstamped(s, w, stamp_best(s, w, s->p.top_k));
}

/* A draw from softmax(w / temp): w becomes the weights e^((w - max) /
 * temp) (0 for the filtered-out -inf entries), r uniform in [0, their sum),
 * the first token whose running sum exceeds r. */
static int32_t categorical(hr_sampler *s, float *w) {
    const hr_cpu_kernels *K = hr_cpu();
    int n = s->n_vocab;
    float mx = K->max(w, n);
    double total = K->exp_sum(w, w, n, mx, (float)(1.0 / s->p.temp));
    double r = hr_rng_uniform(&s->rng) * total, acc = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (w[i] == 0)
            continue;
        last = i;
        acc += w[i];
        if (r < acc)
            return i;
    }
    return last >= 0 ? last : hr_argmax(w, n); /* r rounded up to the sum */
}

/* log_softmax, then the filters and the draw. */
static int32_t draw(hr_sampler *s, float *logits) {
    log_softmax(logits, s->n_vocab);
    if (s->p.temp == 0)
        return hr_argmax(logits, s->n_vocab);
    float *w = s->work;
    memcpy(w, logits, (size_t)s->n_vocab * sizeof *w);
    if (uses_top_p(&s->p))
        apply_top_p(s, w);
    if (s->p.min_p != 0)
        apply_min_p(s, w);
    if (s->p.xtc_probability > 0)
        apply_xtc(s, w);
    if (s->p.top_k > 0)
        apply_top_k(s, w);
    return categorical(s, w);
}

int32_t hr_sampler_sample(hr_sampler *s, float *logits) {
    apply_processors(s, logits);
    return draw(s, logits);
}

int32_t hr_sampler_resample(hr_sampler *s, float *logprobs) {
    return draw(s, logprobs);
}

/* ---- helpers ---------------------------------------------------------------------- */

int32_t hr_argmax(const float *logits, int n) { return hr_cpu()->argmax(logits, n); }

int hr_top_logprobs(const float *logprobs, int n, int k, int32_t *ids, float *lps) {
    if (k > n)
        k = n;
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (have == k && logprobs[i] <= logprobs[ids[k - 1]])
            continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && logprobs[ids[j - 1]] < logprobs[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int i = 0; i < have; i++)
        lps[i] = logprobs[ids[i]];
    return have;
}

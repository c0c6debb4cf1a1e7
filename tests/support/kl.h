/* log-sum-exp, log-softmax and KL(p || q) between the softmaxes of two
 * logit rows, in double: the parity tests' log-probabilities, and the
 * quantization tests' and bench_kvkl's measure of one step. */
#ifndef HR_TESTS_KL_H
#define HR_TESTS_KL_H

/* log(sum exp(x)) over n values, in double (the max taken out first;
 * the sampler's hr_logsumexp sums in float) */
double hr_logsumexp_f64(const float *x, int n);
/* out = log_softmax(x) over n values, in double */
void hr_log_softmax(const float *x, double *out, int n);
/* work: 2 n doubles of scratch */
double hr_kl_logits(const float *p, const float *q, int n, double *work);

#endif

/* The CPU's mixture-of-experts MLP (kernels/backend.h hr_moe_args): route
 * every row, gather the rows of each chosen expert into one group, run that
 * expert's gate/up/down products on its group (only the routed experts'
 * weights are read), and sum each row's k results in its routing order. */
#ifndef HR_KERNELS_CPU_MOE_H
#define HR_KERNELS_CPU_MOE_H

#include "core/pool.h"
#include "kernels/backend.h"

typedef struct hr_moe_scratch hr_moe_scratch;

/* Scratch for steps of up to max_tokens rows of d, n_experts experts, k
 * routed per row, experts (routed or shared) of up to ff; NULL: out of
 * memory. */
hr_moe_scratch *hr_moe_scratch_new(int max_tokens, int d, int n_experts, int k, int ff);
void hr_moe_scratch_free(hr_moe_scratch *s);

/* The MLP over T rows (T <= the scratch's max_tokens). */
void hr_moe(hr_pool *pool, hr_moe_scratch *s, const hr_moe_args *a, int T);

/* One row's routing (exposed for tests): the k chosen experts, best first
 * (ties: the lower index), and their weights, from n_experts logits. */
void hr_moe_route(const float *logits, int n_experts, int k, int router, bool norm_topk,
                  int32_t *sel, float *w);
/* The same for HR_BROUTER_SIGMOID_GROUPED (kernels/backend.h): bias
 * [n_experts], up to 1024 experts. */
void hr_moe_route_grouped(const float *logits, const float *bias, int n_experts, int k,
                          int n_group, int topk_group, bool norm_topk, float scale,
                          int32_t *sel, float *w);

#endif

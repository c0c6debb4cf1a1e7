/* The CUDA backend (kernels/backend.h): device memory through the CUDA
 * runtime, each forward context one non-blocking stream. Ops are queued on
 * the stream; end() waits for the step and turns any CUDA error into the
 * step's error. The kernels are in ops.cuh. */
extern "C" {
#include "core/error.h"
#include "core/fault.h"
#include "kernels/cuda/cuda.h"
#include "kernels/graphs.h"
}
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_gqa.cuh"
#include "kernels/cuda/attention_tiled.cuh"
#include "kernels/cuda/mmq.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/mv_span.cuh"
extern "C" {
#include "kernels/cpu/turbo_codebooks.h"
}
#include "kernels/cuda/recurrent.cuh"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16

typedef struct cu_dev {
    int id;
} cu_dev;

typedef struct cu_ctx {
    hr_backend *be;
    int dev;
    cudaStream_t stream;
    int max_tokens, max_seqs, max_tab, freq_per_seq, d_model;
    /* the step's batch: host (pinned) staging and its device copy, laid out
     * token | pos | seq | out_rows | end_causal | end_bidir | embd_row |
     * mrope_pos (3 a token) | tab_off | tables | freq (maxima apart) */
    void *h_stage, *d_stage;
    size_t stage_bytes;
    /* images (dims.images): the step's image rows, token t's at row t,
     * [max_tokens][d_model]; copied only by steps that have some */
    float *h_embd, *d_embd;
    int32_t *seq_end; /* [max_seqs] host scratch of begin() */
    dstep st;
    int n_tokens, n_out, n_hidden, split;
    bool img;         /* this step has image rows */
    /* Steps run as CUDA graphs, one per (tokens, logit rows, hidden rows,
     * image rows or not, KV pool split): a step's ops are the same kernels
     * on the same addresses whenever those are (the batch's data is read
     * from the staging copies, which the graph holds: the image rows' copy
     * only in the graphs of steps with images), so a shape's second step is
     * captured and later ones replay it (kernels/graphs.h: which shapes keep
     * a graph; the others launch their ops). */
    hr_graph_cache gc;
    cudaGraphExec_t exec[HR_GRAPH_SLOTS];
    int cap_slot; /* the slot this step is captured into */
    int replay;     /* the graph this step replays; -1: its ops launch */
    bool capturing; /* ... into a capture that end() instantiates */
    /* split attention (attention.cuh) for steps of up to part_tokens
     * tokens: the chunks' partials, [part_tokens][n_heads][n_chunks][hd + 2] */
    float *d_part;
    int part_tokens, n_chunks, n_sm;
    /* products on the tensor cores (mma.cuh, mmq.cuh): a step's activation
     * rows split into bf16 parts, [MMA_PARTS][max_tokens][max_k], or
     * rounded to int8 (mmq_x) */
    uint16_t *d_xs;
    int max_k;
    /* the activations of a GGUF block product (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K):
     * rounded to int8 (mmq.cuh, as the CPU rounds them: the default) or
     * MMA_PARTS bf16 parts (f32-grade: quant_act "f32", dims.f32_act;
     * docs/gpu.md) */
    bool quant_int8;
    int quant_parts; /* the parts of a block product that mmq does not take */
    moe_ctx moe;     /* experts (moe.cuh) */
    rec_slots slots; /* recurrent layers (recurrent.cuh) */
    int n_seqs;
    char fail[200]; /* an op this step could not run: end() reports it */
} cu_ctx;

static cu_ctx *ctx_of(hr_bctx *c) { return (cu_ctx *)c; }

static int dev_of(hr_backend *be) { return ((cu_dev *)be->impl)->id; }

static int cu_fail(hr_error *err, cudaError_t e, const char *what) {
    return hr_err(err, HR_EIO, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}

/* ---- memory ---------------------------------------------------------------- */

static void *cu_alloc(hr_backend *be, size_t bytes) {
    void *p = NULL;
    cudaSetDevice(dev_of(be));
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    return p;
}

static void cu_free(hr_backend *be, void *p, size_t bytes) {
    (void)bytes;
    if (!p)
        return;
    cudaSetDevice(dev_of(be));
    cudaFree(p);
}

static int cu_memcpy(hr_backend *be, void *dst, const void *src, size_t n, cudaMemcpyKind k,
                     hr_error *err) {
    cudaSetDevice(dev_of(be));
    cudaError_t e = cudaMemcpy(dst, src, n, k);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "a copy");
}

static int cu_upload(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err) {
    return cu_memcpy(be, dst, src, n, cudaMemcpyHostToDevice, err);
}

static int cu_download(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err) {
    return cu_memcpy(be, dst, src, n, cudaMemcpyDeviceToHost, err);
}

static int cu_copy(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err) {
    return cu_memcpy(be, dst, src, n, cudaMemcpyDeviceToDevice, err);
}

static int cu_memcpy_rows(hr_backend *be, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t n, size_t rows, cudaMemcpyKind k, hr_error *err) {
    cudaSetDevice(dev_of(be));
    cudaError_t e = cudaMemcpy2D(dst, dpitch, src, spitch, n, rows, k);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "a copy");
}

static int cu_upload_rows(hr_backend *be, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t n, size_t rows, hr_error *err) {
    return cu_memcpy_rows(be, dst, dpitch, src, spitch, n, rows, cudaMemcpyHostToDevice, err);
}

static int cu_download_rows(hr_backend *be, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t n, size_t rows, hr_error *err) {
    return cu_memcpy_rows(be, dst, dpitch, src, spitch, n, rows, cudaMemcpyDeviceToHost, err);
}

static void cu_mem_info(hr_backend *be, size_t *free_b, size_t *total) {
    cudaSetDevice(dev_of(be));
    if (cudaMemGetInfo(free_b, total) != cudaSuccess) {
        cudaGetLastError();
        *free_b = *total = 0;
    }
}

static double cu_membw(hr_backend *be, size_t bytes) {
    cudaSetDevice(dev_of(be));
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        for (int i = 0; i < 8; i++) {
            cudaEventRecord(e0);
            cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double bw = ms > 0 ? 2.0 * (double)bytes / (ms * 1e-3) : 0;
            if (i >= 2 && bw > best) /* the first two warm up */
                best = bw;
        }
    }
    cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best;
}

/* ---- contexts ---------------------------------------------------------------- */

static void cu_ctx_free(hr_bctx *c) {
    cu_ctx *x = ctx_of(c);
    if (!x)
        return;
    cudaSetDevice(x->dev);
    for (int i = 0; i < HR_GRAPH_SLOTS; i++)
        if (x->exec[i])
            cudaGraphExecDestroy(x->exec[i]);
    if (x->stream)
        cudaStreamDestroy(x->stream);
    cudaFreeHost(x->h_stage);
    cudaFree(x->d_stage);
    cudaFreeHost(x->h_embd);
    cudaFree(x->d_embd);
    free(x->seq_end);
    cudaFree(x->d_part);
    cudaFree(x->d_xs);
    moe_ctx_free(&x->moe);
    rec_slots_free(&x->slots);
    free(x);
}

static int cu_ctx_new(hr_backend *be, hr_pool *pool, const hr_bctx_dims *dm, hr_bctx **out,
                      hr_error *err) {
    (void)pool;
    *out = NULL;
    int max_tokens = dm->max_tokens, max_seqs = dm->max_seqs, max_ctx = dm->max_ctx;
    int rot_dim = dm->rot_dim;
    cu_ctx *x = (cu_ctx *)calloc(1, sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    x->be = be;
    x->dev = dev_of(be);
    hr_graph_cache_init(&x->gc);
    x->max_tokens = max_tokens;
    x->max_seqs = max_seqs;
    x->max_tab = max_seqs * ((max_ctx + 31) / 32 + 1);
    x->freq_per_seq = 2 * (rot_dim / 2 + 1);
    x->d_model = dm->d_model;
    x->replay = -1;
    x->stage_bytes = ((size_t)10 * max_tokens + max_seqs + x->max_tab) * sizeof(int32_t) +
                     (size_t)max_seqs * x->freq_per_seq * sizeof(float);
    size_t embd_bytes = dm->images ? (size_t)max_tokens * dm->d_model * sizeof(float) : 0;
    x->seq_end = (int32_t *)malloc((size_t)max_seqs * sizeof(int32_t));
    if (!x->seq_end) {
        free(x);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    cudaSetDevice(x->dev);
    cudaError_t e;
    /* decode steps (up to 16 tokens) split their attention over the chunks */
    x->part_tokens = max_tokens < 16 ? max_tokens : 16;
    x->n_chunks = (max_ctx + ATT_CHUNK - 1) / ATT_CHUNK + 1;
    size_t part_bytes = (size_t)x->part_tokens * dm->n_heads * x->n_chunks *
                        (dm->head_dim + 2) * sizeof(float);
    x->max_k = dm->max_k;
    x->quant_int8 = !dm->f32_act;
    x->quant_parts = dm->f32_act ? MMA_PARTS : 1;
    size_t xs_bytes = (size_t)MMA_PARTS * max_tokens * dm->max_k * sizeof(uint16_t);
    if (xs_bytes < mmq_bytes(max_tokens, dm->max_k))
        xs_bytes = mmq_bytes(max_tokens, dm->max_k);
    if (dm->n_experts > MOE_MAX_EXPERTS) {
        free(x->seq_end);
        free(x);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: %d experts (at most %d)",
                      be->name, dm->n_experts, MOE_MAX_EXPERTS);
    }
    if ((e = cudaDeviceGetAttribute(&x->n_sm, cudaDevAttrMultiProcessorCount, x->dev)) !=
            cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost(&x->h_stage, x->stage_bytes)) != cudaSuccess ||
        (e = cudaMalloc(&x->d_stage, x->stage_bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->d_part, part_bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->d_xs, xs_bytes ? xs_bytes : 16)) != cudaSuccess ||
        (embd_bytes && (e = cudaMallocHost((void **)&x->h_embd, embd_bytes)) != cudaSuccess) ||
        (embd_bytes && (e = cudaMalloc((void **)&x->d_embd, embd_bytes)) != cudaSuccess) ||
        (e = moe_ctx_init(&x->moe, dm)) != cudaSuccess ||
        (e = rec_slots_init(&x->slots, max_seqs)) != cudaSuccess) {
        cudaGetLastError();
        cu_ctx_free((hr_bctx *)x);
        return cu_fail(err, e, "creating a forward context");
    }
    *out = (hr_bctx *)x;
    return 0;
}

/* ---- one step ---------------------------------------------------------------- */

static int cu_begin(hr_bctx *c, const hr_step_in *in, hr_error *err) {
    cu_ctx *x = ctx_of(c);
    if (x->be->lost)
        return hr_err(err, HR_EIO, "the GPU context of %s is lost", x->be->name);
    if (in->n_tables > x->max_tab)
        return hr_err(err, HR_EINVAL, "%d block-table entries (this context holds %d)",
                      in->n_tables, x->max_tab);
    if (in->embd && !x->h_embd)
        return hr_err(err, HR_EINVAL, "image rows for a context made without them");
    /* fixed offsets (by the maxima), so that a captured copy stays right */
    int T = in->n_tokens, S = in->n_seqs, MT = x->max_tokens, MS = x->max_seqs;
    int32_t *h = (int32_t *)x->h_stage, *d = (int32_t *)x->d_stage;
    memcpy(h, in->token, (size_t)T * 4);
    memcpy(h + MT, in->pos, (size_t)T * 4);
    memcpy(h + 2 * MT, in->seq, (size_t)T * 4);
    /* the output rows: logits (1) first, then hidden states (2) */
    int n_out = 0;
    for (int kind = 1; kind <= 2; kind++)
        for (int t = 0; t < T; t++)
            if (in->logits[t] == kind)
                h[3 * MT + n_out++] = t;
    int n_hidden = 0;
    for (int t = 0; t < T; t++)
        n_hidden += in->logits[t] == 2;
    /* the attended ranges' ends (attention.cuh att_range) */
    for (int s = 0; s < S; s++)
        x->seq_end[s] = 0;
    for (int t = 0; t < T; t++)
        if (in->pos[t] + 1 > x->seq_end[in->seq[t]])
            x->seq_end[in->seq[t]] = in->pos[t] + 1;
    int32_t *end_c = h + 4 * MT, *end_b = h + 5 * MT, *erow = h + 6 * MT, *mp = h + 7 * MT;
    for (int t = 0; t < T; t++) {
        end_c[t] = in->attn_end ? in->attn_end[t] : in->pos[t] + 1;
        end_b[t] = in->attn_end ? in->attn_end[t] : x->seq_end[in->seq[t]];
    }
    /* image rows, each at its token's row */
    bool img = false;
    for (int t = 0; t < T; t++) {
        erow[t] = in->embd && in->embd_row[t] >= 0 ? in->embd_row[t] : -1;
        if (erow[t] >= 0) {
            memcpy(x->h_embd + (size_t)t * x->d_model, in->embd + (size_t)erow[t] * x->d_model,
                   (size_t)x->d_model * sizeof(float));
            img = true;
        }
    }
    /* M-RoPE positions (pos[t] for all three when the batch has none) */
    bool mrope = in->mrope_section[0] || in->mrope_section[1] || in->mrope_section[2];
    for (int t = 0; mrope && t < T; t++)
        for (int k = 0; k < 3; k++)
            mp[3 * t + k] = in->mrope_pos ? in->mrope_pos[3 * t + k] : in->pos[t];
    int32_t *tab_off = h + 10 * MT, *tables = tab_off + MS;
    memcpy(tab_off, in->tab_off, (size_t)S * 4);
    memcpy(tables, in->tables, (size_t)in->n_tables * 4);
    float *hf = (float *)(tables + x->max_tab);
    memcpy(hf, in->freq, (size_t)S * x->freq_per_seq * sizeof(float));
    dstep st;
    memset(&st, 0, sizeof st);
    st.token = d;
    st.pos = d + MT;
    st.seq = d + 2 * MT;
    st.out_rows = d + 3 * MT;
    st.end_causal = d + 4 * MT;
    st.end_bidir = d + 5 * MT;
    st.embd_row = d + 6 * MT;
    st.mrope_pos = d + 7 * MT;
    st.tab_off = d + 10 * MT;
    st.tables = d + 10 * MT + MS;
    st.freq = (const float *)(d + 10 * MT + MS + x->max_tab);
    st.rot_dim = in->rot_dim;
    st.embd = x->d_embd;
    st.mrope = mrope;
    for (int k = 0; k < 3; k++)
        st.mrope_section[k] = in->mrope_section[k];
    x->st = st;
    x->n_tokens = T;
    x->n_out = n_out;
    x->n_hidden = n_hidden;
    x->img = img;
    x->split = in->kv_split;
    x->n_seqs = S;
    x->slots.staged = false;
    x->fail[0] = 0;
    x->replay = -1;
    x->capturing = false;
    hr_graph_key key = {T, n_out, n_hidden, x->split, img};
    int slot;
    bool evict;
    hr_graph_act act = hr_graph_cache_pick(&x->gc, &key, &slot, &evict);
    if (act == HR_GRAPH_REPLAY) {
        x->replay = slot;
        return 0;
    }
    cudaSetDevice(x->dev);
    cudaError_t e = cudaSuccess;
    if (act == HR_GRAPH_CAPTURE) {
        if (evict) {
            cudaGraphExecDestroy(x->exec[slot]);
            x->exec[slot] = NULL;
        }
        e = cudaStreamBeginCapture(x->stream, cudaStreamCaptureModeThreadLocal);
        x->capturing = e == cudaSuccess;
        x->cap_slot = slot;
        if (!x->capturing)
            hr_graph_cache_drop(&x->gc, slot);
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(x->d_stage, x->h_stage, x->stage_bytes, cudaMemcpyHostToDevice,
                            x->stream);
    if (e == cudaSuccess && img) /* all T rows: the graph copies the same bytes each time */
        e = cudaMemcpyAsync(x->d_embd, x->h_embd, (size_t)T * x->d_model * sizeof(float),
                            cudaMemcpyHostToDevice, x->stream);
    if (e != cudaSuccess && x->capturing) { /* the step ends here: close the capture */
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(x->stream, &g);
        if (g)
            cudaGraphDestroy(g);
        x->capturing = false;
        hr_graph_cache_drop(&x->gc, x->cap_slot);
    }
    return e == cudaSuccess ? 0 : cu_fail(err, e, "staging a step");
}

static int cu_end(hr_bctx *c, hr_error *err) {
    cu_ctx *x = ctx_of(c);
    cudaError_t e = cudaSuccess;
    if (x->fail[0]) { /* an op was left out: no graph of this step is kept */
        if (x->capturing) {
            cudaGraph_t g = NULL;
            cudaStreamEndCapture(x->stream, &g);
            if (g)
                cudaGraphDestroy(g);
            x->capturing = false;
            hr_graph_cache_drop(&x->gc, x->cap_slot);
        }
        cudaStreamSynchronize(x->stream);
        cudaGetLastError();
        return hr_err(err, HR_EUNSUPPORTED, "%s", x->fail);
    }
    if (x->capturing) {
        cudaGraph_t g = NULL;
        cudaGraphExec_t exec = NULL;
        x->capturing = false;
        e = cudaStreamEndCapture(x->stream, &g);
        if (e == cudaSuccess)
            e = cudaGraphInstantiate(&exec, g, 0);
        if (g)
            cudaGraphDestroy(g);
        if (e != cudaSuccess) {
            hr_graph_cache_drop(&x->gc, x->cap_slot);
            return cu_fail(err, e, "capturing a step");
        }
        x->exec[x->cap_slot] = exec;
        x->replay = x->cap_slot;
    }
    if (x->replay >= 0)
        e = cudaGraphLaunch(x->exec[x->replay], x->stream);
    if (e == cudaSuccess && hr_fault_hit(HR_FAULT_DEVICE)) /* HEARTH_FAULT=device:N */
        k_fault<<<1, 1, 0, x->stream>>>();
    if (e == cudaSuccess && (e = cudaStreamSynchronize(x->stream)) != cudaSuccess) {
        /* a fault while the step ran: CUDA's context is gone with it */
        x->be->lost = true;
        return hr_err(err, HR_EIO, "the GPU context of %s is lost: %s", x->be->name,
                      cudaGetErrorString(e));
    }
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cu_fail(err, e, "a forward step");
}

static dw view(const hr_tensor *t) {
    dw w;
    w.dtype = t->dtype;
    w.rows = t->shape[0];
    w.cols = t->ndim > 1 ? t->shape[1] : 1;
    w.data = (const uint8_t *)t->data;
    w.row_bytes = hr_tensor_row_bytes(t);
    w.scales = t->q.scales;
    w.biases = t->q.biases;
    w.sdtype = t->q.sdtype;
    w.bits = t->q.bits;
    w.group = t->q.group;
    return w;
}

static unsigned blocks_for(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

static void cu_embed(hr_bctx *c, float *x, const hr_tensor *emb, int d, float scale) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    k_embed<<<cx->n_tokens, 128, 0, cx->stream>>>(x, view(emb), cx->st, d, scale);
}

static void cu_embed_abs(hr_bctx *c, float *x, const float *pos_emb, const float *type_row,
                         int d) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    k_embed_abs<<<cx->n_tokens, 128, 0, cx->stream>>>(x, pos_emb, type_row, cx->st.pos, d);
}

static void cu_norm(hr_bctx *c, float *y, const float *x, const float *w, const float *b,
                    int kind, float offset, float eps, int T, int d) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    /* a thread per 2 columns up to 1024 threads: the row's loads are in
     * flight at once (one block a row, as many as the step has rows) */
    int threads = d / 2 > 1024 ? 1024 : d / 2 < 32 ? 32 : (d / 2 + 31) / 32 * 32;
    k_norm<<<T, threads, 0, cx->stream>>>(y, x, w, b, kind, offset, eps, d);
}

/* bf16, f16, Q8_0, Q4_0, Q4_K and Q5_K weights on the tensor cores (mma.cuh): the
 * tile by the number of rows, the sums the same for any tile; the outputs of
 * o (one kind, one x) side by side in one launch */
template <int KIND, int NP = MMA_PARTS>
static void mma_launch(cu_ctx *cx, const mma_x &x, bool xf, bool stg, bool tiled, int T,
                       mma_outs o) {
    cudaStream_t st = cx->stream;
    unsigned th = MMA_WARPS * 32;
    /* prefill: through shared memory (mma_tiled.cuh), the same sums */
    if (tiled && mma_tiled_launch<KIND, NP>(x, o, T, cx->dev, st))
        return;
    dim3 g(1, (unsigned)mma_tiles(o, T <= 16 ? 16 : T <= 32 ? 32 : 64));
    /* decode of block weights: the rows staged through shared memory */
    if constexpr (mma_staged_kind(KIND))
        if (stg) {
            k_mma_staged<KIND, mma_stage<KIND>, 3, NP><<<g, th, mma_stage<KIND>::BYTES, st>>>(x, o);
            return;
        }
    /* decode: x split in the kernel (xf; x not 16-byte aligned: its parts
     * read), the next 4 chunks' loads in flight (the variants measured:
     * docs/gpu.md) */
    if (T <= 8 && xf)
        k_mma<KIND, true, true, 1, 1, 4, 1, NP><<<g, th, 0, st>>>(x, o);
    else if (T <= 8)
        k_mma<KIND, false, true, 1, 1, 4, 1, NP><<<g, th, 0, st>>>(x, o);
    else if (T <= 16 && xf)
        k_mma<KIND, true, true, 1, 2, 2, 1, NP><<<g, th, 0, st>>>(x, o);
    else if (T <= 16)
        k_mma<KIND, false, true, 1, 2, 2, 1, NP><<<g, th, 0, st>>>(x, o);
    else if (T <= 32)
        k_mma<KIND, false, false, 2, 4, 1, 2, NP><<<g, th, 0, st>>>(x, o);
    else
        k_mma<KIND, false, false, 4, 4, 1, 2, NP>
            <<<dim3(blocks_for((size_t)T, 32), g.y), th, 0, st>>>(x, o);
}

/* a GGUF block kind with the context's activation parts */
template <int KIND>
static void mma_launch_q(cu_ctx *cx, const mma_x &x, bool xf, bool stg, bool tiled, int T,
                         mma_outs o) {
    if (cx->quant_parts == 1)
        mma_launch<KIND, 1>(cx, x, xf, stg, tiled, T, o);
    else
        mma_launch<KIND>(cx, x, xf, stg, tiled, T, o);
}

/* Output *i and the next ones that `same` takes (up to MMA_MAX_OUT), for
 * one launch; *i is left at the last one taken (the caller's loop steps
 * past it). */
template <class F>
static mma_outs gather_outs(const hr_matmul_out *out, int count, int *i, F same) {
    mma_outs o = {};
    for (; o.n < MMA_MAX_OUT && *i < count; (*i)++, o.n++) {
        dw wi = view(out[*i].w);
        if (o.n && !same(wi))
            break;
        o.w[o.n] = wi;
        o.y[o.n] = out[*i].y;
        o.ldy[o.n] = out[*i].ldy;
        o.bias[o.n] = out[*i].bias;
    }
    (*i)--;
    return o;
}

/* One kernel per weight format, whatever the number of rows: a row's
 * products are summed in the same order alone or in any batch (the engine's
 * batched == alone), NR rows of x per block (1 for a single row, else 8: the
 * weights are read once per 8 rows; 32 gave the same prefill speed); bf16,
 * f16, Q8_0, Q4_0, Q4_K and Q5_K weights on the tensor cores (mma.cuh), in the same order for any number
 * of rows too. */
static void cu_matmul(hr_bctx *c, const float *x, int ldx, int T, int count,
                      const hr_matmul_out *out) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    int split_k = 0; /* the columns x was split at (or rounded at: q8_k) for the tensor cores */
    int q8_k = 0;
    mmq_x xq = {};
    bool xal = ((uintptr_t)x & 15) == 0 && ldx % 4 == 0;
    for (int i = 0; i < count; i++) {
        dw w = view(out[i].w);
        float *y = out[i].y;
        int ldy = out[i].ldy;
        const float *bias = out[i].bias;
        if (cx->quant_int8 && mmq_fits(w) && w.cols <= cx->max_k &&
            T <= cx->max_tokens) {
            /* block weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) with x rounded to
             * int8 (mmq.cuh) */
            int K = (int)w.cols, kind = mma_kind(w);
            if (q8_k != K) {
                xq = mmq_quantize(x, ldx, T, K, cx->d_xs, cx->stream);
                q8_k = K;
                split_k = 0; /* the parts' buffer now holds x rounded */
            }
            mma_outs o = gather_outs(out, count, &i, [&](const dw &wi) {
                return mmq_fits(wi) && mma_kind(wi) == kind && wi.cols == K;
            });
            bool ok;
            switch (kind) {
            case MMA_Q8_0: ok = mmq_launch<MMA_Q8_0>(xq, o, T, cx->dev, cx->stream); break;
            case MMA_Q4_0: ok = mmq_launch<MMA_Q4_0>(xq, o, T, cx->dev, cx->stream); break;
            case MMA_Q4_K: ok = mmq_launch<MMA_Q4_K>(xq, o, T, cx->dev, cx->stream); break;
            case MMA_Q5_K: ok = mmq_launch<MMA_Q5_K>(xq, o, T, cx->dev, cx->stream); break;
            default: ok = mmq_launch<MMA_Q6_K>(xq, o, T, cx->dev, cx->stream); break;
            }
            if (!ok && !cx->fail[0])
                snprintf(cx->fail, sizeof cx->fail, "%s refused the int8 products' shared memory",
                         cx->be->name);
            continue;
        }
        if (mma_fits(w) && w.cols <= cx->max_k && T <= cx->max_tokens) {
            int K = (int)w.cols, kind = mma_kind(w);
            int64_t n = (int64_t)T * K;
            bool stg = T <= 8 && mma_staged_fits(w); /* k_mma_staged: reads the parts */
            bool xf = T <= 16 && xal && !stg;
            /* k_mma_tiled (reads the parts): the block formats' prefill; bf16
             * and f16 (three parts of x against one weight row, the most mmas
             * per byte) ran slower through it than k_mma's registers */
            bool tiled = T > 32 && mma_staged_fits(w);
            if (!xf && split_k != K) {
                k_split_bf16<<<blocks_for((size_t)n, 256), 256, 0, cx->stream>>>(x, ldx, T, K,
                                                                                 cx->d_xs, n);
                split_k = K;
                q8_k = 0; /* the buffer now holds the parts */
            }
            /* this output and the next ones of its kind in one launch */
            mma_outs o = gather_outs(out, count, &i, [&](const dw &wi) {
                return mma_fits(wi) && mma_kind(wi) == kind && wi.cols == K &&
                       (!(stg || tiled) || mma_staged_fits(wi));
            });
            mma_x xa{x, ldx, cx->d_xs, n, T};
            switch (kind) {
            case MMA_F16: mma_launch<MMA_F16>(cx, xa, xf, stg, tiled, T, o); break;
            case MMA_Q8_0: mma_launch_q<MMA_Q8_0>(cx, xa, xf, stg, tiled, T, o); break;
            case MMA_Q4_0: mma_launch_q<MMA_Q4_0>(cx, xa, xf, stg, tiled, T, o); break;
            case MMA_Q4_K: mma_launch_q<MMA_Q4_K>(cx, xa, xf, stg, tiled, T, o); break;
            case MMA_Q5_K: mma_launch_q<MMA_Q5_K>(cx, xa, xf, stg, tiled, T, o); break;
            default: mma_launch<MMA_BF16>(cx, xa, xf, stg, tiled, T, o); break;
            }
            continue;
        }
        bool one = T == 1;
        dim3 grid(blocks_for((size_t)w.rows, 4), one ? 1 : blocks_for((size_t)T, 8));
        bool q32 = w.dtype == HR_DTYPE_Q8_0 || w.dtype == HR_DTYPE_Q4_0 ||
                   w.dtype == HR_DTYPE_Q4_1;
        if (is_plain(w.dtype) && xal && ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0) {
            dim3 rows((unsigned)w.rows, grid.y);
            if (one)
                k_mv_plain<1><<<rows, MV_THREADS, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
            else
                k_mv_plain<8><<<rows, MV_THREADS, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else if (q32 && xal) {
            if (one)
                k_mv_q32<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
            else
                k_mv_q32<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else if (xal && mv_span_fits(w)) {
            if (one)
                k_mv_span<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
            else
                k_mv_span<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else if (one) {
            k_matmul<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else {
            k_matmul<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        }
    }
}

/* The step's tokens [t0, t0 + nt) (nt 0: all): their rows of the batch and
 * of the staged arrays a token indexes (a step over two KV pools) */
static int tokens_of(const cu_ctx *cx, int t0, int nt, dstep *st) {
    *st = cx->st;
    st->token += t0;
    st->pos += t0;
    st->seq += t0;
    st->end_causal += t0;
    st->end_bidir += t0;
    st->embd_row += t0;
    st->mrope_pos += 3 * t0; /* (embd and out_rows: read by ops that are never split) */
    return nt ? nt : cx->n_tokens;
}

static void cu_qkv(hr_bctx *c, const hr_qkv_args *a) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    dstep st;
    int n = tokens_of(cx, a->t0, a->nt, &st);
    hr_qkv_args b = *a;
    size_t t0 = (size_t)a->t0, hd = (size_t)a->head_dim;
    b.q += t0 * a->n_heads * hd;
    b.k += t0 * a->n_kv_heads * hd;
    b.v += t0 * a->n_kv_heads * hd;
    k_qkv<<<n, QKV_THREADS, 0, cx->stream>>>(b, st);
}

static void cu_attention(hr_bctx *c, const hr_attn_in *a) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    dstep st;
    int T = tokens_of(cx, a->t0, a->nt, &st);
    hr_attn_in in = *a;
    in.max_ctx = 0; /* unused by the kernels, and it changes every step */
    in.q += (size_t)a->t0 * a->n_heads * a->head_dim;
    in.out += (size_t)a->t0 * a->n_heads * a->head_dim;
    bool vec = a->head_dim % 4 == 0;
    if (T <= cx->part_tokens && T * a->n_heads < 2 * cx->n_sm) {
        /* too few (token, head) pairs to fill the GPU: their chunks side by
         * side, a GQA group's query heads from one read of each row where
         * the kernel takes the layer */
        if (!att_gqa_launch(in, st, T, cx->dev, cx->n_sm, cx->d_part, cx->n_chunks, cx->stream))
            att_split_launch(in, st, T, cx->n_sm, cx->d_part, cx->n_chunks, cx->stream);
        att_fold_launch(in, st, T, cx->d_part, cx->n_chunks, cx->stream);
        return;
    }
    /* runs of many tokens a sequence (prefill): K/V shared through shared
     * memory; the others (decode rows beside them) a block per (token,
     * head). Both launched whatever the step holds: a captured step is
     * replayed for others of its shape. */
    bool tiled = att_tiled_launch(in, st, T, cx->dev, cx->stream);
    dim3 grid(T, a->n_heads);
    if (vec)
        k_attention<true><<<grid, ATT_CHUNK, 0, cx->stream>>>(in, st, tiled);
    else
        k_attention<false><<<grid, ATT_CHUNK, 0, cx->stream>>>(in, st, tiled);
}

static void cu_act(hr_bctx *c, int act, float *g, const float *u, int T, int n) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    size_t total = (size_t)T * n;
    k_act<<<blocks_for(total, 256), 256, 0, cx->stream>>>(act, g, u, total);
}

static void cu_add(hr_bctx *c, float *x, const float *y, float mult, size_t n) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    k_add<<<blocks_for(n, 256), 256, 0, cx->stream>>>(x, y, mult, n);
}

static int cu_gather(hr_bctx *c, float *y, const float *x, int d) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return cx->n_out;
    if (cx->n_out > 0)
        k_gather<<<cx->n_out, 256, 0, cx->stream>>>(y, x, cx->st.out_rows, d);
    return cx->n_out;
}

static void cu_logit_scale(hr_bctx *c, float *logits, size_t n, float div, float cap) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    k_logit_scale<<<blocks_for(n, 256), 256, 0, cx->stream>>>(logits, n, div, cap);
}

/* ---- mixture of experts and recurrent layers (moe.cuh, recurrent.cuh) ----------- */

static void cu_unsupported(cu_ctx *cx, const char *what) {
    if (!cx->fail[0])
        snprintf(cx->fail, sizeof cx->fail, "not supported yet on %s: %s", cx->be->name, what);
}

static void cu_moe(hr_bctx *c, const hr_moe_args *a) {
    cu_ctx *cx = ctx_of(c);
    if (cx->replay >= 0)
        return;
    int T = cx->n_tokens, E = a->n_experts, k = a->k, d = a->d, ff = a->ff, sf = a->sh_ff;
    moe_ctx *m = &cx->moe;
    if (E > m->E || k > m->k || ff > m->ff || sf > m->ff || d > m->d) {
        cu_unsupported(cx, "an expert layer wider than the context's");
        return;
    }
    char why[160];
    int li = moe_table(m, a, view, why, sizeof why);
    if (li < 0) {
        cu_unsupported(cx, why);
        return;
    }
    const moe_expert *tab = m->layer[li].tab;
    size_t tk = (size_t)T * k;
    moe_scratch sc;
    moe_carve(m, m->mem, &sc);
    /* 16-byte loads where the layer's weights allow them (the same for any
     * batch; x: the arena's 64-byte aligned rows of d, a multiple of 8 there) */
    int hu = ((uintptr_t)a->x & 15) == 0 ? m->layer[li].dot_up : MOE_DOT_ANY;
    int hd = m->layer[li].dot_down; /* h's rows: ff a multiple of 8, 64-byte aligned */
    hr_matmul_out ro = {sc.logits, E, a->router_w, a->router_b};
    cu_matmul(c, a->router_x ? a->router_x : a->x, d, T, 1, &ro);
    cudaStream_t st = cx->stream;
    k_moe_route<<<T, 32, moe_route_smem(E, k, a->n_group), st>>>(
        sc.logits, E, k, a->router, a->norm_topk, a->score_bias, a->n_group, a->topk_group,
        a->scale, a->expert_scale, sc.sel, sc.w);
    const int2 *tl = NULL; /* one row: its k pairs apart (k different experts) */
    if (T > 1) {
        k_moe_order<<<1, 1024, (size_t)2 * E * sizeof(int), st>>>(sc.sel, (int)tk, E, sc.order,
                                                                   sc.tiles);
        tl = sc.tiles;
    }
    unsigned th = MOE_WARPS * 32;
    k_moe_up<<<dim3((unsigned)tk, blocks_for((size_t)ff, MOE_WARPS)), th, 0, st>>>(
        a->x, d, k, ff, hu, tl, sc.order, sc.sel, tab, a->b_gate, a->b_up, a->act, a->alpha,
        a->limit, sc.h);
    k_moe_down<<<dim3((unsigned)tk, blocks_for((size_t)d, MOE_WARPS)), th, 0, st>>>(
        sc.h, d, ff, hd, tl, sc.order, sc.sel, tab, a->b_down, sc.y);
    bool gated = sf && a->sh_inp && a->sh_inp->data;
    if (sf) { /* the shared expert, as a dense MLP (SWIGLU_CLAMPED: silu there) */
        hr_matmul_out so[3] = {{sc.shu, sf, a->sh_up, NULL}, {sc.shg, sf, a->sh_gate, NULL},
                               {sc.shs, 1, a->sh_inp, NULL}};
        cu_matmul(c, a->x, d, T, gated ? 3 : 2, so);
        cu_act(c, a->act == HR_BACT_SWIGLU_CLAMPED ? HR_BACT_SILU : a->act, sc.shg, sc.shu, T,
               sf);
        hr_matmul_out dn = {sc.shy, d, a->sh_down, NULL};
        cu_matmul(c, sc.shg, sf, T, 1, &dn);
    }
    k_moe_combine<<<T, 256, 0, st>>>(a->out, sc.y, sc.w, k, d, sf ? sc.shy : NULL,
                                     gated ? sc.shs : NULL);
}

static void cu_deltanet(hr_bctx *c, const hr_deltanet_args *a) {
    cu_ctx *cx = ctx_of(c);
    rec_slots_stage(&cx->slots, a->slot, cx->n_seqs, cx->replay < 0, cx->stream);
    if (cx->replay >= 0)
        return;
    if (a->dk > REC_MAX_DIM || a->dv > 1024) {
        cu_unsupported(cx, "gated DeltaNet heads wider than 256 (keys) or 1024 (values)");
        return;
    }
    int T = cx->n_tokens, nv = a->n_v_heads;
    int C = 2 * a->n_k_heads * a->dk + nv * a->dv;
    cudaStream_t st = cx->stream;
    k_dn_conv<<<dim3(T, blocks_for((size_t)C, 128)), 128, 0, st>>>(*a, cx->st, cx->slots.d, T);
    k_dn_l2<<<T, 128, 0, st>>>(*a);
    k_dn_head<<<dim3(T, nv, blocks_for((size_t)a->dv, 32)), 32, dn_head_smem(a->dk), st>>>(
        *a, cx->st, cx->slots.d, T);
    k_dn_norm<<<dim3(T, nv), 32, 0, st>>>(*a);
}

static void cu_mamba2(hr_bctx *c, const hr_mamba2_args *a) {
    cu_ctx *cx = ctx_of(c);
    rec_slots_stage(&cx->slots, a->slot, cx->n_seqs, cx->replay < 0, cx->stream);
    if (cx->replay >= 0)
        return;
    if (a->n > REC_MAX_DIM) {
        cu_unsupported(cx, "a Mamba-2 state wider than 256");
        return;
    }
    int T = cx->n_tokens;
    int C = a->heads * a->head_dim + 2 * a->groups * a->n;
    cudaStream_t st = cx->stream;
    k_mb_conv<<<dim3(T, blocks_for((size_t)C, 128)), 128, 0, st>>>(*a, cx->st, cx->slots.d, T);
    k_mb_head<<<dim3(T, a->heads, blocks_for((size_t)a->head_dim, 32)), 32, mb_head_smem(a->n),
                st>>>(*a, cx->st, cx->slots.d, T);
    k_mb_norm<<<T, 256, 0, st>>>(*a);
}

/* ---- the table and the devices --------------------------------------------------- */

static const hr_backend_ops cu_ops = {
    cu_alloc, cu_free, cu_upload, cu_download, cu_copy, cu_upload_rows, cu_download_rows,
    cu_mem_info, cu_membw,
    cu_ctx_new, cu_ctx_free,
    cu_begin, cu_embed, cu_norm, cu_matmul, cu_qkv, cu_attention, cu_act, cu_add,
    cu_gather, cu_logit_scale, NULL /* prefetch_next */, cu_end,
    cu_moe, true /* attn_sinks */, cu_deltanet,
    true /* encoder (bidirectional attention) */, cu_embed_abs,
    NULL /* lora: not yet */,
    cu_mamba2,
};

static hr_backend g_backends[MAX_DEVICES];
static cu_dev g_devs[MAX_DEVICES];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

extern "C" int hr__cuda_count(hr_error *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) /* also: no libcuda at all */
        return hr_err(err, HR_EUNSUPPORTED, "no NVIDIA driver for CUDA %d.%d (none installed, "
                      "or an older one)", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_err(err, HR_EUNSUPPORTED, "no usable CUDA device: %s", cudaGetErrorString(e));
    }
    if (n == 0)
        return hr_err(err, HR_EUNSUPPORTED, "no CUDA device");
    return n;
}

extern "C" int hr__cuda_open(int dev, hr_backend **out, hr_error *err) {
    int n = hr__cuda_count(err);
    if (n < 0)
        return n;
    if (dev < 0 || dev >= n || dev >= MAX_DEVICES)
        return hr_err(err, HR_EINVAL, "no CUDA device %d (this machine has %d)", dev, n);
    pthread_mutex_lock(&g_mu);
    hr_backend *be = &g_backends[dev];
    int rc = 0;
    if (!be->ops) {
        cudaError_t e = cudaSetDevice(dev);
        if (e == cudaSuccess)
            e = cudaFree(0); /* create the context now: its failure is this call's */
        if (e == cudaSuccess) /* TurboQuant's KV codebooks (kvturbo.cuh) */
            e = cudaMemcpyToSymbol(kvt_cb, hr_turbo_centroids, sizeof kvt_cb);
        if (e != cudaSuccess) {
            cudaGetLastError();
            rc = cu_fail(err, e, "opening the device");
        } else {
            g_devs[dev].id = dev;
            snprintf(be->name, sizeof be->name, "cuda:%d", dev);
            be->device_mem = true;
            /* 1: GGUF block products with x rounded to int8 (mmq.cuh; before,
             * -1: x in bf16) */
            be->math = 1;
            be->impl = &g_devs[dev];
            be->ops = &cu_ops;
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (rc)
        return rc;
    *out = be;
    return 0;
}

extern "C" void hr__cuda_describe(int dev, char *buf, size_t n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, n, "cuda:%d", dev);
        return;
    }
    snprintf(buf, n, "cuda:%d (%s, %.1f GiB)", dev, p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

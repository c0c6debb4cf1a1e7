/* The CUDA backend (kernels/backend.h): device memory through the CUDA
 * runtime, each forward context one non-blocking stream. Ops are queued on
 * the stream; end() waits for the step and turns any CUDA error into the
 * step's error. The kernels are in ops.cuh. */
extern "C" {
#include "core/error.h"
#include "kernels/cuda/cuda.h"
}
#include "kernels/cuda/ops.cuh"

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
    int max_tokens, max_seqs, max_tab, freq_per_seq;
    /* the step's batch: host (pinned) staging and its device copy, laid out
     * token | pos | seq | out_rows | tab_off | tables | freq */
    void *h_stage, *d_stage;
    size_t stage_bytes;
    dstep st;
    int n_tokens, n_out;
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
    if (x->stream)
        cudaStreamDestroy(x->stream);
    cudaFreeHost(x->h_stage);
    cudaFree(x->d_stage);
    free(x);
}

static int cu_ctx_new(hr_backend *be, hr_pool *pool, int max_tokens, int max_seqs, int max_ctx,
                      int n_heads, int n_kv_heads, int rot_dim, hr_bctx **out, hr_error *err) {
    (void)pool;
    (void)n_heads;
    (void)n_kv_heads;
    *out = NULL;
    cu_ctx *x = (cu_ctx *)calloc(1, sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    x->be = be;
    x->dev = dev_of(be);
    x->max_tokens = max_tokens;
    x->max_seqs = max_seqs;
    x->max_tab = max_seqs * ((max_ctx + 31) / 32 + 1);
    x->freq_per_seq = 2 * (rot_dim / 2 + 1);
    x->stage_bytes = ((size_t)4 * max_tokens + max_seqs + x->max_tab) * sizeof(int32_t) +
                     (size_t)max_seqs * x->freq_per_seq * sizeof(float);
    cudaSetDevice(x->dev);
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost(&x->h_stage, x->stage_bytes)) != cudaSuccess ||
        (e = cudaMalloc(&x->d_stage, x->stage_bytes)) != cudaSuccess) {
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
    if (in->n_tables > x->max_tab)
        return hr_err(err, HR_EINVAL, "%d block-table entries (this context holds %d)",
                      in->n_tables, x->max_tab);
    int T = in->n_tokens, S = in->n_seqs;
    int32_t *h = (int32_t *)x->h_stage, *d = (int32_t *)x->d_stage;
    memcpy(h, in->token, (size_t)T * 4);
    memcpy(h + T, in->pos, (size_t)T * 4);
    memcpy(h + 2 * T, in->seq, (size_t)T * 4);
    int n_out = 0;
    for (int t = 0; t < T; t++)
        if (in->logits[t])
            h[3 * T + n_out++] = t;
    memcpy(h + 4 * T, in->tab_off, (size_t)S * 4);
    memcpy(h + 4 * T + S, in->tables, (size_t)in->n_tables * 4);
    float *hf = (float *)(h + 4 * T + S + in->n_tables);
    memcpy(hf, in->freq, (size_t)S * x->freq_per_seq * sizeof(float));
    size_t bytes = (size_t)(4 * T + S + in->n_tables) * 4 +
                   (size_t)S * x->freq_per_seq * sizeof(float);
    x->st = dstep{d, d + T, d + 2 * T, d + 4 * T + S, d + 4 * T, d + 3 * T,
                  (const float *)(d + 4 * T + S + in->n_tables), in->rot_dim};
    x->n_tokens = T;
    x->n_out = n_out;
    cudaSetDevice(x->dev);
    cudaError_t e = cudaMemcpyAsync(x->d_stage, x->h_stage, bytes, cudaMemcpyHostToDevice,
                                    x->stream);
    return e == cudaSuccess ? 0 : cu_fail(err, e, "staging a step");
}

static int cu_end(hr_bctx *c, hr_error *err) {
    cu_ctx *x = ctx_of(c);
    cudaError_t e = cudaStreamSynchronize(x->stream);
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
    k_embed<<<cx->n_tokens, 128, 0, cx->stream>>>(x, view(emb), cx->st.token, d, scale);
}

static void cu_norm(hr_bctx *c, float *y, const float *x, const float *w, const float *b,
                    int kind, float offset, float eps, int T, int d) {
    cu_ctx *cx = ctx_of(c);
    k_norm<<<T, 256, 0, cx->stream>>>(y, x, w, b, kind, offset, eps, d);
}

/* One kernel per weight format, whatever the number of rows: a row's
 * products are summed in the same order alone or in any batch (the engine's
 * batched == alone), NR rows of x per block (1 for a single row). */
static void cu_matmul(hr_bctx *c, const float *x, int ldx, int T, int count,
                      const hr_matmul_out *out) {
    cu_ctx *cx = ctx_of(c);
    for (int i = 0; i < count; i++) {
        dw w = view(out[i].w);
        float *y = out[i].y;
        int ldy = out[i].ldy;
        const float *bias = out[i].bias;
        bool one = T == 1;
        dim3 grid(blocks_for((size_t)w.rows, 4), one ? 1 : blocks_for((size_t)T, 8));
        bool xal = ((uintptr_t)x & 15) == 0 && ldx % 4 == 0;
        bool q32 = w.dtype == HR_DTYPE_Q8_0 || w.dtype == HR_DTYPE_Q4_0 ||
                   w.dtype == HR_DTYPE_Q4_1;
        if (is_plain(w.dtype) && xal && ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0) {
            if (one)
                k_mv_plain<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
            else
                k_mv_plain<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else if (q32 && xal) {
            if (one)
                k_mv_q32<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
            else
                k_mv_q32<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else if (one) {
            k_matmul<1><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        } else {
            k_matmul<8><<<grid, 128, 0, cx->stream>>>(x, ldx, T, w, y, ldy, bias);
        }
    }
}

static void cu_qkv(hr_bctx *c, const hr_qkv_args *a) {
    cu_ctx *cx = ctx_of(c);
    k_qkv<<<cx->n_tokens, 256, 0, cx->stream>>>(*a, cx->st);
}

static void cu_attention(hr_bctx *c, const hr_attn_in *a) {
    cu_ctx *cx = ctx_of(c);
    dim3 grid(cx->n_tokens, a->n_heads);
    k_attention<<<grid, 32 * ATT_WARPS, 0, cx->stream>>>(*a, cx->st);
}

static void cu_act(hr_bctx *c, int act, float *g, const float *u, int T, int n) {
    cu_ctx *cx = ctx_of(c);
    size_t total = (size_t)T * n;
    k_act<<<blocks_for(total, 256), 256, 0, cx->stream>>>(act, g, u, total);
}

static void cu_add(hr_bctx *c, float *x, const float *y, float mult, size_t n) {
    cu_ctx *cx = ctx_of(c);
    k_add<<<blocks_for(n, 256), 256, 0, cx->stream>>>(x, y, mult, n);
}

static int cu_gather(hr_bctx *c, float *y, const float *x, int d) {
    cu_ctx *cx = ctx_of(c);
    if (cx->n_out > 0)
        k_gather<<<cx->n_out, 256, 0, cx->stream>>>(y, x, cx->st.out_rows, d);
    return cx->n_out;
}

static void cu_logit_scale(hr_bctx *c, float *logits, size_t n, float div, float cap) {
    cu_ctx *cx = ctx_of(c);
    k_logit_scale<<<blocks_for(n, 256), 256, 0, cx->stream>>>(logits, n, div, cap);
}

/* ---- the table and the devices --------------------------------------------------- */

static const hr_backend_ops cu_ops = {
    cu_alloc, cu_free, cu_upload, cu_download, cu_copy, cu_mem_info, cu_membw,
    cu_ctx_new, cu_ctx_free,
    cu_begin, cu_embed, cu_norm, cu_matmul, cu_qkv, cu_attention, cu_act, cu_add,
    cu_gather, cu_logit_scale, NULL /* prefetch_next */, cu_end,
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
        if (e != cudaSuccess) {
            cudaGetLastError();
            rc = cu_fail(err, e, "opening the device");
        } else {
            g_devs[dev].id = dev;
            snprintf(be->name, sizeof be->name, "cuda:%d", dev);
            be->device_mem = true;
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

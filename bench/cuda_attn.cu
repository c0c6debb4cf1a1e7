/* Attention on the GPU, kernel against kernel: k_attention (a block
 * per (token, query head), attention.cuh) and k_attention_tiled
 * (attention_tiled.cuh, at 1 and 2 blocks an SM) over the same random f16
 * cache at Llama-3.1-8B's heads (32 query heads, 8 KV heads, head_dim 128;
 * and head_dim 64 for the 1B's), ms per layer (the minimum of 5 runs), and a
 * check that every variant gives k_attention's bits (else the run exits 1).
 * Steps: 512 tokens from position 0, 512 tokens from 3584 (the last chunk
 * of a 4096-token prompt), 8 sequences of 64 tokens at 1024 (a ragged
 * batch), and 448 tokens at 0 beside 64 decode rows at 1024 (a served step:
 * there the engine's pair, the tiled kernel for the long run and
 * k_attention for the rest, against k_attention alone). The record formats
 * (q8_0, q4_0, affine, TurboQuant: kvq.cuh) run the second and last steps,
 * k_attention against the engine's pair. Decode after 16384 tokens (one
 * sequence, and 4) runs k_attention_split and k_attention_split_gqa (a GQA
 * group a block, attention_gqa.cuh), each with k_attention_fold, every
 * format (`bench_cuda_attn decode`: those alone). Built with the CUDA
 * backend (bench_cuda_attn); run on the GPU machine by tools/cuda-check.sh
 * --bench. */
#include "kernels/cuda/attention_gqa.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(e)                                                                                  \
    do {                                                                                       \
        cudaError_t r_ = (e);                                                                  \
        if (r_ != cudaSuccess) {                                                               \
            fprintf(stderr, "bench_cuda_attn: %s: %s\n", #e, cudaGetErrorString(r_));          \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define BS 32 /* positions a KV block */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) { /* uniform (-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

template <class T>
static T *upload(const std::vector<T> &h) {
    T *d;
    CK(cudaMalloc(&d, sizeof(T) * h.size()));
    CK(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
    return d;
}

struct scene {
    const char *name;
    int S, n, at; /* S sequences of n tokens from position at */
    int D, dat;   /* then D sequences of one token at position dat */
};

typedef void (*launch_fn)(const hr_attn_in &, const dstep &, int);

static void run_chunked(const hr_attn_in &a, const dstep &st, int T) {
    k_attention<true><<<dim3(T, a.n_heads), ATT_CHUNK>>>(a, st, false);
}

template <int PER, int MINB, bool REC = false>
static void run_tiled(const hr_attn_in &a, const dstep &st, int T) {
    if (!att_tiled_launch_per<PER, MINB, REC>(a, st, T, 0, 0)) { /* device 0, default stream */
        fprintf(stderr, "bench_cuda_attn: the device refuses %zu bytes of shared memory\n",
                att_tiled_bytes(32 * PER));
        exit(1);
    }
}

/* decode: the split kernels and their fold, as cu_attention launches them
 * for a step of few tokens (part: the chunks' partials) */
static float *g_part;
static int g_nchunks, g_nsm;
static void run_split(const hr_attn_in &a, const dstep &st, int T) {
    att_split_launch(a, st, T, g_nsm, g_part, g_nchunks, 0);
    att_fold_launch(a, st, T, g_part, g_nchunks, 0);
}

/* decode, a GQA group's query heads a block (attention_gqa.cuh) */
static void run_gqa(const hr_attn_in &a, const dstep &st, int T) {
    if (!att_gqa_launch(a, st, T, 0, g_nsm, g_part, g_nchunks, 0)) {
        fprintf(stderr, "bench_cuda_attn: k_attention_split_gqa refuses the layer\n");
        exit(1);
    }
    att_fold_launch(a, st, T, g_part, g_nchunks, 0);
}

/* the fold alone, over the partials the run before it left (the same
 * output) */
static void run_fold(const hr_attn_in &a, const dstep &st, int T) {
    att_fold_launch(a, st, T, g_part, g_nchunks, 0);
}

/* the engine's: the tiled kernel, k_attention for the short runs */
template <int PER, bool REC = false>
static void run_pair(const hr_attn_in &a, const dstep &st, int T) {
    run_tiled<PER, ATT_TILED_MINB, REC>(a, st, T);
    k_attention<true><<<dim3(T, a.n_heads), ATT_CHUNK>>>(a, st, true);
}

/* a cache format: F16, or a record (kvq.cuh) at bits and group */
struct format {
    const char *name;
    int t, bits, group;
};

/* a row of format fm at head_dim hd: random f16 values, or a record of
 * random quants whose scales are small and finite */
static void fill_row(uint8_t *row, const format &fm, int hd) {
    size_t len = kv_row_len(fm.t, hd, fm.bits, fm.group);
    if (fm.t == HR_DTYPE_F16) {
        for (int i = 0; i < hd; i++)
            ((__half *)row)[i] = __float2half(rnd());
        return;
    }
    for (size_t i = 0; i < len; i++)
        row[i] = (uint8_t)(rnd() * 128.0f + 128.0f);
    if (fm.t == HR_DTYPE_Q8_0 || fm.t == HR_DTYPE_Q4_0) {
        int bb = fm.t == HR_DTYPE_Q8_0 ? 34 : 18;
        for (int b = 0; b < hd / 32; b++)
            *(__half *)(row + b * bb) = __float2half(0.01f + 0.005f * rnd());
    } else if (fm.t == HR_DTYPE_AFFINE) {
        float *sc = (float *)(row + (size_t)hd * fm.bits / 8);
        for (int g = 0; g < 2 * hd / fm.group; g++)
            sc[g] = 0.1f * rnd();
    } else { /* TURBO: a scale a segment */
        for (int sg = 0; sg < (fm.bits % 2 ? 2 : 1); sg++)
            ((__half *)row)[sg] = __float2half(1.0f + 0.25f * rnd());
    }
}

/* one scene at head_dim hd in format fm; false when a variant's bits
 * differ */
template <int PER>
static bool scene_run(const scene &sc, int hd, const format &fm) {
    const int NH = 32, NKV = 8, S = sc.S + sc.D, T = sc.S * sc.n + sc.D;
    int ctx = sc.at + sc.n > sc.dat + 1 ? sc.at + sc.n : sc.dat + 1;
    int nb = (ctx + BS - 1) / BS; /* blocks a sequence */
    bool rec = fm.t != HR_DTYPE_F16;
    size_t row = kv_row_len(fm.t, hd, fm.bits, fm.group), rowb = rec ? row : 2 * row;
    size_t bstride = (size_t)NKV * BS * row, nblk = (size_t)S * nb;
    std::vector<uint8_t> kc(nblk * NKV * BS * rowb), vc(kc.size());
    for (size_t r = 0; r < nblk * NKV * BS; r++) {
        fill_row(kc.data() + r * rowb, fm, hd);
        fill_row(vc.data() + r * rowb, fm, hd);
    }
    std::vector<float> q((size_t)T * NH * hd);
    for (float &x : q)
        x = rnd();
    std::vector<int32_t> pos(T), seq(T), end(T), tables(nblk), tab_off(S);
    for (int s = 0; s < S; s++) {
        tab_off[s] = s * nb;
        for (int b = 0; b < nb; b++) /* blocks scattered over the pool */
            tables[(size_t)s * nb + b] = (int32_t)(((size_t)b * S + s) % nblk);
        int n = s < sc.S ? sc.n : 1;
        for (int i = 0; i < n; i++) {
            int t = s < sc.S ? s * sc.n + i : sc.S * sc.n + (s - sc.S);
            pos[t] = s < sc.S ? sc.at + i : sc.dat;
            seq[t] = s;
            end[t] = pos[t] + 1;
        }
    }
    dstep st;
    memset(&st, 0, sizeof st);
    st.pos = upload(pos);
    st.seq = upload(seq);
    st.end_causal = upload(end);
    st.end_bidir = st.end_causal;
    st.tables = upload(tables);
    st.tab_off = upload(tab_off);
    hr_attn_in a;
    memset(&a, 0, sizeof a);
    a.q = upload(q);
    CK(cudaMalloc(&a.out, sizeof(float) * q.size()));
    a.k_cache = upload(kc);
    a.v_cache = upload(vc);
    a.n_heads = NH, a.n_kv_heads = NKV, a.head_dim = hd;
    a.kv_dtype = a.v_dtype = (hr_dtype)fm.t;
    a.kv_bits = fm.bits, a.kv_group = fm.group;
    a.block_stride = bstride, a.block_size = BS;
    a.scale = 1.0f / sqrtf((float)hd);

    struct variant {
        const char *name;
        launch_fn run;
    } dec[] = {{"k_attention (block per token, head)", run_chunked},
               {"split + fold", run_split},
               {"the engine's: split by GQA group + fold", run_gqa},
               {"its fold alone", run_fold}},
      vs[] = {{"k_attention (block per token, head)", run_chunked},
              {"k_attention_tiled, 1 block an SM", run_tiled<PER, 1>},
              {"k_attention_tiled, 2 blocks an SM", run_tiled<PER, 2>},
              {"the engine's: tiled + k_attention", rec ? run_pair<PER, true> : run_pair<PER>}};
    std::vector<float> ref(q.size()), got(q.size());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    bool same = true;
    bool decode = sc.S == 0; /* a decode step: the split kernels */
    if (decode) {
        g_nchunks = (sc.dat + 1 + ATT_CHUNK - 1) / ATT_CHUNK + 1;
        CK(cudaMalloc(&g_part, sizeof(float) * (size_t)T * NH * g_nchunks * (hd + 2)));
    }
    size_t nv = decode ? sizeof dec / sizeof *dec : sizeof vs / sizeof *vs;
    for (size_t v = 0; v < nv; v++) {
        const variant &var = decode ? dec[v] : vs[v];
        if (!decode && (sc.D || rec) && (v == 1 || v == 2))
            continue; /* the tiled kernel alone leaves the decode rows out */
        float best = 1e30f;
        for (int r = 0; r < 5; r++) {
            CK(cudaEventRecord(e0));
            var.run(a, st, T);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            best = ms < best ? ms : best;
        }
        CK(cudaMemcpy(v ? got.data() : ref.data(), a.out, sizeof(float) * got.size(),
                      cudaMemcpyDeviceToHost));
        bool eq = !v || memcmp(ref.data(), got.data(), sizeof(float) * got.size()) == 0;
        same &= eq;
        printf("  %-8s hd %3d %-26s %-36s %8.3f ms%s\n", fm.name, hd, sc.name, var.name, best,
               v ? (eq ? "  same bits" : "  BITS DIFFER") : "");
    }
    if (decode)
        CK(cudaFree(g_part));
    CK(cudaFree((void *)st.pos));
    CK(cudaFree((void *)st.seq));
    CK(cudaFree((void *)st.end_causal));
    CK(cudaFree((void *)st.tables));
    CK(cudaFree((void *)st.tab_off));
    CK(cudaFree((void *)a.q));
    CK(cudaFree(a.out));
    CK(cudaFree((void *)a.k_cache));
    CK(cudaFree((void *)a.v_cache));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return same;
}

int main(int argc, char **argv) {
    bool only_decode = argc > 1 && !strcmp(argv[1], "decode"); /* the decode scenes alone */
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("bench_cuda_attn on %s: one layer's attention, 32 query / 8 KV heads\n", p.name);
    float cb[4][4][16]; /* TurboQuant's codebooks: any increasing values serve here */
    for (int d = 0; d < 4; d++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 16; c++)
                cb[d][b][c] = -2.0f + 0.25f * (float)c + 0.1f * rnd();
    CK(cudaMemcpyToSymbol(kvt_cb, cb, sizeof cb));
    const scene scenes[] = {{"512 tokens at 0", 1, 512, 0, 0, 0},
                            {"512 tokens at 3584", 1, 512, 3584, 0, 0},
                            {"8 x 64 tokens at 1024", 8, 64, 1024, 0, 0},
                            {"448 at 0 + 64 x 1 at 1024", 1, 448, 0, 64, 1024}};
    const format f16 = {"f16", HR_DTYPE_F16, 0, 0};
    bool ok = true;
    for (const scene &sc : scenes) {
        if (only_decode)
            break;
        ok &= scene_run<4>(sc, 128, f16);
        ok &= scene_run<2>(sc, 64, f16);
    }
    /* the record formats (--cache-type-k q8_0 / q4_0, --kv-bits, --kv-quant
     * turbo at 3.5 and 2.5 bits): a prefill chunk, and one beside decode rows */
    const format recs[] = {{"q8_0", HR_DTYPE_Q8_0, 0, 0},      {"q4_0", HR_DTYPE_Q4_0, 0, 0},
                           {"affine4", HR_DTYPE_AFFINE, 4, 64}, {"affine3", HR_DTYPE_AFFINE, 3, 32},
                           {"turbo3.5", HR_DTYPE_TURBO, 7, 0},  {"turbo2.5", HR_DTYPE_TURBO, 5, 0}};
    for (const format &fm : recs)
        for (int i : {1, 3}) {
            if (only_decode)
                break;
            ok &= scene_run<4>(scenes[i], 128, fm);
            ok &= scene_run<2>(scenes[i], 64, fm);
        }
    /* decode after 16k tokens: one sequence, and 4 side by side */
    g_nsm = p.multiProcessorCount;
    const scene decs[] = {{"1 x 1 at 16384", 0, 0, 0, 1, 16384},
                          {"4 x 1 at 16384", 0, 0, 0, 4, 16384}};
    for (const scene &sc : decs) {
        ok &= scene_run<4>(sc, 128, f16);
        for (const format &fm : recs)
            ok &= scene_run<4>(sc, 128, fm);
    }
    if (!ok)
        fprintf(stderr, "bench_cuda_attn: a variant's bits differ from k_attention's\n");
    return ok ? 0 : 1;
}

/* ops_infer.c — the inference variants of ops.c's kernels, for incremental
 * decoding (decode.c): products with pre-packed weights (BLIS's micro-kernel,
 * the AVX512_BF16 kernel), and row kernels (softmax, log-softmax, LayerNorm)
 * whose every row is computed the same way whatever the other rows are.
 * Declared in ops.h beside their training counterparts. */
#include "ops.h"

#include <blis.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "kernel.h"
#include "parallel.h"
#include "util.h"
#include "vec16.h"

/* ======================================================================
 * Inference kernels (incremental decoding, decode.c)
 *
 * Each output row is computed by the same instructions in the same order
 * whatever the other rows of the call are, so that a sentence's translation
 * does not depend on which sentences share its batch or on the thread
 * count. The products go to BLIS's native gemm with "small/unpacked" (sup)
 * handling disabled: the native kernels sum each C element over k in the
 * same order whatever m is and whichever thread computes its tile, whereas
 * BLIS switches between sup and native kernels (which round differently)
 * depending on m. The row loops sum in a fixed order (16 running sums, then
 * a fixed tree).
 * ====================================================================== */

/* A product of ROWS_GEMM_PAR_MIN multiply-adds or more (parallel.h) shares
 * its threads (BLIS's own, or our team around the micro-kernel) when called
 * from serial code. */

/* y [i, :] += b for the n rows of y [n, out]. */
static void add_bias(float *y, const float *b, int n, int out) {
    if (!b) return;
    PAR_FOR(par_go((size_t)n * out, PAR_MIN), (int i = 0; i < n; i++), {
        float *yi = y + (size_t)i * out;
        for (int j = 0; j < out; j++) yi[j] += b[j];
    });
}

/* y = x W^T by the AVX512_BF16 kernel, W packed (p) or not (w), in blocks of
 * rows shared among the threads when called from serial code. */
static void bf16_block(float *y, const float *x, const float *w, const Bf16Packed *p, int r, int cnt, int in, int out) {
    if (p) bf16_gemm_packed(BF16_NATIVE, 0, cnt, 1.0f, x + (size_t)r * in, in, p, 0.0f, y + (size_t)r * out, out);
    else bf16_gemm(BF16_NATIVE, 0, 1, cnt, out, in, 1.0f, x + (size_t)r * in, in, w, in, 0.0f, y + (size_t)r * out, out);
}
static void bf16_rows(float *y, const float *x, const float *w, const Bf16Packed *p, int n, int in, int out) {
    enum { ROWS = 120 };
    if (!par_go((size_t)n * in * out, (size_t)ROWS_GEMM_PAR_MIN)) {   /* no region (parallel.h) */
        for (int r = 0; r < n; r += ROWS) bf16_block(y, x, w, p, r, n - r < ROWS ? n - r : ROWS, in, out);
        return;
    }
    #pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < n; r += ROWS) bf16_block(y, x, w, p, r, n - r < ROWS ? n - r : ROWS, in, out);
}

void linear_rows(float *y, const float *x, const float *w, const float *b, int n, int in, int out, int bf16) {
    if (n <= 0) return;
    float *xr = NULL, *wr = NULL;
    if (bf16 && bf16_decode_kernel()) {   /* the kernel rounds both as it packs them */
        bf16_rows(y, x, w, NULL, n, in, out);
        add_bias(y, b, n, out);
        return;
    }
    if (bf16) {   /* emulated: BLIS on x and W rounded (W per call: a packed layer holds it rounded once) */
        xr = xmalloc((size_t)n * in * sizeof(float));
        wr = xmalloc((size_t)out * in * sizeof(float));
        bf16_round_matrix(xr, in, x, in, n, in);
        bf16_round_matrix(wr, in, w, in, out, in);
        x = xr;
        w = wr;
    }
    float one = 1.0f, zero = 0.0f;
    rntm_t r = BLIS_RNTM_INITIALIZER;
    /* inside our own parallel region (one batch per thread): one thread */
    bli_rntm_set_num_threads(!omp_in_parallel() && (double)n * in * out >= ROWS_GEMM_PAR_MIN ? threads_count() : 1, &r);
    bli_rntm_disable_l3_sup(&r);
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, n, out, in, &one, (float *)x, in, 1,
                 (float *)w, in, 1, &zero, y, out, 1, NULL, &r);
    free(xr);
    free(wr);
    add_bias(y, b, n, out);
}

/* ---- matrix products with pre-packed weights --------------------------
 * BLIS packs the weight matrix of every product again on every call (it
 * cannot know the weights do not change): for a decoding step, with few
 * rows, that copying costs as much as a quarter of the product. So the
 * decoder's weights are packed once, in the layout of BLIS's own micro-kernel
 * (panels of output columns by KC inputs), and the products run
 * BLIS's loops around that micro-kernel here: the same kernel, the same
 * k-blocking, hence bit for bit the results of bli_sgemm's native path
 * (test_decode checks it), without the packing of the weights.
 * A micro-kernel computes an MR x NR block of C from a micro-panel of A
 * (MR rows) and one of B (NR columns), and prefers C stored by rows (the
 * 6x16 haswell/zen kernels) or by columns (the 32x12 AVX-512 skx kernel).
 * For row-stored C, bli_sgemm runs y = x W^T as it is: x is A, W^T is B,
 * the weight panels are NR wide. For column-stored C it runs the transposed
 * product y^T = W x^T (C = y^T is column-stored when y is row-stored): W is
 * A, x^T is B, the weight panels are MR wide. Both panels have the same
 * layout (kc rows of `width` floats), so only the kernel call changes. */
typedef void (*MicroKernel)(dim_t m, dim_t n, dim_t k, float *alpha, float *a, float *b, float *beta,
                            float *c, inc_t rs_c, inc_t cs_c, auxinfo_t *data, cntx_t *cntx);
typedef struct {
    MicroKernel ukr;
    cntx_t *cntx;
    int rows;             /* the kernel prefers row-stored C: x is A; else W is A */
    int XW, WW;           /* micro-panel widths of x and of W: (MR, NR) or (NR, MR) */
    int KC, XB;           /* k block; rows of x packed at once (a multiple of XW) */
} Kernel;

/* BLIS's kernel, queried once (the same for the whole process). */
static Kernel g_kernel;
static int g_kernel_ok;
static pthread_once_t g_kernel_once = PTHREAD_ONCE_INIT;

static void kernel_query(void) {
    Kernel *k = &g_kernel;
    k->cntx = bli_gks_query_cntx();
    k->ukr = (MicroKernel)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, k->cntx);
    int MR = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, k->cntx);
    int NR = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, k->cntx);
    k->KC = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, k->cntx);
    k->XB = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, k->cntx);
    k->rows = bli_cntx_l3_nat_ukr_prefers_rows_dt(BLIS_FLOAT, BLIS_GEMM_UKR, k->cntx);
    k->XW = k->rows ? MR : NR;
    k->WW = k->rows ? NR : MR;
    if (k->XW > 0) k->XB -= k->XB % k->XW;
    g_kernel_ok = k->ukr && MR > 0 && NR > 0 && k->KC > 0 && k->XB > 0;
}

static const Kernel *kernel_get(void) {
    pthread_once(&g_kernel_once, kernel_query);
    return g_kernel_ok ? &g_kernel : NULL;
}

size_t packed_scratch_floats(void) {
    const Kernel *k = kernel_get();
    return k ? (size_t)k->XB * k->KC : 0;
}

int packed_linear_packs(int pack, int bf16) { return pack && ((bf16 && bf16_decode_kernel()) || kernel_get()); }

void packed_linear_init(PackedLinear *L, const float *w, const float *b, int out, int in, int pack, int bf16) {
    memset(L, 0, sizeof *L);
    L->b = b; L->in = in; L->out = out; L->bf16 = bf16;
    if (!packed_linear_packs(pack, bf16)) {
        L->w = w;
        return;
    }
    packed_linear_init_rows(L, w, NULL, b, out, in, bf16);
}

/* The packed W: for each block of KC inputs, for each panel of WW outputs,
 * KC rows of WW floats (zero beyond out); bf16: rounded. Row o of W is
 * w + rows[o] * in (rows NULL: w + o * in), read where it lies. */
void packed_linear_init_rows(PackedLinear *L, const float *w, const int *rows, const float *b, int out, int in, int bf16) {
    memset(L, 0, sizeof *L);
    L->b = b; L->in = in; L->out = out; L->bf16 = bf16;
    ASSERT(packed_linear_packs(1, bf16));
    if (bf16 && bf16_decode_kernel()) {   /* op(B) = W^T [in, out], W stored [out, in] */
        float *g = NULL;
        if (rows) {   /* the kernel's packing reads a strided matrix: the rows gathered for it, then gone */
            g = xmalloc((size_t)out * in * sizeof(float));
            for (int o = 0; o < out; o++) memcpy(g + (size_t)o * in, w + (size_t)rows[o] * in, (size_t)in * sizeof(float));
        }
        bf16_pack(&L->p16, 1, in, out, g ? g : w, in);
        free(g);
        return;
    }
    const Kernel *k = kernel_get();
    int WW = k->WW, np = (out + WW - 1) / WW;
    float *d = L->pw = xaligned((size_t)np * WW * in * sizeof(float));
    for (int pc = 0; pc < in; pc += k->KC) {
        int kc = in - pc < k->KC ? in - pc : k->KC;
        for (int jp = 0; jp < np; jp++)
            for (int p = 0; p < kc; p++)
                for (int j = 0; j < WW; j++) {
                    int o = jp * WW + j;
                    float v = o < out ? w[(size_t)(rows ? rows[o] : o) * in + pc + p] : 0.0f;
                    *d++ = bf16 ? bf16_round(v) : v;
                }
    }
}

size_t packed_linear_bytes(const PackedLinear *L) {
    size_t b = 0;
    const Kernel *k = L->pw ? kernel_get() : NULL;
    if (k) b += (size_t)(L->out + k->WW - 1) / k->WW * k->WW * L->in * sizeof(float);
    if (L->p16.data) b += (size_t)(L->out + 63) / 64 * 64 * (L->in + 1) / 2 * 2 * sizeof(uint16_t);   /* about */
    return b;
}

void packed_linear_free(PackedLinear *L) {
    free(L->pw);
    L->pw = NULL;
    bf16_packed_free(&L->p16);
}

/* y [n, out] = x [n, in] W^T + b with the packed W: BLIS's five loops
 * (here: k blocks, blocks of rows of x, then panels of W by micro-panels of
 * x) around its micro-kernel. abuf: XB * KC floats for the packed rows of x.
 * linear_packed_part is thread t's share of nt (all of it for 0 of 1): its
 * micro-panels of x, then its panels of W, a barrier after each so that
 * abuf is whole before it is read and read before it is packed again. */
static void linear_packed_part(const Kernel *k, float *y, const float *x, const PackedLinear *L, int n, float *abuf,
                               int t, int nt) {
    int in = L->in, out = L->out, XW = k->XW, WW = k->WW, np = (out + WW - 1) / WW;
    for (int pc = 0; pc < in; pc += k->KC) {
        int kc = in - pc < k->KC ? in - pc : k->KC;
        const float *wblk = L->pw + (size_t)pc * np * WW;
        float one = 1.0f, zero = 0.0f, *beta = pc ? &one : &zero;   /* C = AB, then C += AB */
        for (int ic = 0; ic < n; ic += k->XB) {
            int mc = n - ic < k->XB ? n - ic : k->XB, na = (mc + XW - 1) / XW, lo, hi;
            par_share(na, t, nt, &lo, &hi);
            for (int ia = lo; ia < hi; ia++) {   /* rows of x into XW-row micro-panels */
                float *a = abuf + (size_t)ia * XW * kc;
                for (int i = 0; i < XW; i++) {
                    int r = ic + ia * XW + i;
                    if (r < n) {
                        const float *xr = x + (size_t)r * in + pc;
                        if (L->bf16) for (int p = 0; p < kc; p++) a[p * XW + i] = bf16_round(xr[p]);
                        else for (int p = 0; p < kc; p++) a[p * XW + i] = xr[p];
                    } else {
                        for (int p = 0; p < kc; p++) a[p * XW + i] = 0.0f;
                    }
                }
            }
            if (nt > 1) {
                #pragma omp barrier
            }
            par_share(np, t, nt, &lo, &hi);
            for (int jp = lo; jp < hi; jp++) {
                float *w = (float *)wblk + (size_t)jp * kc * WW;
                int nw = out - jp * WW < WW ? out - jp * WW : WW;
                for (int ia = 0; ia < na; ia++) {
                    float *xp = abuf + (size_t)ia * XW * kc, *c;
                    int r = ic + ia * XW, nx = n - r < XW ? n - r : XW;
                    auxinfo_t aux;
                    memset(&aux, 0, sizeof aux);
                    c = y + (size_t)r * out + jp * WW;
                    if (k->rows) {   /* C = y block [nx, nw], row-stored: A = x, B = W^T */
                        bli_auxinfo_set_next_a(ia + 1 < na ? xp + (size_t)XW * kc : abuf, &aux);
                        bli_auxinfo_set_next_b(ia + 1 < na ? w : w + (size_t)kc * WW, &aux);
                        k->ukr(nx, nw, kc, &one, xp, w, beta, c, out, 1, &aux, k->cntx);
                    } else {         /* C = y block^T [nw, nx], column-stored: A = W, B = x^T */
                        bli_auxinfo_set_next_a(ia + 1 < na ? w : w + (size_t)kc * WW, &aux);
                        bli_auxinfo_set_next_b(ia + 1 < na ? xp + (size_t)XW * kc : abuf, &aux);
                        k->ukr(nw, nx, kc, &one, w, xp, beta, c, 1, out, &aux, k->cntx);
                    }
                }
            }
            if (nt > 1) {
                #pragma omp barrier
            }
        }
    }
}
static void linear_packed(const Kernel *k, float *y, const float *x, const PackedLinear *L, int n, float *abuf) {
    if (n <= 0) return;
    PAR_PARTS(par_go((size_t)n * L->in * L->out, (size_t)ROWS_GEMM_PAR_MIN),
              linear_packed_part(k, y, x, L, n, abuf, par_t, par_nt););
    add_bias(y, L->b, n, L->out);   /* the bias after the product, as linear_rows adds it */
}

void packed_linear_forward(float *y, const float *x, const PackedLinear *L, int n, float *scratch) {
    if (L->p16.data) {
        bf16_rows(y, x, NULL, &L->p16, n, L->in, L->out);
        add_bias(y, L->b, n, L->out);
    } else if (L->pw) {
        linear_packed(kernel_get(), y, x, L, n, scratch);
    } else {
        linear_rows(y, x, L->w, L->b, n, L->in, L->out, L->bf16);
    }
}

/* A dot product with a fixed summation order: 16 running sums, the tail,
 * then the tree. */
static inline float dot(const float *a, const float *b, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return hsum16(acc);
}

/* The maximum of x [n]: exact, so in any order (and so a vector reduction,
 * which gcc made scalar when written as 16 running maxima). */
static inline float max_of(const float *x, int n) {
    float mx = -INFINITY;
    #pragma omp simd reduction(max:mx)
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* The max taken out first; 16 running sums. */
void logsumexp_rows(float *lse, const float *x, int n, int V) {
    PAR_FOR(par_go((size_t)n * V, PAR_MIN), (int i = 0; i < n; i++), {
        const float *xi = x + (size_t)i * V;
        float acc[16] = {0}, mx = max_of(xi, V);
        int j;
        for (j = 0; j + 16 <= V; j += 16)
            for (int l = 0; l < 16; l++) acc[l] += fast_expf(xi[j + l] - mx);
        for (int l = 0; j < V; j++, l++) acc[l] += fast_expf(xi[j] - mx);
        lse[i] = mx + logf(hsum16(acc));
    });
}

void attention_row(float *out, const float *q, const float *const *keys, const float *const *vals,
                   int nk, int H, int Dk, float *sc, int bf16) {
    float scale = 1.0f / sqrtf((float)Dk);
    int wide = Dk % 16 == 0;   /* 16 columns at a time in vector registers */
    for (int h = 0; h < H; h++) {   /* p_h = softmax(q_h K_h^T / sqrt(Dk)) into sc [h * nk, nk] */
        const float *qh = q + h * Dk;
        float *s = sc + h * nk;
        int j = 0;
        if (wide)   /* scores of four keys at a time: independent running sums */
            for (; j + 4 <= nk; j += 4) {
                vf16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                const float *k0 = keys[j] + h * Dk, *k1 = keys[j + 1] + h * Dk;
                const float *k2 = keys[j + 2] + h * Dk, *k3 = keys[j + 3] + h * Dk;
                for (int d = 0; d < Dk; d += 16) {
                    vf16 qd = load16(qh + d);
                    a0 += qd * load16(k0 + d);
                    a1 += qd * load16(k1 + d);
                    a2 += qd * load16(k2 + d);
                    a3 += qd * load16(k3 + d);
                }
                s[j] = vsum16(a0) * scale;
                s[j + 1] = vsum16(a1) * scale;
                s[j + 2] = vsum16(a2) * scale;
                s[j + 3] = vsum16(a3) * scale;
            }
        for (; j < nk; j++) s[j] = dot(qh, keys[j] + h * Dk, Dk) * scale;
        float mx = max_of(s, nk), sum = 0.0f;
        for (j = 0; j < nk; j++) s[j] = fast_expf(s[j] - mx);   /* vectorises ... */
        for (j = 0; j < nk; j++) sum += s[j];                   /* ... the sum stays in order */
        float inv = 1.0f / sum;
        for (j = 0; j < nk; j++) s[j] *= inv;
        if (bf16)   /* P rounded for the product P V (q, keys and values came rounded) */
            for (j = 0; j < nk; j++) s[j] = bf16_round(s[j]);
    }
    /* out_h = sum_j p_hj v_jh, each element summed over j in order. */
    if (!wide) {
        for (int h = 0; h < H; h++) {
            const float *s = sc + h * nk;
            float *oh = out + h * Dk;
            for (int d = 0; d < Dk; d++) oh[d] = 0.0f;
            for (int j = 0; j < nk; j++)
                for (int d = 0; d < Dk; d++) oh[d] += s[j] * vals[j][h * Dk + d];
        }
        return;
    }
    /* Every head at once, 8 vectors of columns a pass, whatever Dk is (one
     * loop for all head sizes; eight independent running sums where a head
     * of Dk 32 alone had two): column block u belongs to head (c + 16 u) / Dk.
     * The same bits as a head at a time, each element's sum in j order. */
    int D = H * Dk, c = 0;
    for (; c + 128 <= D; c += 128) {
        const float *p[8];
        vf16 a[8] = {{0}};
        for (int u = 0; u < 8; u++) p[u] = sc + (size_t)((c + 16 * u) / Dk) * nk;
        for (int j = 0; j < nk; j++) {
            const float *v = vals[j] + c;
            for (int u = 0; u < 8; u++) a[u] += p[u][j] * load16(v + 16 * u);
        }
        for (int u = 0; u < 8; u++) store16(out + c + 16 * u, a[u]);
    }
    for (; c < D; c += 16) {
        const float *p = sc + (size_t)(c / Dk) * nk;
        vf16 a = {0};
        for (int j = 0; j < nk; j++) a += p[j] * load16(vals[j] + c);
        store16(out + c, a);
    }
}

/* The sums in the fixed order of the other row kernels here (16 running
 * sums, then the tree), not layernorm_forward's omp simd reductions. */
void layernorm_rows(float *y, const float *x, const float *gamma, const float *beta, int n, int D) {
    PAR_FOR(par_go((size_t)n * D, PAR_MIN), (int i = 0; i < n; i++), {
        const float *xi = x + (size_t)i * D;
        float *yi = y + (size_t)i * D, s[16] = {0}, v[16] = {0};
        int j = 0;
        for (; j + 16 <= D; j += 16)
            for (int l = 0; l < 16; l++) s[l] += xi[j + l];
        for (int l = 0; j < D; j++, l++) s[l] += xi[j];
        float mu = hsum16(s) / D;
        for (j = 0; j + 16 <= D; j += 16)
            for (int l = 0; l < 16; l++) { float c = xi[j + l] - mu; v[l] += c * c; }
        for (int l = 0; j < D; j++, l++) { float c = xi[j] - mu; v[l] += c * c; }
        float r = 1.0f / sqrtf(hsum16(v) / D + LAYERNORM_EPS);
        for (j = 0; j < D; j++) yi[j] = (xi[j] - mu) * r * gamma[j] + beta[j];
    });
}

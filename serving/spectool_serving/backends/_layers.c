/* The decoder layers of a Llama model for the few rows of a verified tree, in one call.
 *
 * At 1-48 rows the GEMMs of spectool_sgemm stream the weights once; what is left of a forward
 * is ~35 small torch operators per layer (norms, rotary, attention, SiLU, residuals), each
 * with dispatch and threading overhead larger than its arithmetic: ~8 of 31 ms for a
 * one-token SmolLM2 forward here. This file runs every layer's glue in C between the GEMMs:
 * RMSNorm, rotary embedding, KV write into the caller's cache buffers, masked attention over
 * the cache and the tree, SiLU-gated MLP and residuals. Only the embedding, the final norm
 * and the LM head stay in Python.
 *
 * Maths follows transformers' Llama operator by operator. Elementwise steps keep its order
 * and are built with -ffp-contract=off, so rotary embedding and residuals round the same way;
 * reductions (the norm's sum of squares, softmax, attention sums) round in their own order,
 * which moves logits by ~1e-6 relative, as any change of kernel does. Each row's result is
 * independent of the other rows in the call (as in spectool_sgemm).
 *
 * q/k/v and gate/up arrive as one packed weight each (rows concatenated), so a layer makes
 * four GEMM calls, and the 192-column k and v projections do not each leave a thread idle.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void spectool_sgemm(const float *x, int64_t m, int64_t ldx, const float *wp, int64_t n,
                    int64_t k, const float *b, float *y, int64_t ldy);

typedef struct {
    int64_t layers, hidden, heads, kv_heads, head_dim, inter;
    float eps, scale;
    const float *const *ln_in;   /* [layers] -> [hidden] */
    const float *const *ln_post;
    const float *const *qkv;     /* [layers] -> packed [(heads + 2 kv_heads) * head_dim, hidden] */
    const float *const *o;       /* packed [hidden, heads * head_dim] */
    const float *const *gate_up; /* packed [2 inter, hidden] */
    const float *const *down;    /* packed [hidden, inter] */
} spectool_llama;

#define MAX_HEAD_DIM 512

static inline __mmask16 lanes(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* exp(x): Cephes' single-precision polynomial on x = n ln2 + r. x is clamped to
 * [-110, 88.7], so a masked score (-FLT_MAX) gives exactly 0. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-110.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* out[r] = w * (x[r] * rsqrt(mean(x[r]^2) + eps)) */
static void rms_norm(const float *x, int64_t rows, int64_t n, const float *w, float eps,
                     float *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
            __m512 v = _mm512_maskz_loadu_ps(lanes(n - i), xr + i);
            acc = _mm512_fmadd_ps(v, v, acc);
        }
        float inv = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
        for (int64_t i = 0; i < n; i++) o[i] = w[i] * (xr[i] * inv);
    }
}

/* In place on `heads` consecutive heads: x*cos + roll(x, d/2)*sin, sin sign-folded. */
static void rotary(float *v, int64_t heads, int64_t d, const float *cos, const float *sin) {
    float tmp[MAX_HEAD_DIM];
    int64_t half = d / 2;
    for (int64_t h = 0; h < heads; h++) {
        float *x = v + h * d;
        for (int64_t i = 0; i < d; i++) tmp[i] = x[i] * cos[i] + x[i < half ? i + half : i - half] * sin[i];
        memcpy(x, tmp, (size_t)d * sizeof(float));
    }
}

static float dot(const float *a, const float *b, int64_t d) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
        __mmask16 m = lanes(d - i);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* The `rep` query heads of one KV group for one query row (they share its mask row):
 * s = q.k * scale + mask; out = softmax(s) @ V. K, V [t, d]; s scratch [rep, t]. */
static void attend_group(const float *q, int64_t rep, int64_t d, const float *K, const float *V,
                         const float *mask, int64_t t, float scale, float *s, float *out) {
    for (int64_t j = 0; j < t; j++)
        for (int64_t h = 0; h < rep; h++) s[h * t + j] = dot(q + h * d, K + j * d, d) * scale + mask[j];
    for (int64_t h = 0; h < rep; h++) {
        float *sh = s + h * t, *oh = out + h * d;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < t; j += 16)
            mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), lanes(t - j), sh + j));
        __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < t; j += 16) {
            __mmask16 m = lanes(t - j);
            __m512 p = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sh + j), top)));
            _mm512_mask_storeu_ps(sh + j, m, p);
            sum = _mm512_add_ps(sum, p);
        }
        float inv = 1.0f / _mm512_reduce_add_ps(sum);
        for (int64_t i = 0; i < d; i += 16) {
            __mmask16 m = lanes(d - i);
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < t; j++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(sh[j]), _mm512_maskz_loadu_ps(m, V + j * d + i), acc);
            _mm512_mask_storeu_ps(oh + i, m, _mm512_mul_ps(acc, _mm512_set1_ps(inv)));
        }
    }
}

/* Every (batch row, KV group, query row) of one layer; qkv [R, ldq], att [R, heads * d]. */
static void attention(const spectool_llama *m, const float *qkv, int64_t ldq, float *att,
                      int64_t batch, int64_t q_len, const float *K, const float *V,
                      int64_t cap, const float *mask, int64_t t) {
    int64_t hk = m->kv_heads, d = m->head_dim, rep = m->heads / hk;
    int64_t items = batch * hk * q_len;
#pragma omp parallel
    {
        float *s = malloc((size_t)(rep * t) * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            int64_t b = it / (hk * q_len), g = it / q_len % hk, q = it % q_len, row = b * q_len + q;
            int64_t kv = (b * hk + g) * cap * d;
            attend_group(qkv + row * ldq + g * rep * d, rep, d, K + kv, V + kv,
                         mask + row * t, t, m->scale, s, att + row * m->heads * d + g * rep * d);
        }
        free(s);
    }
}

/* act[r, i] = silu(gu[r, i]) * gu[r, inter + i] */
static void silu_mul(const float *gu, int64_t rows, int64_t inter, float *act) {
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gu + r * 2 * inter, *u = g + inter;
        float *a = act + r * inter;
        for (int64_t i = 0; i < inter; i += 16) {
            __mmask16 m = lanes(inter - i);
            __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
            __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
            __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
            _mm512_mask_storeu_ps(a + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
        }
    }
}

static void add_into(float *x, const float *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + t[i];
}

int64_t spectool_llama_max_head_dim(void) { return MAX_HEAD_DIM; }

/* x [batch * q_len, hidden] in place: the residual stream after the last layer (before the
 * final norm). cos, sin [batch * q_len, head_dim]; mask additive [batch, q_len, t] over the
 * t = cached + q_len slots. keys[l], values[l]: [batch, kv_heads, caps[l], head_dim] buffers
 * whose first t - q_len slots hold the cache; the new tokens' KV is written after them.
 * Returns 0, or -1 when scratch memory cannot be had (x is then unchanged). */
int spectool_llama_layers(const spectool_llama *m, float *x, int64_t batch, int64_t q_len,
                          const float *cos, const float *sin, const float *mask, int64_t t,
                          float *const *keys, float *const *values, const int64_t *caps) {
    int64_t rows = batch * q_len, e = m->hidden, d = m->head_dim, hk = m->kv_heads;
    int64_t hq = m->heads * d, nqkv = hq + 2 * hk * d, f = m->inter, start = t - q_len;
    float *h = malloc((size_t)(rows * e) * sizeof(float));
    float *qkv = malloc((size_t)(rows * nqkv) * sizeof(float));
    float *att = malloc((size_t)(rows * hq) * sizeof(float));
    float *out = malloc((size_t)(rows * e) * sizeof(float));
    float *gu = malloc((size_t)(rows * 2 * f) * sizeof(float));
    float *act = malloc((size_t)(rows * f) * sizeof(float));
    int ok = h && qkv && att && out && gu && act;  /* x is untouched unless all are had */
    for (int64_t l = 0; ok && l < m->layers; l++) {
        rms_norm(x, rows, e, m->ln_in[l], m->eps, h);
        spectool_sgemm(h, rows, e, m->qkv[l], nqkv, e, 0, qkv, nqkv);
        for (int64_t r = 0; r < rows; r++)  /* q and k heads are adjacent: rotate both at once */
            rotary(qkv + r * nqkv, m->heads + hk, d, cos + r * d, sin + r * d);
        for (int64_t r = 0; r < rows; r++) {
            int64_t b = r / q_len, slot = start + r % q_len;
            for (int64_t g = 0; g < hk; g++) {
                int64_t at = ((b * hk + g) * caps[l] + slot) * d;
                memcpy(keys[l] + at, qkv + r * nqkv + hq + g * d, (size_t)d * sizeof(float));
                memcpy(values[l] + at, qkv + r * nqkv + hq + (hk + g) * d, (size_t)d * sizeof(float));
            }
        }
        attention(m, qkv, nqkv, att, batch, q_len, keys[l], values[l], caps[l], mask, t);
        spectool_sgemm(att, rows, hq, m->o[l], e, hq, 0, out, e);
        add_into(x, out, rows * e);
        rms_norm(x, rows, e, m->ln_post[l], m->eps, h);
        spectool_sgemm(h, rows, e, m->gate_up[l], 2 * f, e, 0, gu, 2 * f);
        silu_mul(gu, rows, f, act);
        spectool_sgemm(act, rows, f, m->down[l], e, f, 0, out, e);
        add_into(x, out, rows * e);
    }
    free(h); free(qkv); free(att); free(out); free(gu); free(act);
    return ok ? 0 : -1;
}

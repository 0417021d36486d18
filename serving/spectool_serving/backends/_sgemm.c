/* Small-M fp32 GEMM for tree verification on x86-64 CPUs with AVX-512.
 *
 * y[m, n] = sum_k x[m, k] * w[n, k] (+ b[n]) for the few rows (1-48) of a verified tree.
 * At these row counts the weights are streamed from memory once and the FMAs should hide
 * under that stream; BLAS kernels tuned for large M re-pack the weights per call or keep a
 * packed copy per row count. Here the weights are packed once into 64-column panels
 * ([N/64][K][64], zero-padded), and every width runs on that one copy.
 *
 * Each output is a plain k-ordered FMA chain over its own accumulator lane, whatever M is,
 * so a row's result does not depend on which other rows share the call (batch invariance:
 * a tree's root scores equal one-token decoding on the same kernel, bit for bit).
 *
 * Built at install (setup.py) or on first use (spectool_serving.backends.kernels); threads come
 * from the OpenMP runtime torch has already loaded (same soname), so torch.set_num_threads
 * applies here too.
 */
#include <immintrin.h>
#include <stdint.h>

#define PW 64         /* panel width: 4 AVX-512 vectors */
#define MB_MAX 6      /* rows per micro-kernel: 6x4 accumulators + 4 weights + 1 broadcast */
#define PREFETCH 8    /* panel rows ahead (2 KiB): keeps the weight stream going under FMAs */

int spectool_sgemm_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

int64_t spectool_sgemm_packed_floats(int64_t n, int64_t k) {
    return (n + PW - 1) / PW * k * PW;
}

void spectool_sgemm_pack(const float *w, int64_t n, int64_t k, float *wp) {
    int64_t panels = (n + PW - 1) / PW;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        float *dst = wp + p * k * PW;
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t c = 0; c < PW; c++) {
                int64_t row = p * PW + c;
                dst[kk * PW + c] = row < n ? w[row * k + kk] : 0.0f;
            }
    }
}

static inline __mmask16 tail_mask(int64_t cols) {
    return cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
}

/* MB rows of x against one panel; ncols (<= 64) of the panel are real columns. */
#define MICRO_KERNEL(MB)                                                                     \
    static void micro_##MB(const float *x, int64_t ldx, const float *panel, int64_t k,       \
                           float *y, int64_t ldy, const float *b, int64_t ncols) {          \
        __m512 acc[MB][4];                                                                   \
        _Pragma("GCC unroll 8") for (int m = 0; m < MB; m++)                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                              \
                acc[m][v] = _mm512_setzero_ps();                                             \
        for (int64_t kk = 0; kk < k; kk++) {                                                 \
            const float *row = panel + kk * PW;                                              \
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                              \
                _mm_prefetch((const char *)(row + PREFETCH * PW + 16 * v), _MM_HINT_T0);     \
            __m512 w0 = _mm512_load_ps(row), w1 = _mm512_load_ps(row + 16);                  \
            __m512 w2 = _mm512_load_ps(row + 32), w3 = _mm512_load_ps(row + 48);             \
            _Pragma("GCC unroll 8") for (int m = 0; m < MB; m++) {                           \
                __m512 xm = _mm512_set1_ps(x[m * ldx + kk]);                                 \
                acc[m][0] = _mm512_fmadd_ps(xm, w0, acc[m][0]);                              \
                acc[m][1] = _mm512_fmadd_ps(xm, w1, acc[m][1]);                              \
                acc[m][2] = _mm512_fmadd_ps(xm, w2, acc[m][2]);                              \
                acc[m][3] = _mm512_fmadd_ps(xm, w3, acc[m][3]);                              \
            }                                                                                \
        }                                                                                    \
        for (int m = 0; m < MB; m++)                                                         \
            for (int v = 0; v < 4 && 16 * v < ncols; v++) {                                  \
                __mmask16 mask = tail_mask(ncols - 16 * v);                                  \
                __m512 out = acc[m][v];                                                      \
                if (b) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, b + 16 * v));    \
                _mm512_mask_storeu_ps(y + m * ldy + 16 * v, mask, out);                      \
            }                                                                                \
    }
MICRO_KERNEL(1)
MICRO_KERNEL(2)
MICRO_KERNEL(3)
MICRO_KERNEL(4)
MICRO_KERNEL(5)
MICRO_KERNEL(6)

typedef void (*micro_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t,
                         const float *, int64_t);
static const micro_fn MICRO[MB_MAX + 1] = {0, micro_1, micro_2, micro_3, micro_4, micro_5, micro_6};

/* x [m, k] with row stride ldx; wp from spectool_sgemm_pack; y [m, n] with row stride ldy. */
void spectool_sgemm(const float *x, int64_t m, int64_t ldx, const float *wp, int64_t n,
                    int64_t k, const float *b, float *y, int64_t ldy) {
    int64_t panels = (n + PW - 1) / PW;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        const float *panel = wp + p * k * PW;
        int64_t ncols = n - p * PW < PW ? n - p * PW : PW;
        /* later row blocks re-read the panel from L2, not memory */
        for (int64_t r = 0; r < m; r += MB_MAX) {
            int64_t rows = m - r < MB_MAX ? m - r : MB_MAX;
            MICRO[rows](x + r * ldx, ldx, panel, k, y + r * ldy + p * PW, ldy,
                        b ? b + p * PW : 0, ncols);
        }
    }
}

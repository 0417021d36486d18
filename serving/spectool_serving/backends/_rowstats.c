/* One pass per logits row for the tree decoder: the greedy token, and the top-k tokens with
 * their softmax probabilities (the store's confidences).
 *
 * torch does this as argmax + softmax + topk: three passes over [n, V] and a [n, V] softmax
 * written out, ~2.5 ms per step for a 12-node tree over SmolLM2's 49k vocabulary. Here each
 * row is read twice (max/top-k, then the exp sum), nothing is written but the results.
 *
 * argmax is the first index of the maximum, as torch.argmax; top-k ties keep the lower index.
 */
#include <math.h>
/* k <= 64 (MAX_TOP_K in kernels.py) */
#include <stdint.h>

void spectool_row_stats(const float *logits, int64_t rows, int64_t vocab, int64_t k,
                        int64_t *argmax, int64_t *top_ids, float *top_probs) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * vocab;
        int64_t *ids = top_ids + r * k;
        float *probs = top_probs + r * k;
        float vals[64];  /* k <= 64: the current top-k, descending */
        int64_t n = 0;
        for (int64_t v = 0; v < vocab; v++) {
            float xv = x[v];
            if (n == k && !(xv > vals[k - 1])) continue;  /* the common case: one compare */
            int64_t pos = n < k ? n++ : k - 1;
            while (pos > 0 && xv > vals[pos - 1]) {  /* strict: an equal value stays behind */
                vals[pos] = vals[pos - 1];
                ids[pos] = ids[pos - 1];
                pos--;
            }
            vals[pos] = xv;
            ids[pos] = v;
        }
        float top = vals[0];
        double sum = 0.0;
        for (int64_t v = 0; v < vocab; v++) sum += expf(x[v] - top);
        for (int64_t i = 0; i < n; i++) probs[i] = (float)(expf(vals[i] - top) / sum);
        argmax[r] = ids[0];
    }
}

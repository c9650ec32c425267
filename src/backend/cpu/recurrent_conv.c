/* Causal depthwise conv1d with carried state (recurrent.h). Channels go in blocks of CB: the block's
 * last K-1 inputs stay in a small local window, so the output may overwrite the input, and each token
 * row is read once. */
#include <math.h>
#include <string.h>

#include "backend/cpu/recurrent.h"

#define CB 64

static const float ones[CB] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* The block's weights tap-major (wt[k][c]), so every loop below runs along contiguous channels; the
 * sums keep their order (bias, then the taps oldest first), so the bits do not depend on the layout. */
void pith_conv1d(const pith_conv1d_args *a, int c0, int c1) {
    const int K = a->kernel, H = K - 1, C = a->channels;
    float hist[PITH_CONV1D_MAX_KERNEL][CB]; /* hist[j]: input H - j steps back, j = 0 the oldest */
    float wt[PITH_CONV1D_MAX_KERNEL][CB], bias[CB];
    for (int cb = c0; cb < c1; cb += CB) {
        int nc = c1 - cb < CB ? c1 - cb : CB;
        for (int j = 0; j < H; j++) memcpy(hist[j], a->state + (size_t)j * C + cb, (size_t)nc * sizeof(float));
        for (int c = 0; c < nc; c++) {
            bias[c] = a->bias ? a->bias[cb + c] : 0.0f;
            for (int k = 0; k < K; k++) wt[k][c] = a->w[(size_t)(cb + c) * K + k];
        }
        for (int t = 0; t < a->n_tokens; t++) {
            const float *x = a->x + (size_t)t * a->ldx + cb;
            float *y = a->y + (size_t)t * a->ldy + cb, acc[CB], xc[CB];
            memcpy(xc, x, (size_t)nc * sizeof(float)); /* y may be x */
            for (int c = 0; c < nc; c++) acc[c] = bias[c];
            for (int j = 0; j < H; j++)
                for (int c = 0; c < nc; c++) acc[c] += wt[j][c] * hist[j][c];
            for (int c = 0; c < nc; c++) acc[c] += wt[H][c] * xc[c];
            if (H > 0) {
                for (int j = 0; j + 1 < H; j++) memcpy(hist[j], hist[j + 1], (size_t)nc * sizeof(float));
                memcpy(hist[H - 1], xc, (size_t)nc * sizeof(float));
            }
            if (a->silu && a->kernels) {
                a->kernels->silu_mul(acc, ones, nc);
            } else if (a->silu) {
                for (int c = 0; c < nc; c++) acc[c] = acc[c] / (1.0f + expf(-acc[c]));
            }
            memcpy(y, acc, (size_t)nc * sizeof(float));
        }
        for (int j = 0; j < H; j++) memcpy(a->state + (size_t)j * C + cb, hist[j], (size_t)nc * sizeof(float));
    }
}

/* Causal depthwise conv1d with carried state (recurrent.h). Channels go in blocks of CB: the block's
 * last K-1 inputs stay in a small local window, so the output may overwrite the input, and each token
 * row is read once. */
#include <math.h>
#include <string.h>

#include "backend/cpu/recurrent.h"

#define CB 64

void pith_conv1d(const pith_conv1d_args *a, int c0, int c1) {
    const int K = a->kernel, H = K - 1, C = a->channels;
    float hist[PITH_CONV1D_MAX_KERNEL][CB]; /* hist[j]: input H - j steps back, j = 0 the oldest */
    for (int cb = c0; cb < c1; cb += CB) {
        int nc = c1 - cb < CB ? c1 - cb : CB;
        for (int j = 0; j < H; j++) memcpy(hist[j], a->state + (size_t)j * C + cb, (size_t)nc * sizeof(float));
        for (int t = 0; t < a->n_tokens; t++) {
            const float *x = a->x + (size_t)t * a->ldx + cb;
            float *y = a->y + (size_t)t * a->ldy + cb;
            for (int c = 0; c < nc; c++) {
                const float *w = a->w + (size_t)(cb + c) * K;
                float xc = x[c];
                float acc = a->bias ? a->bias[cb + c] : 0.0f;
                for (int j = 0; j < H; j++) acc += w[j] * hist[j][c];
                acc += w[H] * xc;
                for (int j = 0; j + 1 < H; j++) hist[j][c] = hist[j + 1][c];
                if (H > 0) hist[H - 1][c] = xc;
                y[c] = a->silu ? acc / (1.0f + expf(-acc)) : acc;
            }
        }
        for (int j = 0; j < H; j++) memcpy(a->state + (size_t)j * C + cb, hist[j], (size_t)nc * sizeof(float));
    }
}

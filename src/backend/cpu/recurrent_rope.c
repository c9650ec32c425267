/* Partial and multi-section RoPE (recurrent.h). */
#include <math.h>

#include "backend/cpu/recurrent.h"

int pith_rope_section_of(const pith_rope_sections *s, int i) {
    if (s->interleaved) {
        if (i % 3 == 1 && i < 3 * s->n[1]) return 1;
        if (i % 3 == 2 && i < 3 * s->n[2]) return 2;
        return 0;
    }
    int end = 0;
    for (int k = 0; k < 4; k++) {
        end += s->n[k];
        if (i < end) return k;
    }
    return 0; /* past the sections (or none given): the first component */
}

void pith_rope_angles(const pith_rope_sections *s, const double pos[4], double theta, int n_rot, float *cs,
                      float *sn) {
    for (int i = 0; i < n_rot / 2; i++) {
        double angle = pos[pith_rope_section_of(s, i)] * pow(theta, -2.0 * i / n_rot);
        cs[i] = (float)cos(angle);
        sn[i] = (float)sin(angle);
    }
}

void pith_rope_partial(float *x, int n_heads, int head_dim, int n_rot, const float *cs, const float *sn) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

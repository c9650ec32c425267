/* Resampling as PIL's Image.resize does it on 8-bit RGB, so that a model sees the pixels its Hugging Face
 * processor would have given it.
 *
 * BILINEAR, BICUBIC and LANCZOS are separable convolutions: a horizontal pass into an intermediate
 * 8-bit image, then a vertical pass (a pass whose size does not change is skipped; it would be the
 * identity). Output pixel i of a pass is centred on input coordinate (i + 0.5) * in / out. On a
 * downscale the kernel is stretched by the factor in / out, so every input pixel contributes
 * (antialiasing); on an upscale it keeps its own width. The taps of each output pixel are normalized to
 * sum to 1, then stored in fixed point with 22 fractional bits, and each pass rounds its sums to uint8:
 * the same arithmetic as PIL's, so the results agree to the last bit except where a weight computed in
 * floating point falls on the other side of a rounding boundary (at most 1 level).
 *
 * NEAREST is not a filter in PIL but an affine transform: output pixel i takes input pixel
 * floor((i + 0.5) * in / out), with the coordinate accumulated step by step in double as PIL does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

#define FRAC_BITS 22

struct filter {
    double support; /* the kernel is zero outside [-support, support] at scale 1 */
    double (*kernel)(double);
};

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic with a = -0.5 */
static double cubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos3(double x) { return x >= -3.0 && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0; }

/* One pass's taps: output pixel i reads first[i] .. first[i] + count[i] - 1, with weights
 * w[i * ksize ...]. */
struct taps {
    int ksize;
    int *first, *count;
    int32_t *w;
};

static void taps_free(struct taps *t) {
    free(t->first);
    free(t->count);
    free(t->w);
}

static int taps_make(int in, int out, const struct filter *f, struct taps *t) {
    double scale = (double)in / out;
    double stretch = scale > 1.0 ? scale : 1.0;
    double inv = 1.0 / stretch;
    double support = f->support * stretch;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->first = malloc(sizeof(int) * (size_t)out);
    t->count = malloc(sizeof(int) * (size_t)out);
    t->w = malloc(sizeof(int32_t) * (size_t)out * (size_t)t->ksize);
    double *k = malloc(sizeof(double) * (size_t)t->ksize);
    if (!t->first || !t->count || !t->w || !k) {
        free(k);
        taps_free(t);
        return -1;
    }
    for (int i = 0; i < out; i++) {
        double center = (i + 0.5) * scale;
        /* truncation of a possibly negative value, then clamping: the window PIL takes */
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int n = hi - lo;
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            k[j] = f->kernel((j + lo - center + 0.5) * inv);
            sum += k[j];
        }
        int32_t *w = t->w + (size_t)i * t->ksize;
        for (int j = 0; j < n; j++) {
            double v = (sum != 0.0 ? k[j] / sum : k[j]) * (1 << FRAC_BITS);
            w[j] = (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
        }
        t->first[i] = lo;
        t->count[i] = n;
    }
    free(k);
    return 0;
}

static uint8_t to_u8(int64_t acc) {
    if (acc <= 0) return 0;
    acc >>= FRAC_BITS;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* The accumulators start at one half (in fixed point) so that the final shift rounds to nearest */
static void pass_horizontal(const uint8_t *src, int sw, int h, uint8_t *dst, int dw, const struct taps *t) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * sw * 3;
        uint8_t *o = dst + (size_t)y * dw * 3;
        for (int x = 0; x < dw; x++, o += 3) {
            const int32_t *w = t->w + (size_t)x * t->ksize;
            const uint8_t *p = row + (size_t)t->first[x] * 3;
            int64_t r = 1 << (FRAC_BITS - 1), g = r, b = r;
            for (int j = 0; j < t->count[x]; j++, p += 3) {
                r += (int64_t)p[0] * w[j];
                g += (int64_t)p[1] * w[j];
                b += (int64_t)p[2] * w[j];
            }
            o[0] = to_u8(r);
            o[1] = to_u8(g);
            o[2] = to_u8(b);
        }
    }
}

static void pass_vertical(const uint8_t *src, int w, uint8_t *dst, int dh, const struct taps *t) {
    size_t stride = (size_t)w * 3;
    for (int y = 0; y < dh; y++) {
        const int32_t *k = t->w + (size_t)y * t->ksize;
        const uint8_t *top = src + (size_t)t->first[y] * stride;
        uint8_t *o = dst + (size_t)y * stride;
        for (size_t i = 0; i < stride; i++) {
            int64_t acc = 1 << (FRAC_BITS - 1);
            for (int j = 0; j < t->count[y]; j++) acc += (int64_t)top[(size_t)j * stride + i] * k[j];
            o[i] = to_u8(acc);
        }
    }
}

/* PIL's nearest neighbour: the source index of each output index along one axis. */
static void nearest_index(int in, int out, int *idx) {
    double step = (double)in / out, at = step * 0.5;
    for (int i = 0; i < out; i++, at += step) {
        int s = (int)at;
        idx[i] = s < 0 ? 0 : s >= in ? in - 1 : s;
    }
}

static int resize_nearest(const pith_image *in, int w, int h, uint8_t *o, pith_err *err) {
    int *xs = malloc(sizeof(int) * (size_t)w), *ys = malloc(sizeof(int) * (size_t)h);
    if (!xs || !ys) {
        free(xs);
        free(ys);
        return pith_errf(err, "resize: out of memory");
    }
    nearest_index(in->width, w, xs);
    nearest_index(in->height, h, ys);
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in->data + (size_t)ys[y] * in->width * 3;
        for (int x = 0; x < w; x++, o += 3) memcpy(o, row + (size_t)xs[x] * 3, 3);
    }
    free(xs);
    free(ys);
    return 0;
}

int pith_image_resize(const pith_image *in, int w, int h, int filter, pith_image *out, pith_err *err) {
    memset(out, 0, sizeof *out);
    static const struct filter bilinear = {1.0, triangle}, bicubic = {2.0, cubic}, lanczos = {3.0, lanczos3};
    const struct filter *f;
    switch (filter) {
    case PITH_RESIZE_NEAREST: f = NULL; break;
    case PITH_RESIZE_BILINEAR: f = &bilinear; break;
    case PITH_RESIZE_BICUBIC: f = &bicubic; break;
    case PITH_RESIZE_LANCZOS: f = &lanczos; break;
    default: return pith_errf(err, "resize: unknown filter %d", filter);
    }
    if (!in || !in->data || in->width < 1 || in->height < 1)
        return pith_errf(err, "resize: the source image is empty");
    if (w < 1 || h < 1 || (uint64_t)w * (uint64_t)h > PITH_IMAGE_HARD_MAX_PIXELS)
        return pith_errf(err, "resize: bad target size %dx%d", w, h);
    uint8_t *o = malloc((size_t)w * h * 3);
    if (!o) return pith_errf(err, "resize: out of memory for %dx%d", w, h);
    if (w == in->width && h == in->height) {
        memcpy(o, in->data, (size_t)w * h * 3);
    } else if (!f) {
        if (resize_nearest(in, w, h, o, err) != 0) {
            free(o);
            return -1;
        }
    } else {
        /* horizontal pass (or the source itself), then vertical pass (or a copy of the horizontal's) */
        const uint8_t *mid = in->data;
        uint8_t *tmp = NULL;
        struct taps t;
        if (w != in->width) {
            tmp = h != in->height ? malloc((size_t)w * in->height * 3) : o;
            if (!tmp || taps_make(in->width, w, f, &t) != 0) {
                if (tmp != o) free(tmp);
                free(o);
                return pith_errf(err, "resize: out of memory");
            }
            pass_horizontal(in->data, in->width, in->height, tmp, w, &t);
            taps_free(&t);
            mid = tmp;
        }
        if (h != in->height) {
            if (taps_make(in->height, h, f, &t) != 0) {
                if (tmp != o) free(tmp);
                free(o);
                return pith_errf(err, "resize: out of memory");
            }
            pass_vertical(mid, w, o, h, &t);
            taps_free(&t);
        }
        if (tmp != o) free(tmp);
    }
    out->width = w;
    out->height = h;
    out->data = o;
    return 0;
}

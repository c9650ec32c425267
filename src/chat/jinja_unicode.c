/* UTF-8 helpers that give template strings Python's code-point semantics (len, slicing, strip, case).
 *
 * Invalid UTF-8 never fails: each invalid byte decodes to U+DC80..U+DCFF (Python's surrogateescape) and
 * encodes back to the same byte, so slicing and stripping keep arbitrary bytes intact. Case mapping
 * covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin (what chat templates
 * meet in practice); other scripts pass through unchanged. */
#include <string.h>

#include "chat/jinja.h"
#include "util/utf8.h"

size_t ju_decode(const char *s, size_t n, size_t i, uint32_t *cp) {
    int len = pith_utf8_decode((const unsigned char *)s + i, n - i, cp);
    if (len > 0) return (size_t)len;
    *cp = 0xDC00 + (unsigned char)s[i];
    return 1;
}

size_t ju_decode_back(const char *s, size_t end, uint32_t *cp) {
    /* A valid sequence ending at end decodes the same forwards (its lead byte cannot belong to an
     * earlier sequence); otherwise the last byte stands alone, as forward decoding also treats it. */
    for (size_t k = 2; k <= 4 && k <= end; k++) {
        unsigned char b = (unsigned char)s[end - k];
        if ((b & 0xC0) == 0x80) continue;
        if (ju_decode(s, end, end - k, cp) == k) return k;
        break;
    }
    return ju_decode(s, end, end - 1, cp);
}

int ju_encode(uint32_t cp, char out[4]) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) { /* an escaped invalid byte */
        out[0] = (char)(cp - 0xDC00);
        return 1;
    }
    return pith_utf8_encode(cp, out);
}

bool ju_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

bool ju_is_linebreak(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
           cp == 0x2028 || cp == 0x2029;
}

uint32_t ju_upper(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp == 0xB5) return 0x39C;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
    if (cp == 0xFF) return 0x178;
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return (cp & 1) ? cp - 1 : cp;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp : cp - 1;
    if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
    if (cp == 0x3C2) return 0x3A3;
    if (cp == 0x3AC) return 0x386;
    if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
    if (cp == 0x3CC) return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
    if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
    if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 32;
    return cp;
}

uint32_t ju_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
    if (cp == 0x178) return 0xFF;
    if (cp == 0x130) return 'i';
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return (cp & 1) ? cp : cp + 1;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp + 1 : cp;
    if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
    if (cp == 0x386) return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
    if (cp == 0x38C) return 0x3CC;
    if (cp == 0x38E || cp == 0x38F) return cp + 63;
    if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
    if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 32;
    return cp;
}

static bool is_cased(uint32_t cp) { return ju_upper(cp) != cp || ju_lower(cp) != cp || cp == 0xDF; }

bool ju_is_alpha(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
    return is_cased(cp) || cp == 0xAA || cp == 0xBA || (cp >= 0x3040 && cp <= 0x30FF) ||
           (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3);
}

bool ju_is_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

/* Bytes of pure ASCII starting at i, checked a word at a time (the common case for long texts). */
static size_t ascii_run(const char *p, size_t n, size_t i) {
    size_t start = i;
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
    }
    while (i < n && (unsigned char)p[i] < 0x80) i++;
    return i - start;
}

size_t ju_count(jstr s) {
    size_t k = 0;
    for (size_t i = 0; i < s.n;) {
        size_t a = ascii_run(s.p, s.n, i);
        k += a;
        i += a;
        if (i >= s.n) break;
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        k++;
    }
    return k;
}

size_t ju_offset(jstr s, size_t cp_index) {
    size_t i = 0;
    while (cp_index > 0 && i < s.n) {
        size_t a = ascii_run(s.p, s.n, i);
        if (a >= cp_index) return i + cp_index;
        i += a;
        cp_index -= a;
        if (i >= s.n) break;
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        cp_index--;
    }
    return i;
}

static bool is_title_sep(uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_is_space(cp);
}

int ju_map_case(jctx *c, jstr s, int mode, jstr *out) {
    jbuf b = {0};
    bool first = true, word_start = true, prev_cased = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        bool up;
        switch (mode) {
        case 0: up = false; break;
        case 1: up = true; break;
        case 2: up = first; break;
        case 3:
            if (is_title_sep(cp)) {
                word_start = true;
                up = false;
                char enc[4];
                if (jbuf_put(c, &b, enc, (size_t)ju_encode(cp, enc)) < 0) return -1;
                first = false;
                continue;
            }
            up = word_start;
            word_start = false;
            break;
        default: {
            bool cased = is_cased(cp);
            up = cased && !prev_cased;
            prev_cased = cased;
            break;
        }
        }
        first = false;
        if (up && cp == 0xDF) {
            if (jbuf_put(c, &b, mode == 1 ? "SS" : "Ss", 2) < 0) return -1;
            continue;
        }
        char enc[4];
        uint32_t m = up ? ju_upper(cp) : ju_lower(cp);
        if (jbuf_put(c, &b, enc, (size_t)ju_encode(m, enc)) < 0) return -1;
    }
    *out = jbuf_str(&b);
    return 0;
}

static bool in_set(uint32_t cp, const jstr *chars) {
    if (!chars) return ju_is_space(cp);
    for (size_t i = 0; i < chars->n;) {
        uint32_t c2;
        i += ju_decode(chars->p, chars->n, i, &c2);
        if (c2 == cp) return true;
    }
    return false;
}

int ju_strip(jstr s, const jstr *chars, bool left, bool right, jstr *out) {
    size_t start = 0, end = s.n;
    if (left) {
        while (start < end) {
            uint32_t cp;
            size_t k = ju_decode(s.p, s.n, start, &cp);
            if (!in_set(cp, chars)) break;
            start += k;
        }
    }
    while (right && end > start) {
        uint32_t cp;
        size_t k = ju_decode_back(s.p, end, &cp);
        if (!in_set(cp, chars)) break;
        end -= k;
    }
    *out = (jstr){s.p + start, end - start};
    return 0;
}

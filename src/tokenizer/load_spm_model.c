/* SentencePiece model files (tokenizer.model): a protobuf ModelProto. Only the fields a BPE model needs
 * are read (pieces with score and type; trainer_spec model_type, byte_fallback and special ids;
 * normalizer_spec add_dummy_prefix); the rest is skipped by wire type. Unigram models are refused.
 * Every length and varint is bounds-checked against the buffer. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct pb {
    const unsigned char *p, *end;
    bool bad;
} pb;

static uint64_t pb_varint(pb *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) break;
        unsigned char c = *r->p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) return v;
    }
    r->bad = true;
    return 0;
}

/* Reads one field header; false at the end of the message or on damage. */
static bool pb_field(pb *r, uint32_t *field, uint32_t *wire) {
    if (r->bad || r->p >= r->end) return false;
    uint64_t key = pb_varint(r);
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return !r->bad;
}

static pb pb_sub(pb *r) {
    uint64_t len = pb_varint(r);
    pb s = {r->p, r->p, true};
    if (r->bad || len > (uint64_t)(r->end - r->p)) {
        r->bad = true;
        return s;
    }
    s.end = r->p + len;
    s.bad = false;
    r->p += len;
    return s;
}

static float pb_float(pb *r) {
    if (r->end - r->p < 4) {
        r->bad = true;
        return 0;
    }
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static void pb_skip(pb *r, uint32_t wire) {
    switch (wire) {
    case 0: pb_varint(r); break;
    case 1:
        if (r->end - r->p < 8) r->bad = true;
        else r->p += 8;
        break;
    case 2: pb_sub(r); break;
    case 5: pb_float(r); break;
    default: r->bad = true; /* groups are not used by sentencepiece */
    }
}

typedef struct spm_piece {
    const unsigned char *text;
    size_t len;
    float score;
    int type;
} spm_piece;

typedef struct spm_spec {
    int model_type;
    bool byte_fallback, add_dummy_prefix;
    int64_t unk, bos, eos, pad;
} spm_spec;

static bool read_piece(pb m, spm_piece *out) {
    out->text = NULL;
    out->len = 0;
    out->score = 0;
    out->type = TOK_NORMAL;
    uint32_t f, w;
    while (pb_field(&m, &f, &w)) {
        if (f == 1 && w == 2) {
            pb s = pb_sub(&m);
            out->text = s.p;
            out->len = (size_t)(s.end - s.p);
        } else if (f == 2 && w == 5) {
            out->score = pb_float(&m);
        } else if (f == 3 && w == 0) {
            uint64_t ty = pb_varint(&m);
            out->type = ty >= TOK_NORMAL && ty <= TOK_BYTE ? (int)ty : TOK_NORMAL;
        } else {
            pb_skip(&m, w);
        }
    }
    return !m.bad;
}

static void read_trainer(pb m, spm_spec *spec) {
    uint32_t f, w;
    while (pb_field(&m, &f, &w)) {
        if (w != 0) {
            pb_skip(&m, w);
            continue;
        }
        int64_t v = (int64_t)pb_varint(&m); /* negative int32s are sign-extended 10-byte varints */
        switch (f) {
        case 3: spec->model_type = (int)v; break;
        case 35: spec->byte_fallback = v != 0; break;
        case 40: spec->unk = v; break;
        case 41: spec->bos = v; break;
        case 42: spec->eos = v; break;
        case 43: spec->pad = v; break;
        default: break;
        }
    }
}

static void read_normalizer(pb m, spm_spec *spec) {
    uint32_t f, w;
    while (pb_field(&m, &f, &w)) {
        if (f == 3 && w == 0) spec->add_dummy_prefix = pb_varint(&m) != 0;
        else pb_skip(&m, w);
    }
}

int tok_load_spm_model(const char *path, pith_tokenizer **out, pith_err *err) {
    *out = NULL;
    char *data;
    size_t size;
    if (tok_read_file(path, &data, &size, err) != 0) return -1;
    spm_spec spec = {.model_type = 1, .add_dummy_prefix = true, .unk = 0, .bos = 1, .eos = 2, .pad = -1};
    pb r = {(const unsigned char *)data, (const unsigned char *)data + size, false};
    size_t n = 0;
    uint32_t f, w;
    while (pb_field(&r, &f, &w)) {
        if (f == 1 && w == 2) {
            pb_sub(&r);
            n++;
        } else if (f == 2 && w == 2) {
            read_trainer(pb_sub(&r), &spec);
        } else if (f == 3 && w == 2) {
            read_normalizer(pb_sub(&r), &spec);
        } else {
            pb_skip(&r, w);
        }
    }
    pith_tokenizer *t = NULL;
    if (r.bad || n == 0) {
        pith_errf(err, "%s: not a valid SentencePiece model", path);
        goto fail;
    }
    if (spec.model_type != 2) {
        pith_errf(err, "%s: SentencePiece model type %d is not supported (only BPE)", path, spec.model_type);
        goto fail;
    }
    if (n > (1u << 24) || !(t = tok_alloc((int)n, err))) goto fail_prefix;
    r.p = (const unsigned char *)data;
    r.bad = false;
    int32_t id = 0;
    while (pb_field(&r, &f, &w)) {
        if (!(f == 1 && w == 2)) {
            pb_skip(&r, w);
            continue;
        }
        spm_piece pc;
        if (!read_piece(pb_sub(&r), &pc)) {
            pith_errf(err, "piece %d is damaged", id);
            goto fail_prefix;
        }
        if (tok_set_token(t, id++, (const char *)pc.text, pc.len, pc.score, pc.type, err) != 0) goto fail_prefix;
    }
    t->model = TOK_MODEL_SPM;
    t->decode = TOK_DECODE_SPM;
    t->byte_fallback = spec.byte_fallback;
    t->unk = spec.unk >= 0 && spec.unk < (int64_t)n ? (int32_t)spec.unk : -1;
    t->bos = spec.bos >= 0 && spec.bos < (int64_t)n ? (int32_t)spec.bos : -1;
    t->eos = spec.eos >= 0 && spec.eos < (int64_t)n ? (int32_t)spec.eos : -1;
    t->pad = spec.pad >= 0 && spec.pad < (int64_t)n ? (int32_t)spec.pad : -1;
    t->add_bos = t->bos >= 0;
    t->add_space_prefix = t->strip_leading_space = spec.add_dummy_prefix;
    static const char marker[] = "\xe2\x96\x81";
    memcpy(t->space_marker, marker, 3);
    t->space_marker_len = 3;
    if (tok_add_norm(t, TOK_NORM_REPLACE, " ", 1, marker, 3, err) != 0) goto fail_prefix;
    if (spec.add_dummy_prefix && tok_add_norm(t, TOK_NORM_PREPEND, marker, 3, NULL, 0, err) != 0) goto fail_prefix;
    if (tok_finalize(t, err) != 0) goto fail_prefix;
    free(data);
    *out = t;
    return 0;
fail_prefix:
    pith_err_prefix(err, "%s", path);
fail:
    pith_tokenizer_free(t);
    free(data);
    return -1;
}

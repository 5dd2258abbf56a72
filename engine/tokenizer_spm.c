/* tokenizer_spm.c — loads a SentencePiece tokenizer.model (protobuf ModelProto), e.g. Mistral's
 * tokenizer.model.v3, as score-based BPE with byte fallback.
 *
 * Only what the BPE models of the supported families use is read: pieces (field 1: piece, score, type),
 * trainer_spec.model_type (must be BPE) and byte_fallback, and normalizer_spec (name "identity",
 * add_dummy_prefix, remove_extra_whitespaces = false). Other settings are refused by name. The protobuf
 * wire format is decoded by hand: varints, 32-bit floats and length-delimited fields. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

typedef struct {
    const unsigned char *p, *end;
} Pb;

typedef struct {
    int field, wire;
    uint64_t v;                      /* varint or fixed32 value */
    const unsigned char *data;       /* length-delimited payload */
    size_t len;
} PbField;

static int pb_varint(Pb *b, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        unsigned char c = *b->p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Next field of the message; 1 when read, 0 at the end, -1 when malformed. */
static int pb_next(Pb *b, PbField *f) {
    if (b->p >= b->end) return 0;
    uint64_t key;
    if (pb_varint(b, &key)) return -1;
    f->field = (int)(key >> 3);
    f->wire = (int)(key & 7);
    f->v = 0;
    f->data = NULL;
    f->len = 0;
    switch (f->wire) {
    case 0:
        return pb_varint(b, &f->v) ? -1 : 1;
    case 1:
        if (b->end - b->p < 8) return -1;
        b->p += 8;
        return 1;
    case 2: {
        uint64_t len;
        if (pb_varint(b, &len) || len > (uint64_t)(b->end - b->p)) return -1;
        f->data = b->p;
        f->len = (size_t)len;
        b->p += len;
        return 1;
    }
    case 5:
        if (b->end - b->p < 4) return -1;
        f->v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 | (uint64_t)b->p[3] << 24;
        b->p += 4;
        return 1;
    }
    return -1;
}

typedef struct {
    int n_pieces;
    int model_type, byte_fallback;
    int add_dummy_prefix, remove_extra_whitespaces;
    char norm_name[64];
} SpmSpec;

static int read_specs(const unsigned char *data, size_t len, SpmSpec *sp) {
    Pb b = {data, data + len};
    PbField f;
    int rc;
    sp->model_type = 1; /* sentencepiece defaults */
    sp->add_dummy_prefix = 1;
    sp->remove_extra_whitespaces = 1;
    while ((rc = pb_next(&b, &f)) > 0) {
        if (f.field == 1 && f.wire == 2) sp->n_pieces++;
        if ((f.field == 2 || f.field == 3) && f.wire == 2) {
            Pb sub = {f.data, f.data + f.len};
            PbField g;
            int r;
            while ((r = pb_next(&sub, &g)) > 0) {
                if (f.field == 2 && g.field == 3 && g.wire == 0) sp->model_type = (int)g.v;
                if (f.field == 2 && g.field == 35 && g.wire == 0) sp->byte_fallback = (int)g.v;
                if (f.field == 3 && g.field == 1 && g.wire == 2) {
                    size_t n = g.len < sizeof sp->norm_name - 1 ? g.len : sizeof sp->norm_name - 1;
                    memcpy(sp->norm_name, g.data, n);
                    sp->norm_name[n] = '\0';
                }
                if (f.field == 3 && g.field == 3 && g.wire == 0) sp->add_dummy_prefix = (int)g.v;
                if (f.field == 3 && g.field == 4 && g.wire == 0) sp->remove_extra_whitespaces = (int)g.v;
            }
            if (r < 0) return -1;
        }
    }
    return rc;
}

int tokenizer_load_spm_model(Tokenizer **out, const char *path, KvErr *err) {
    size_t len;
    unsigned char *data = (unsigned char *)kv_read_file(path, &len, err);
    if (!data) return -1;
    SpmSpec sp = {0};
    Tokenizer *t = NULL;
    if (read_specs(data, len, &sp)) {
        kv_fail(err, "%s: not a SentencePiece model (malformed protobuf)", path);
        goto fail;
    }
    if (sp.n_pieces == 0) {
        kv_fail(err, "%s: SentencePiece model has no pieces", path);
        goto fail;
    }
    if (sp.model_type != 2) {
        kv_fail(err, "%s: unsupported SentencePiece model_type %d (only BPE = 2)", path, sp.model_type);
        goto fail;
    }
    if ((sp.norm_name[0] && strcmp(sp.norm_name, "identity") != 0) || sp.remove_extra_whitespaces) {
        kv_fail(err, "%s: unsupported SentencePiece normalizer '%s'%s", path, sp.norm_name,
                sp.remove_extra_whitespaces ? " with remove_extra_whitespaces" : "");
        goto fail;
    }
    if (tok_create(&t, TOK_SPM, sp.n_pieces, err)) goto fail;
    tok_configure_spm_scores(t, sp.add_dummy_prefix);
    t->byte_fallback = sp.byte_fallback;
    int *types = kv_malloc((size_t)sp.n_pieces * sizeof *types, err);
    if (!types) goto fail;
    Pb b = {data, data + len};
    PbField f;
    int id = 0;
    while (pb_next(&b, &f) > 0) {
        if (f.field != 1 || f.wire != 2) continue;
        Pb sub = {f.data, f.data + f.len};
        PbField g;
        const unsigned char *piece = NULL;
        size_t piece_len = 0;
        float score = 0.0f;
        int type = TT_NORMAL;
        while (pb_next(&sub, &g) > 0) {
            if (g.field == 1 && g.wire == 2) { piece = g.data; piece_len = g.len; }
            if (g.field == 2 && g.wire == 5) { uint32_t u = (uint32_t)g.v; memcpy(&score, &u, 4); }
            if (g.field == 3 && g.wire == 0) type = (int)g.v;
        }
        if (!piece) {
            kv_fail(err, "%s: piece %d has no text", path, id);
            free(types);
            goto fail;
        }
        if (tok_set_token(t, id, (const char *)piece, piece_len, err)) {
            free(types);
            goto fail;
        }
        t->scores[id] = score;
        types[id++] = type;
    }
    int rc = tok_index_vocab(t, err);
    for (int i = 0; rc == 0 && i < sp.n_pieces; i++) rc = tok_apply_token_type(t, i, types[i], err);
    free(types);
    if (rc) goto fail;
    t->bos_id = tokenizer_token_id(t, "<s>");
    t->eos_id = tokenizer_token_id(t, "</s>");
    if (tok_finish(t, path, err)) goto fail;
    free(data);
    *out = t;
    return 0;
fail:
    tokenizer_free(t);
    free(data);
    return -1;
}

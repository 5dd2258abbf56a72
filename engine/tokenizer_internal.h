/* tokenizer_internal.h — the Tokenizer struct and the pieces the tokenizer files share:
 *   tokenizer.c        public API, vocabulary building, added-token splitting, normalisers, decode
 *   tokenizer_pretok.c the pre-tokenizer scanners (GPT-2, Llama-3, Qwen2, digit split, Metaspace)
 *   tokenizer_bpe.c    the BPE merge of one pre-token (rank-based or score-based, with byte fallback)
 *   tokenizer_hf.c     loader for Hugging Face tokenizer.json (+ tokenizer_config.json)
 *   tokenizer_gguf.c   loader for GGUF tokenizer metadata
 *   tokenizer_spm.c    loader for a SentencePiece tokenizer.model (protobuf)
 * Loaders fill a Tokenizer through the tok_* builder functions and finish with tok_finish. */
#ifndef KVBENCH_TOKENIZER_INTERNAL_H
#define KVBENCH_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* U+2581 '▁', SentencePiece's visible space. */
#define SPM_SPACE "\xE2\x96\x81"

/* Byte-level BPE (GPT-2 byte alphabet) or SentencePiece-style BPE over characters with '▁' for spaces. */
typedef enum { TOK_BYTE_LEVEL = 0, TOK_SPM = 1 } TokModel;

/* Which pre-tokenizer splits a text segment into words before BPE. */
typedef enum {
    PRETOK_NONE = 0,     /* the whole segment is one word (SentencePiece) */
    PRETOK_GPT2,         /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,       /* Llama-3 regex with \p{N}{1,3} */
    PRETOK_QWEN2,        /* Llama-3 regex with single \p{N} */
    PRETOK_DIGITS_GPT2,  /* SmolLM / StarCoder: every \p{N} alone, then the GPT-2 regex */
    PRETOK_METASPACE     /* split before every '▁' (HF Metaspace with split=true) */
} PretokKind;

/* Rank-based merges (a merges table; lowest rank first) or score-based (the concatenation must be a vocab
 * piece; highest score first), both leftmost on ties. */
typedef enum { MERGE_RANKS = 0, MERGE_SCORES = 1 } MergeKind;

/* SentencePiece space handling: '▁' is prepended to every text segment, to the segment at the start of the
 * text only (HF Metaspace prepend_scheme "first"), or never. */
typedef enum { SPACE_PREFIX_NONE = 0, SPACE_PREFIX_ALWAYS, SPACE_PREFIX_FIRST } SpacePrefix;

typedef struct {
    char *text;        /* owned copy */
    int len;
    int id;
    int special;       /* only matched when encoding with parse_special */
    int lstrip, rstrip;/* the match absorbs whitespace on that side */
} AddedToken;

/* Open-addressing map from a token's bytes to its id; slots hold ids, keys are the tokens themselves. */
typedef struct {
    int *slots;        /* [cap], -1 empty */
    uint32_t cap;      /* power of two */
} StrMap;

/* Open-addressing map from a pair of ids to (rank, merged id). */
typedef struct {
    uint64_t *keys;    /* [cap], ((uint64)left << 32 | right) + 1; 0 empty */
    int *rank;         /* [cap] */
    int *result;       /* [cap] */
    uint32_t cap, n;
} PairMap;

struct Tokenizer {
    TokModel model;
    PretokKind pretok;
    MergeKind merge_kind;
    int normalize_nfc;       /* Qwen2: NFC before pre-tokenizing */
    SpacePrefix space_prefix;/* TOK_SPM */
    int prefix_if_absent;    /* HF Metaspace: no '▁' prepended to a segment that already starts with a space */
    int split_before_spaces; /* TOK_SPM without pre-tokenizer whose pieces never hold a '▁' after another
                              * character: no merge can cross the start of a run of '▁', so words may be
                              * split there with the same result, which keeps long contexts fast */
    int replace_space;       /* TOK_SPM: ' ' -> '▁' */
    int strip_decoded_space; /* decoder: drop one leading space of the decoded text */
    int clean_up_spaces;     /* decode ends with transformers' clean_up_tokenization (tokenizer_decode) */
    int ignore_merges;       /* a word that is itself a vocab entry is emitted whole (Llama-3) */
    int byte_fallback;       /* unknown characters become <0xXX> tokens */
    int unk_id, bos_id, eos_id;

    int n_vocab;             /* ids are 0..n_vocab-1; ids without a token are holes */
    char *pool;              /* every token's bytes, each NUL-terminated */
    size_t pool_len, pool_cap;
    int64_t *tok_off;        /* [n_vocab] offset into pool, -1 for a hole */
    int *tok_len;            /* [n_vocab] */
    float *scores;           /* [n_vocab] MERGE_SCORES only */
    unsigned char *special;  /* [n_vocab] control tokens, dropped by decode's skip_special */
    int16_t *byte_of;        /* [n_vocab] the byte a <0xXX> fallback token stands for, -1 otherwise */

    StrMap vocab;
    PairMap merges;
    AddedToken *added;       /* sorted by first byte, then longest first */
    int n_added, cap_added;
    int added_first[257];    /* added[added_first[b] .. added_first[b+1]) start with byte b */

    int byte_id[256];        /* TOK_BYTE_LEVEL: id of the one-character token of each byte (-1 if absent)
                              * TOK_SPM: id of the <0xXX> token of each byte (-1 if absent) */
    uint16_t byte_cp[256];   /* GPT-2 byte -> code point map (TOK_BYTE_LEVEL) */
    int16_t cp_byte[324];    /* its inverse for code points 0..323; -1 outside the byte alphabet */
};

/* ---- builder (tokenizer.c) ---- */
int tok_create(Tokenizer **out, TokModel model, int n_vocab, KvErr *err);
/* Sets the token of an id (< n_vocab); the bytes are copied. */
int tok_set_token(Tokenizer *t, int id, const char *s, size_t len, KvErr *err);
/* Grows the id space (for added tokens beyond the model vocabulary). */
int tok_grow_vocab(Tokenizer *t, int n_vocab, KvErr *err);
int tok_add_added(Tokenizer *t, int id, const char *s, size_t len, int special, int lstrip, int rstrip,
                  KvErr *err);
int tok_add_merge(Tokenizer *t, int left, int right, int rank, int result, KvErr *err);
/* 1 and (rank, merged id) when the pair is in the merges table, else 0. */
int tok_merge_lookup(const Tokenizer *t, int left, int right, int *rank, int *result);
/* Builds the vocab index (call once all tokens are set, before tok_lookup and tok_add_merge's callers
 * resolve strings). */
int tok_index_vocab(Tokenizer *t, KvErr *err);
int tok_lookup(const Tokenizer *t, const char *s, size_t len);
/* SentencePiece token types (GGUF tokenizer.ggml.token_type and sentencepiece's ModelProto share them). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };
/* Control and unknown tokens become special added tokens (unknown also the unk id), user-defined ones
 * plain added tokens, as llama.cpp and sentencepiece treat them. */
int tok_apply_token_type(Tokenizer *t, int id, int type, KvErr *err);
/* Score-based SentencePiece BPE with byte fallback; add_space_prefix is the '▁' prepended to segments. */
void tok_configure_spm_scores(Tokenizer *t, int add_space_prefix);
/* Byte tables and added-token order; validates that the tokenizer can encode. */
int tok_finish(Tokenizer *t, const char *source, KvErr *err);
const char *tok_text(const Tokenizer *t, int id);

/* ---- pre-tokenizers (tokenizer_pretok.c) ---- */
enum { CH_LETTER = 1, CH_NUMBER = 2, CH_SPACE = 4 };

typedef struct {
    int start, end;          /* character indices, end exclusive */
} WordSpan;

typedef struct {
    WordSpan *v;
    int n, cap;
} WordSpans;

/* Splits characters cp[0..n) (with their CH_* classes) into words, appending to out. */
int pretok_split(PretokKind kind, const uint32_t *cp, const unsigned char *cls, int n, WordSpans *out,
                 KvErr *err);
/* Recognises the Split regex strings of tokenizer.json; PRETOK_NONE when it is not a known one. */
PretokKind pretok_from_regex(const char *regex);

/* ---- BPE (tokenizer_bpe.c) ---- */
typedef struct BpeScratch BpeScratch;
BpeScratch *bpe_scratch_new(KvErr *err);
void bpe_scratch_free(BpeScratch *s);
/* Encodes one word (bytes of the normalised text) and appends its ids. */
int bpe_encode_word(const Tokenizer *t, const char *word, size_t len, BpeScratch *s, TokenIds *out,
                    KvErr *err);

/* ---- loaders ---- */
int tokenizer_load_hf(Tokenizer **out, const char *json_path, KvErr *err);
int tokenizer_load_spm_model(Tokenizer **out, const char *path, KvErr *err);

/* Grows *p (elements of size elem) to hold at least need elements. */
int tok_reserve(void **p, int *cap, int need, size_t elem, KvErr *err);

#endif

/* tokenizer.h — byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM2, StarCoder pre-tokenizers) and
 * SentencePiece-style BPE with byte fallback (Llama-2 / Mistral), loaded from a Hugging Face tokenizer.json
 * (+ tokenizer_config.json) or from a GGUF file's metadata.
 *
 * Encoding never adds BOS/EOS by itself: callers render prompts (engine/chat.h) with the special tokens as
 * text, and encode with parse_special=1 so "<|begin_of_text|>" inside the text becomes its id, as Hugging Face
 * does by default. Spec: docs/spec/models.md §3. */
#ifndef KVBENCH_TOKENIZER_H
#define KVBENCH_TOKENIZER_H

#include <stddef.h>

#include "err.h"

struct GgufFile;
typedef struct Tokenizer Tokenizer;

/* A growable id list; free with ids_free. */
typedef struct {
    int *ids;
    int n, cap;
} TokenIds;

int ids_push(TokenIds *v, int id, KvErr *err);
void ids_free(TokenIds *v);

/* path: a tokenizer.json, a directory holding one (or a SentencePiece tokenizer.model*), a tokenizer.model*
 * file, or a .gguf file. tokenizer_config.json next to a tokenizer.json is read when present (bos/eos). */
int tokenizer_load(Tokenizer **out, const char *path, KvErr *err);
int tokenizer_load_gguf(Tokenizer **out, const struct GgufFile *g, KvErr *err);
void tokenizer_free(Tokenizer *t);

/* Appends the ids of text[0..len) to out. Invalid UTF-8 is an error naming the byte offset.
 * parse_special: special/added token strings in the text map to their ids. */
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int parse_special, TokenIds *out,
                     KvErr *err);

/* tokenizer_decode's flags: 0 is transformers' tokenizer.decode(ids) with the tokenizer's defaults. */
enum {
    TOK_DECODE_SKIP_SPECIAL = 1, /* drop control tokens: skip_special_tokens=True */
    TOK_DECODE_RAW = 2           /* no clean-up even where the tokenizer has it: clean_up_tokenization_spaces=False */
};
/* Decodes ids into a malloc'd NUL-terminated string, as transformers' tokenizer.decode does: where it sets
 * clean_up_tokenization_spaces for this tokenizer (tokenizer_clean_up_spaces), the text ends with its clean-up
 * (" ." -> ".", " n't" -> "n't", ...). Returns NULL with err set on an id out of range. */
char *tokenizer_decode(const Tokenizer *t, const int *ids, int n, int flags, KvErr *err);
/* 1 when decode applies the clean-up: tokenizer_config.json's clean_up_tokenization_spaces for a tokenizer.json
 * (absent: 0, the default of the Llama, Qwen2 and GPT-2 classes); for a GGUF what transformers 4.57.0 sets when it
 * converts one: 1 for a byte-level vocabulary of a llama-architecture file (Llama-3, SmolLM2), 0 for SentencePiece
 * (Llama-2, Mistral) and every other architecture (Qwen2, ...); 0 for a SentencePiece tokenizer.model (the default
 * of transformers' Llama classes). */
int tokenizer_clean_up_spaces(const Tokenizer *t);

int tokenizer_vocab_size(const Tokenizer *t);
/* Id of an exact token string (special or normal), or -1. */
int tokenizer_token_id(const Tokenizer *t, const char *token);
int tokenizer_bos_id(const Tokenizer *t);  /* -1 if none */
int tokenizer_eos_id(const Tokenizer *t);  /* -1 if none */
int tokenizer_is_special(const Tokenizer *t, int id);

#endif

/* chat.h — chat formats of the supported families, for one user message with the generation prompt, and
 * the context | question split of the DefensiveKV harness (spec policies.md §4.3): the rendering of
 * `context + sep` is cut at sep, the first part is the context text (system block, user header, context),
 * the second the question suffix that follows the question (end of turn, assistant header).
 * Exact renderings: docs/spec/models.md §3.5. */
#ifndef KVBENCH_CHAT_H
#define KVBENCH_CHAT_H

#include "err.h"
#include "model.h"

typedef struct {
    char *context_text;    /* prefix (system block, user header, BOS where the template has one) + context */
    char *question_text;   /* question + question suffix (+ answer_prefix) */
} ChatSplit;

/* Parses "llama3", "mistral", "qwen2", "smollm2", "none". */
int chat_format_parse(const char *name, ChatFormat *out, KvErr *err);
const char *chat_format_name(ChatFormat f);

/* Full rendering of one user message with the generation prompt; malloc'd. */
char *chat_render(ChatFormat f, const char *user_message, KvErr *err);

/* The split used by runs: context part and question part, each to be tokenized separately with special
 * tokens parsed and no BOS added. With CHAT_NONE, context_text = bos_text + context (bos_text may be "")
 * and question_text = question + answer_prefix. */
int chat_split(ChatFormat f, const char *bos_text, const char *context, const char *question,
               const char *answer_prefix, ChatSplit *out, KvErr *err);
void chat_split_free(ChatSplit *s);

#endif

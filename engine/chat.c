/* chat.c — the chat formats of the supported families for one user message with the generation prompt,
 * and the DefensiveKV harness's context | question split (spec policies.md §4.3, models.md §3.5).
 *
 * Each family's template, reduced to the one-user-message case, is a fixed prefix and suffix around the
 * message; Llama-3.1's also trims the message (Jinja `trim`, i.e. Python str.strip). The split is done the
 * way the reference pipeline does it, not re-derived: render `context + sep` with sep = "\n" + "#" * len(context)
 * (len in code points), and cut the rendering at sep. That keeps its quirks: Llama-3.1 drops the context's
 * leading whitespace; a whitespace-only context is trimmed to its '#'s, whose "\n" then comes from the user
 * header, so the context part loses the header's last newline; and a rendering in which sep does not occur
 * exactly once (an empty context, whose sep is a bare "\n", in a template with newlines) is an error, as
 * Python's `context, suffix = rendered.split(sep)` raises there. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "unicode.h"

typedef struct {
    ChatFormat format;
    const char *name;
    const char *prefix;   /* everything before the user message */
    const char *suffix;   /* end of turn and the assistant header (the generation prompt) */
    int trim;             /* the template trims the message */
} ChatTemplate;

static const ChatTemplate TEMPLATES[] = {
    {CHAT_NONE, "none", "", "", 0},
    {CHAT_LLAMA3, "llama3",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
     "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", 1},
    {CHAT_MISTRAL, "mistral", "<s>[INST] ", "[/INST]", 0},
    {CHAT_QWEN2, "qwen2",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n",
     "<|im_end|>\n<|im_start|>assistant\n", 0},
    {CHAT_SMOLLM2, "smollm2",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\n",
     "<|im_end|>\n<|im_start|>assistant\n", 0},
};

static const ChatTemplate *template_of(ChatFormat f) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (TEMPLATES[i].format == f) return &TEMPLATES[i];
    return NULL;
}

int chat_format_parse(const char *name, ChatFormat *out, KvErr *err) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++) {
        if (strcmp(TEMPLATES[i].name, name) == 0) {
            *out = TEMPLATES[i].format;
            return 0;
        }
    }
    return kv_fail(err, "unknown chat format '%s' (llama3, mistral, qwen2, smollm2, none)", name);
}

const char *chat_format_name(ChatFormat f) {
    const ChatTemplate *t = template_of(f);
    return t ? t->name : "unknown";
}

/* Python str.strip() on valid UTF-8: the [*start, *end) byte range without leading/trailing whitespace. */
static void py_strip(const char *s, size_t len, size_t *start, size_t *end) {
    size_t a = 0, b = len;
    while (a < b) {
        size_t p = a;
        int32_t c = utf8_decode(s, len, &p);
        if (c < 0 || !unicode_is_py_space((uint32_t)c)) break;
        a = p;
    }
    while (b > a) {
        size_t q = b - 1;
        while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
        size_t p = q;
        int32_t c = utf8_decode(s, len, &p);
        if (c < 0 || !unicode_is_py_space((uint32_t)c)) break;
        b = q;
    }
    *start = a;
    *end = b;
}

/* a + b + c (byte ranges) as a malloc'd NUL-terminated string. */
static char *concat(KvErr *err, const char *a, size_t alen, const char *b, size_t blen, const char *c,
                    size_t clen) {
    char *s = kv_malloc(alen + blen + clen + 1, err);
    if (!s) return NULL;
    memcpy(s, a, alen);
    memcpy(s + alen, b, blen);
    memcpy(s + alen + blen, c, clen);
    s[alen + blen + clen] = '\0';
    return s;
}

static char *render_n(const ChatTemplate *t, const char *msg, size_t len, KvErr *err) {
    size_t a = 0, b = len;
    if (t->trim) py_strip(msg, len, &a, &b);
    return concat(err, t->prefix, strlen(t->prefix), msg + a, b - a, t->suffix, strlen(t->suffix));
}

char *chat_render(ChatFormat f, const char *user_message, KvErr *err) {
    const ChatTemplate *t = template_of(f);
    if (!t) {
        kv_fail(err, "chat_render: unknown chat format %d", (int)f);
        return NULL;
    }
    size_t len = strlen(user_message);
    size_t bad = utf8_first_invalid(user_message, len);
    if (bad < len) {
        kv_fail(err, "chat_render: invalid UTF-8 in the message at byte offset %zu", bad);
        return NULL;
    }
    return render_n(t, user_message, len, err);
}

void chat_split_free(ChatSplit *s) {
    free(s->context_text);
    free(s->question_text);
    s->context_text = s->question_text = NULL;
}

int chat_split(ChatFormat f, const char *bos_text, const char *context, const char *question,
               const char *answer_prefix, ChatSplit *out, KvErr *err) {
    out->context_text = out->question_text = NULL;
    const ChatTemplate *t = template_of(f);
    if (!t) return kv_fail(err, "chat_split: unknown chat format %d", (int)f);
    if (!answer_prefix) answer_prefix = "";
    size_t clen = strlen(context), qlen = strlen(question), alen = strlen(answer_prefix);
    size_t bad = utf8_first_invalid(context, clen);
    if (bad < clen) return kv_fail(err, "chat_split: invalid UTF-8 in the context at byte offset %zu", bad);
    if (f == CHAT_NONE) {
        const char *bos = bos_text ? bos_text : "";
        out->context_text = concat(err, bos, strlen(bos), context, clen, "", 0);
        out->question_text = concat(err, question, qlen, answer_prefix, alen, "", 0);
        if (!out->context_text || !out->question_text) {
            chat_split_free(out);
            return -1;
        }
        return 0;
    }
    size_t hashes = utf8_count(context, clen), sep_len = hashes + 1;
    char *msg = kv_malloc(clen + sep_len + 1, err);
    if (!msg) return -1;
    memcpy(msg, context, clen);
    char *sep = msg + clen;
    sep[0] = '\n';
    memset(sep + 1, '#', hashes);
    sep[sep_len] = '\0';
    char *rendered = render_n(t, msg, clen + sep_len, err);
    if (!rendered) {
        free(msg);
        return -1;
    }
    char *at = strstr(rendered, sep);
    int once = at && !strstr(at + sep_len, sep);
    if (!once) {
        free(msg);
        free(rendered);
        if (at)
            return kv_fail(err, "chat_split: an empty context's separator \"\\n\" occurs more than once in the %s "
                           "rendering, so the reference split fails", t->name);
        return kv_fail(err, "chat_split: the separator is missing from the %s rendering, so the reference split "
                       "fails", t->name);
    }
    const char *rest = at + sep_len;
    out->context_text = concat(err, rendered, (size_t)(at - rendered), "", 0, "", 0);
    char *qs = concat(err, question, qlen, rest, strlen(rest), answer_prefix, alen);
    out->question_text = qs;
    free(msg);
    free(rendered);
    if (!out->context_text || !out->question_text) {
        chat_split_free(out);
        return -1;
    }
    return 0;
}

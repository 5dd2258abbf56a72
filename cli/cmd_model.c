/* cmd_model.c — the engine's subcommands: `info` (a model's configuration), `tokenize` (text to ids and
 * back) and `generate` (greedy decoding of one prompt, raw or in the model's chat format).
 * Usage errors exit 2, failures 1, each with one line on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../engine/chat.h"
#include "../engine/generate.h"
#include "../engine/model.h"
#include "../engine/num.h"
#include "../engine/tokenizer.h"
#include "../runs/util.h"
#include "commands.h"

/* The value after option argv[*i], advancing *i; NULL (with a message) when it is missing. */
static const char *option_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvbench %s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int fail(const char *cmd, const KvErr *err) {
    fprintf(stderr, "kvbench %s: %s\n", cmd, err->msg);
    return 1;
}

int cmd_info(int argc, char **argv) {
    if (argc != 1) {
        fprintf(stderr, "usage: kvbench info MODEL   (a .gguf file, a Hugging Face directory or synthetic:SHAPE)\n");
        return 2;
    }
    KvErr err = {{0}};
    Model *m;
    if (model_load_config(&m, argv[0], &err)) return fail("info", &err);  /* no need for the weights */
    model_print_info(m, stdout);
    model_free(m);
    return 0;
}

/* Parses whitespace-separated token ids. */
static int parse_ids(const char *text, TokenIds *out, KvErr *err) {
    const char *p = text;
    while (*p) {
        char *end;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || id < 0 || id > 0x7fffffff || (*end && !strchr(" \t\r\n,", *end)))
            return kv_fail(err, "not a token id: '%.*s'", (int)strcspn(p, " \t\r\n,"), p);
        if (ids_push(out, (int)id, err)) return -1;
        p = end;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *tok_path = NULL, *text = NULL, *file = NULL;
    int decode = 0;
    for (int i = 0; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--model") ? &model : !strcmp(argv[i], "--tokenizer") ? &tok_path
                          : !strcmp(argv[i], "--text") ? &text : !strcmp(argv[i], "--file") ? &file : NULL;
        if (slot) {
            if (!(*slot = option_value("tokenize", argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--decode")) {
            decode = 1;
        } else {
            fprintf(stderr, "kvbench tokenize: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model == !tok_path || !text == !file) {
        fprintf(stderr, "usage: kvbench tokenize (--model M | --tokenizer PATH) (--text T | --file F) [--decode]\n");
        return 2;
    }
    KvErr err = {{0}};
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && !(owned = kv_read_file(file, &len, &err))) return fail("tokenize", &err);
    if (file) text = owned;
    /* a model path (.gguf or Hugging Face directory) holds its tokenizer: no need to load the weights */
    Tokenizer *t;
    if (tokenizer_load(&t, model ? model : tok_path, &err)) {
        free(owned);
        return fail("tokenize", &err);
    }
    TokenIds ids = {0};
    int rc = 0;
    if (decode) {
        char *out = NULL;
        if (parse_ids(text, &ids, &err) || !(out = tokenizer_decode(t, ids.ids, ids.n, 0, &err))) {
            rc = fail("tokenize", &err);
        } else {
            fputs(out, stdout);
            fputc('\n', stdout);
        }
        free(out);
    } else if (tokenizer_encode(t, text, len, 1, &ids, &err)) {
        rc = fail("tokenize", &err);
    } else {
        for (int i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        fputc('\n', stdout);
    }
    ids_free(&ids);
    tokenizer_free(t);
    free(owned);
    return rc;
}

/* Prompt ids: the chat rendering (special tokens parsed, no automatic BOS) or the raw text after BOS when
 * the model's tokenizer adds one. */
static int prompt_ids(const Model *m, const char *prompt, int chat, TokenIds *ids, KvErr *err) {
    if (!m->tokenizer) return kv_fail(err, "%s has no tokenizer (a synthetic model?)", m->source);
    if (chat) {
        if (m->cfg.chat == CHAT_NONE) return kv_fail(err, "%s has no chat format; drop --chat", m->source);
        char *text = chat_render(m->cfg.chat, prompt, err);
        if (!text) return -1;
        int rc = tokenizer_encode(m->tokenizer, text, strlen(text), 1, ids, err);
        free(text);
        return rc;
    }
    if (m->cfg.add_bos && m->cfg.bos_id >= 0 && ids_push(ids, m->cfg.bos_id, err)) return -1;
    return tokenizer_encode(m->tokenizer, prompt, strlen(prompt), 1, ids, err);
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *backend = "cpu", *max_text = "256";
    const char *backend_flags[BACKEND_N_OPTIONS] = {NULL};
    int chat = 0;
    for (int i = 0, key; i < argc; i++) {
        key = util_backend_flag(argv[i]);
        const char **slot = key >= 0 ? &backend_flags[key] : !strcmp(argv[i], "--model") ? &model
                          : !strcmp(argv[i], "--prompt") ? &prompt : !strcmp(argv[i], "--backend") ? &backend
                          : !strcmp(argv[i], "--max-new") ? &max_text : NULL;
        if (slot) {
            if (!(*slot = option_value("generate", argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--chat")) {
            chat = 1;
        } else {
            fprintf(stderr, "kvbench generate: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model || !prompt) {
        fprintf(stderr, "usage: kvbench generate --model M --prompt T [--chat] [--max-new N] [--backend cpu|cuda]\n"
                        "         " UTIL_BACKEND_FLAGS_USAGE "\n");
        return 2;
    }
    KvErr err = {{0}};
    if (util_backend_flags_check(backend_flags, &err)) {
        fprintf(stderr, "kvbench generate: %s\n", err.msg);
        return 2;
    }
    long long max_new = 0;
    NumCheck r = num_parse_integer(max_text, 1, 1000000, &max_new);
    if (r) {
        fprintf(stderr, "kvbench generate: --max-new %s (got '%s')\n",
                r == NUM_OUT_OF_RANGE ? "is out of range [1, 1000000]" : "must be a positive integer", max_text);
        return 2;
    }
    Model *m = NULL;
    Backend *be = NULL;
    KvCache *cache = NULL;
    TokenIds ids = {0}, out = {0};
    char *text = NULL;
    int rc = 1;
    if (backend_load_model(&m, backend, model, &err) || prompt_ids(m, prompt, chat, &ids, &err)) goto done;
    if (ids.n == 0) {
        kv_fail(&err, "the prompt is empty after tokenization");
        goto done;
    }
    if (m->cfg.max_context > 0 && ids.n + max_new > m->cfg.max_context) {
        kv_fail(&err, "%d prompt tokens + %lld new exceed the model's context of %d", ids.n, max_new, m->cfg.max_context);
        goto done;
    }
    BackendOptions bo;
    if (util_backend_options(&bo, backend_flags, NULL, NULL, &err) || backend_open(&be, backend, m, &bo, &err) ||
        be->cache_new(be, &cache, ids.n + (int)max_new, &err))
        goto done;
    GenerateOptions opt = {.max_new = (int)max_new, .stop_ids = m->cfg.eos_ids, .n_stop = m->cfg.n_eos};
    GenerateStats st;
    if (generate_greedy(be, &cache, 1, ids.ids, ids.n, &opt, &out, &st, &err)) goto done;
    if (!(text = tokenizer_decode(m->tokenizer, out.ids, out.n, TOK_DECODE_SKIP_SPECIAL, &err))) goto done;
    printf("%s\n", text);
    fprintf(stderr, "kvbench generate: %s backend, %d prompt tokens in %.0f ms, %ld tokens at %.1f tokens/s\n",
            be->name, ids.n, st.feed_ms, st.decode_tokens,
            st.decode_ms > 0 ? st.decode_tokens / (st.decode_ms / 1e3) : 0.0);
    rc = 0;
done:
    if (rc) fail("generate", &err);
    free(text);
    ids_free(&out);
    ids_free(&ids);
    if (be) be->cache_free(be, cache);
    backend_close(be);
    model_free(m);
    return rc;
}

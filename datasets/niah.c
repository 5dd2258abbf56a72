/* niah.c — Needle-in-a-Haystack as the KV-eviction papers run it (PyramidKV's form of gkamradt's pressure test,
 * spec datasets.md §3): a grid of context lengths × needle depths over the 49 Paul Graham essays shipped in
 * assets/niah/ (sorted file-name order, repeated as needed).
 *
 * A cell keeps the longest word prefix of the haystack that fits length − 200 − needle tokens (bisection with
 * the caller's token counter, instead of cutting a token list), then inserts the needle at depth d% of that
 * text, moved back to just after a sentence's period (the reference moves back to a period token); 100%
 * appends it. The prompt is PyramidKV's plain string, fed without a chat template and with BOS. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ds_internal.h"

#define NEEDLE "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
/* The reference words E of the heat-map score (spec §3): what the model should continue the retrieval text with. */
#define NEEDLE_ANSWER "eat a sandwich and sit in Dolores Park on a sunny day."
#define RETRIEVAL_QUESTION "The best thing to do in San Francisco is: "
#define CONTEXT_HEAD "<|im_start|> This is a very long story book: <book> "
#define CONTEXT_TAIL " </book>.\n"
#define QUESTION_TEXT " Based on the content of the book, Question: " RETRIEVAL_QUESTION "\nAnswer:"
#define PROMPT_BUFFER 200 /* tokens kept free for the prompt around the context and the answer */
#define MAX_NEW_TOKENS 30
#define DEFAULT_LENGTH 4096

static const double DEFAULT_DEPTHS[] = {0, 11, 22, 33, 44, 56, 67, 78, 89, 100}; /* round(linspace(0, 100, 10)) */

typedef struct {
    DatasetOptions opt;
    char *hay;     /* the essays, repeated until long enough */
    int *word_end; /* word i of hay ends at byte word_end[i] */
    int n_words;
    double *depths;
    int *lengths;
    int n_depths, n_lengths;
    int *rows, n_rows;
    int needle_tokens;
    uint64_t essays_hash; /* the essays once, in the order they are read */
    int size_hint;
    char *scratch;
} NiahState;

static int niah_task_known(const char *task) { return !strcmp(task, "needle"); }

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The essays in sorted file-name order, repeated until they hold at least min_words words. */
static int load_haystack(NiahState *st, const char *assets, int min_words, KvErr *err) {
    char dir_path[4096];
    snprintf(dir_path, sizeof dir_path, "%s/niah", assets);
    DIR *dir = opendir(dir_path);
    if (!dir) return kv_fail(err, "%s: cannot open the essay directory", dir_path);
    char **names = NULL;
    int n = 0, cap = 0, rc = -1;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".txt") != 0) continue;
        if (n == cap) {
            char **g = realloc(names, (size_t)(cap = cap ? cap * 2 : 64) * sizeof *g);
            if (!g) break;
            names = g;
        }
        if (!(names[n] = ds_strdup(e->d_name, err))) break;
        n++;
    }
    closedir(dir);
    if (n == 0) {
        ds_strv_free(names, n);
        return kv_fail(err, "%s: no essays (*.txt)", dir_path);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    StrBuf one = {0};
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_path, names[i]);
        char *text = kv_read_file(path, NULL, err);
        if (!text) {
            sb_free(&one);
            ds_strv_free(names, n);
            return -1;
        }
        size_t bad;
        if (!ds_utf8_valid(text, strlen(text), &bad)) {
            free(text);
            sb_free(&one);
            ds_strv_free(names, n);
            return kv_fail(err, "%s: invalid UTF-8 at byte %zu", path, bad);
        }
        sb_adds(&one, text);
        free(text);
    }
    ds_strv_free(names, n);
    char *essays = sb_finish(&one, err);
    if (!essays) return -1;
    st->essays_hash = ds_hash_str(DS_HASH_INIT, essays);
    int words_once = 0;
    dataset_count_words(NULL, essays, &words_once, NULL);
    if (words_once == 0) {
        free(essays);
        return kv_fail(err, "%s: the essays hold no words", dir_path);
    }
    StrBuf hay = {0};
    for (int copies = 0; copies == 0 || copies * words_once < min_words; copies++) sb_adds(&hay, essays);
    free(essays);
    if (!(st->hay = sb_finish(&hay, err))) return -1;
    size_t len = strlen(st->hay);
    if ((st->word_end = kv_malloc((len / 2 + 2) * sizeof *st->word_end, err))) {
        int in_word = 0;
        for (size_t i = 0; i <= len; i++) {
            char c = st->hay[i];
            int space = c == '\0' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
            if (space && in_word) st->word_end[st->n_words++] = (int)i;
            in_word = !space;
        }
        rc = 0;
    }
    return rc;
}

/* Tokens of the first `words` haystack words. */
static int prefix_probe(void *ctx, int words, int *n_tokens, KvErr *err) {
    NiahState *st = ctx;
    size_t len = (size_t)st->word_end[words - 1];
    memcpy(st->scratch, st->hay, len);
    st->scratch[len] = '\0';
    return ds_count_tokens(&st->opt, st->scratch, n_tokens, err);
}

static void niah_close(void *state) {
    NiahState *st = state;
    if (!st) return;
    free(st->hay);
    free(st->word_end);
    free(st->depths);
    free(st->lengths);
    free(st->rows);
    free(st->scratch);
    free(st);
}

static int niah_open(void **state, const char *task, const DatasetOptions *opt, KvErr *err) {
    (void)task;
    NiahState *st = kv_calloc(1, sizeof *st, err);
    if (!st) return -1;
    st->opt = *opt;
    int default_length = opt->target_tokens > 0 ? opt->target_tokens : DEFAULT_LENGTH;
    st->n_lengths = opt->lengths && opt->n_lengths > 0 ? opt->n_lengths : 1;
    st->n_depths = opt->depths && opt->n_depths > 0 ? opt->n_depths : (int)(sizeof DEFAULT_DEPTHS / sizeof *DEFAULT_DEPTHS);
    int max_len = 0;
    if (!opt->count_tokens) {
        kv_fail(err, "the needle test needs a token counter to fit its context lengths");
        goto fail;
    }
    if (!(st->lengths = kv_malloc((size_t)st->n_lengths * sizeof *st->lengths, err)) ||
        !(st->depths = kv_malloc((size_t)st->n_depths * sizeof *st->depths, err)))
        goto fail;
    for (int i = 0; i < st->n_lengths; i++) {
        st->lengths[i] = opt->lengths && opt->n_lengths > 0 ? opt->lengths[i] : default_length;
        if (st->lengths[i] > max_len) max_len = st->lengths[i];
    }
    for (int i = 0; i < st->n_depths; i++) {
        st->depths[i] = opt->depths && opt->n_depths > 0 ? opt->depths[i] : DEFAULT_DEPTHS[i];
        if (!(st->depths[i] >= 0 && st->depths[i] <= 100)) {
            kv_fail(err, "needle depth %g%% is outside [0, 100]", st->depths[i]);
            goto fail;
        }
    }
    if (ds_count_tokens(opt, NEEDLE, &st->needle_tokens, err) != 0) goto fail;
    for (int i = 0; i < st->n_lengths; i++)
        if (st->lengths[i] - PROMPT_BUFFER - st->needle_tokens < 1) {
            kv_fail(err, "context length %d is too short: %d tokens go to the prompt buffer and %d to the needle",
                    st->lengths[i], PROMPT_BUFFER, st->needle_tokens);
            goto fail;
        }
    /* a token holds at most a few words' worth of text in any tokenizer, so max_len words always suffice */
    if (load_haystack(st, ds_assets_dir(opt), max_len + 1, err) != 0 ||
        !(st->scratch = kv_malloc(strlen(st->hay) + 1, err)) ||
        ds_subset_rows(st->n_lengths * st->n_depths, opt, &st->rows, &st->n_rows, err) != 0)
        goto fail;
    *state = st;
    return 0;
fail:
    niah_close(st);
    return -1;
}

static void niah_sample_id(const void *state, int index, char *out, size_t size) {
    const NiahState *st = state;
    int cell = st->rows[index];
    snprintf(out, size, "niah:needle:L%d:d%g", st->lengths[cell / st->n_depths], st->depths[cell % st->n_depths]);
}

static void niah_identity(const void *state, char *out, size_t size) {
    snprintf(out, size, "haystack=%016llx", (unsigned long long)((const NiahState *)state)->essays_hash);
}

static int niah_count(const void *state) { return ((const NiahState *)state)->n_rows; }
static int niah_skipped(const void *state) { (void)state; return 0; }

static int niah_get(void *state, int index, Sample *s, KvErr *err) {
    NiahState *st = state;
    int cell = st->rows[index];
    int length = st->lengths[cell / st->n_depths];
    double depth = st->depths[cell % st->n_depths];
    int words;
    if (ds_fit_size(prefix_probe, st, 1, 1, st->n_words, length - PROMPT_BUFFER - st->needle_tokens, st->size_hint,
                    &words, "haystack", err) != 0)
        return -1;
    st->size_hint = words;
    size_t len = (size_t)st->word_end[words - 1], at = len;
    if (depth < 100) {
        at = (size_t)((double)len * depth / 100.0);
        while (at > 0 && st->hay[at - 1] != '.') at--;
    }
    StrBuf ctx = {0};
    sb_adds(&ctx, CONTEXT_HEAD);
    sb_add(&ctx, st->hay, at);
    sb_adds(&ctx, NEEDLE);
    sb_add(&ctx, st->hay + at, len - at);
    sb_adds(&ctx, CONTEXT_TAIL);
    const char *answer = NEEDLE_ANSWER;
    if (!(s->context = sb_finish(&ctx, err)) || !(s->suite = ds_strdup("niah", err)) ||
        !(s->task = ds_strdup("needle", err)) || !(s->question = ds_strdup(QUESTION_TEXT, err)) ||
        !(s->answer_prefix = ds_strdup("", err)) || ds_strv_dup(&s->answers, &answer, 1, err) != 0 ||
        !(s->metric = ds_strdup("needle", err)) || !(s->domain = ds_strdup("needle", err)) ||
        !(s->stop_on_newline = ds_strdup("\n", err))) {
        sb_free(&ctx);
        return -1;
    }
    s->n_answers = 1;
    s->index = index;
    s->max_new_tokens = MAX_NEW_TOKENS;
    s->use_chat = 0; /* PyramidKV's plain prompt, tokenized with the tokenizer's BOS */
    s->add_bos = 1;
    s->depth_percent = depth;
    s->target_tokens = length;
    return 0;
}

static void niah_print_list(FILE *f) {
    fprintf(f, "%-34s %-18s %-20s %d  (lengths x depths grid; default depths 0,11,...,100)\n", "niah:needle", "needle",
            "needle", MAX_NEW_TOKENS);
}

const SuiteOps NIAH_SUITE = {"niah", niah_open, niah_count, niah_get, niah_sample_id, niah_identity, niah_skipped,
                             niah_close, niah_task_known, niah_print_list};

/* ruler.c — a deterministic, seeded generator of RULER's 13 synthetic tasks at a target length (spec
 * datasets.md §2), then kvpress's context | question | answer-prefix split (§2.5).
 *
 * Inputs are the files RULER itself reads (assets/ruler/: the essay haystack, the wonderwords lists, the
 * templates and task configuration of the late-2024 RULER the DefensiveKV data was made with). The shape of
 * each task follows that RULER: templates, needle and document formats, the singular edits, insertion rules,
 * and the haystack sizes it could reach (multiples of its search step: 500 essay words, 25 lines, 10 words,
 * 10 documents), the largest that fits target − tokens_to_generate, found by bisection with the caller's
 * token counter. Randomness is ours (rng.c), seeded per (seed, task, row), so the values differ from RULER's
 * files while the distribution and structure match; where RULER reseeds with 42 (needle order, list
 * shuffles) a fixed stream is used, keeping RULER's "same permutation for the same length" property.
 * qa_1 / qa_2 need SQuAD / HotpotQA, which are not shipped: they read data_path, and without it a clearly
 * labelled substitute (essay passages with one templated fact) runs under the task name "qa_N_substitute". */
#include <cjson/cJSON.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/jsonfile.h"
#include "ds_internal.h"

typedef enum { FAM_NIAH, FAM_VT, FAM_CWE, FAM_FWE, FAM_QA } Family;
typedef enum { HAY_ESSAY, HAY_NOISE, HAY_NEEDLE } Haystack;
typedef enum { VAL_WORDS, VAL_NUMBERS, VAL_UUIDS } ValueType;

typedef struct {
    const char *name;
    Family family;
    Haystack haystack;
    ValueType key_type, value_type;
    int n_keys, n_values, n_queries;
} RulerTask;

/* The task configuration of RULER's synthetic.yaml (2024-12), also in assets/ruler/ruler_task_templates.json. */
static const RulerTask RULER_TASKS[] = {
    {"niah_single_1", FAM_NIAH, HAY_NOISE, VAL_WORDS, VAL_NUMBERS, 1, 1, 1},
    {"niah_single_2", FAM_NIAH, HAY_ESSAY, VAL_WORDS, VAL_NUMBERS, 1, 1, 1},
    {"niah_single_3", FAM_NIAH, HAY_ESSAY, VAL_WORDS, VAL_UUIDS, 1, 1, 1},
    {"niah_multikey_1", FAM_NIAH, HAY_ESSAY, VAL_WORDS, VAL_NUMBERS, 4, 1, 1},
    {"niah_multikey_2", FAM_NIAH, HAY_NEEDLE, VAL_WORDS, VAL_NUMBERS, 1, 1, 1},
    {"niah_multikey_3", FAM_NIAH, HAY_NEEDLE, VAL_UUIDS, VAL_UUIDS, 1, 1, 1},
    {"niah_multivalue", FAM_NIAH, HAY_ESSAY, VAL_WORDS, VAL_NUMBERS, 1, 4, 1},
    {"niah_multiquery", FAM_NIAH, HAY_ESSAY, VAL_WORDS, VAL_NUMBERS, 4, 1, 4},
    {"vt", FAM_VT, HAY_NOISE, 0, 0, 0, 0, 0},
    {"cwe", FAM_CWE, 0, 0, 0, 0, 0, 0},
    {"fwe", FAM_FWE, 0, 0, 0, 0, 0, 0},
    {"qa_1", FAM_QA, 0, 0, 0, 0, 0, 0},
    {"qa_2", FAM_QA, 0, 0, 0, 0, 0, 0},
};
#define N_RULER_TASKS (int)(sizeof RULER_TASKS / sizeof RULER_TASKS[0])

/* Per family: key in the templates JSON and the split patterns, domain, metric, RULER's search step. */
static const struct {
    const char *template_key, *split_key, *domain, *metric;
} FAMILY[] = {
    [FAM_NIAH] = {"niah", "niah", "retrieval (niah)", "string_match_all"},
    [FAM_VT] = {"variable_tracking", "vt", "multi-hop tracing", "string_match_all"},
    [FAM_CWE] = {"common_words_extraction", "cwe", "aggregation", "string_match_all"},
    [FAM_FWE] = {"freq_words_extraction", "fwe", "aggregation", "string_match_all"},
    [FAM_QA] = {"qa", "qa", "question answering", "string_match_part"},
};

#define DEFAULT_TARGET 4096
#define DEFAULT_SAMPLES 500
#define ESSAY_STEP 500  /* words */
#define LINE_STEP 25    /* noise / needle lines */
#define CWE_STEP 10     /* words */
#define VT_STEP 10      /* noise copies */
#define VT_ICL_STEP 5
#define VT_ICL_TOKENS 500
#define QA_STEP 10      /* documents */
#define QA_DOC_WORDS 80 /* substitute documents: passages of this many essay words */
#define FIXED_STREAM 42 /* where RULER reseeds with 42 */

typedef struct {
    char **v;
    int n;
} WordList;

typedef struct {
    const RulerTask *task;
    DatasetOptions opt;
    int target, budget, tokens_to_generate;
    char *prompt_template, *answer_prefix, *noise, *needle_format, *doc_format;
    regex_t question_re, answer_re;
    int have_re;
    char *essay;      /* whitespace runs collapsed to one space */
    int *word_end;    /* essay word i ends at byte word_end[i] */
    int n_words;
    WordList adjectives, nouns, verbs;
    char **cwe_vocab; /* all three lists, de-duplicated, sorted, then shuffled once (points into them) */
    int n_cwe_vocab;
    int *rows, n_rows;
    struct QaData *qa;       /* qa_1 / qa_2 from data_path; NULL runs the substitute */
    int size_hint, icl_hint; /* the previous sample's sizes: the next search starts there */
    const char *task_label;  /* task name in samples ("qa_1_substitute" when the substitute runs) */
    uint64_t assets_hash;    /* the asset files this task reads */
    uint64_t qa_hash;        /* the QA source file's bytes (0: the substitute) */
    const char *note;
} RulerState;

/* What one sample build produces. */
typedef struct {
    RulerState *st;
    int row;
    char *input;
    char **answers;
    int n_answers;
    int icl_size; /* vt: noise copies of the in-context example */
} Gen;

static const RulerTask *ruler_find(const char *task) {
    for (int i = 0; i < N_RULER_TASKS; i++)
        if (!strcmp(RULER_TASKS[i].name, task)) return &RULER_TASKS[i];
    return NULL;
}

static int ruler_task_known(const char *task) { return ruler_find(task) != NULL; }

/* ---------------------------------------------------------------- assets */

static int load_word_list(WordList *w, const char *assets, const char *rel, KvErr *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", assets, rel);
    size_t len;
    char *text = kv_read_file(path, &len, err);
    if (!text) return -1;
    int cap = 1024;
    w->v = kv_malloc((size_t)cap * sizeof *w->v, err);
    for (char *line = text; w->v && line < text + len;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
        if (n > 0) {
            if (w->n == cap) {
                char **v = realloc(w->v, (size_t)(cap *= 2) * sizeof *v);
                if (!v) break;
                w->v = v;
            }
            if (!(w->v[w->n] = ds_strndup(line, n, err))) break;
            w->n++;
        }
        line = nl ? nl + 1 : text + len;
    }
    free(text);
    if (!w->v || w->n == 0) return kv_fail(err, "%s: no words (or out of memory)", path);
    return 0;
}

static int load_essay(RulerState *st, const char *assets, KvErr *err) {
    cJSON *j = ds_load_json(assets, "ruler/PaulGrahamEssays.json", err);
    if (!j) return -1;
    const char *text = ds_json_str(j, "text", "ruler/PaulGrahamEssays.json", err);
    int rc = -1;
    size_t len = text ? strlen(text) : 0;
    if (text && (st->essay = kv_malloc(len + 1, err)) && (st->word_end = kv_malloc((len / 2 + 1) * sizeof(int), err))) {
        size_t o = 0;
        int in_word = 0;
        for (size_t i = 0; i < len; i++) {
            char c = text[i];
            int space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
            if (space && in_word) {
                st->word_end[st->n_words++] = (int)o;
                in_word = 0;
            } else if (!space) {
                if (!in_word && o > 0) st->essay[o++] = ' ';
                st->essay[o++] = c;
                in_word = 1;
            }
        }
        if (in_word) st->word_end[st->n_words++] = (int)o;
        st->essay[o] = '\0';
        rc = st->n_words > 0 ? 0 : kv_fail(err, "ruler/PaulGrahamEssays.json: empty essay text");
    }
    cJSON_Delete(j);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int build_cwe_vocab(RulerState *st, KvErr *err) {
    int n = st->nouns.n + st->adjectives.n + st->verbs.n;
    char **v = kv_malloc((size_t)n * sizeof *v, err);
    if (!v) return -1;
    const WordList *lists[] = {&st->nouns, &st->adjectives, &st->verbs};
    int k = 0;
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < lists[l]->n; i++) v[k++] = lists[l]->v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0) v[u++] = v[i];
    int *perm = kv_malloc((size_t)u * sizeof *perm, err);
    if (!perm) return free(v), -1;
    for (int i = 0; i < u; i++) perm[i] = i;
    Rng r;
    rng_seed(&r, FIXED_STREAM, "cwe-vocabulary", 0);
    rng_shuffle(&r, perm, u);
    st->cwe_vocab = kv_malloc((size_t)u * sizeof *st->cwe_vocab, err);
    if (st->cwe_vocab)
        for (int i = 0; i < u; i++) st->cwe_vocab[i] = v[perm[i]];
    st->n_cwe_vocab = u;
    free(perm);
    free(v);
    return st->cwe_vocab ? 0 : -1;
}

/* kvpress's patterns are Python regexes; the only construct outside POSIX ERE in them is "(?:". */
static int compile_pattern(regex_t *re, const char *pattern, KvErr *err) {
    StrBuf b = {0};
    for (const char *p = pattern; *p; p++) {
        if (!strncmp(p, "(?:", 3)) {
            sb_adds(&b, "(");
            p += 2;
        } else {
            sb_add(&b, p, 1);
        }
    }
    char *ere = sb_finish(&b, err);
    if (!ere) return -1;
    int rc = regcomp(re, ere, REG_EXTENDED);
    free(ere);
    return rc == 0 ? 0 : kv_fail(err, "ruler_task_templates.json: cannot compile split pattern '%s'", pattern);
}

static int load_templates(RulerState *st, const char *assets, KvErr *err) {
    const char *where = "ruler/ruler_task_templates.json";
    cJSON *j = ds_load_json(assets, "ruler/ruler_task_templates.json", err);
    if (!j) return -1;
    const char *fam = FAMILY[st->task->family].template_key, *split = FAMILY[st->task->family].split_key;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "templates_2024_12"), fam);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "kvpress_split_patterns");
    const cJSON *ttg = cJSON_GetObjectItemCaseSensitive(t, "tokens_to_generate");
    const char *tmpl = ds_json_str(t, "template", where, err), *prefix = tmpl ? ds_json_str(t, "answer_prefix", where, err) : NULL;
    const char *noise = prefix ? ds_json_str(j, "noise_haystack_sentence", where, err) : NULL;
    const char *needle = noise ? ds_json_str(j, "niah_needle_format", where, err) : NULL;
    const char *doc = needle ? ds_json_str(j, "qa_document_format", where, err) : NULL;
    const char *qpat = doc ? ds_json_str(cJSON_GetObjectItemCaseSensitive(pat, "question"), split, where, err) : NULL;
    const char *apat = qpat ? ds_json_str(cJSON_GetObjectItemCaseSensitive(pat, "answer"), split, where, err) : NULL;
    int rc = -1;
    if (apat && !cJSON_IsNumber(ttg)) {
        kv_fail(err, "%s: no tokens_to_generate for %s", where, fam);
    } else if (apat && (st->prompt_template = ds_strdup(tmpl, err)) && (st->answer_prefix = ds_strdup(prefix, err)) &&
               (st->noise = ds_strdup(noise, err)) && (st->needle_format = ds_strdup(needle, err)) &&
               (st->doc_format = ds_strdup(doc, err)) && compile_pattern(&st->question_re, qpat, err) == 0) {
        if (compile_pattern(&st->answer_re, apat, err) == 0) {
            st->have_re = 1;
            st->tokens_to_generate = ttg->valueint;
            rc = 0;
        } else {
            regfree(&st->question_re);
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- random values */

static void draw_value(RulerState *st, Rng *r, ValueType type, StrBuf *out) {
    if (type == VAL_NUMBERS) {
        sb_addf(out, "%d", 1000000 + (int)rng_below(r, 9000000));
    } else if (type == VAL_WORDS) {
        sb_addf(out, "%s-%s", st->adjectives.v[rng_below(r, (uint64_t)st->adjectives.n)],
                st->nouns.v[rng_below(r, (uint64_t)st->nouns.n)]);
    } else {
        uint64_t hi = rng_next(r), lo = rng_next(r);
        hi = (hi & ~0xF000ull) | 0x4000ull;                   /* version 4 */
        lo = (lo & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull; /* variant 10xx */
        sb_addf(out, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(hi >> 32), (unsigned)((hi >> 16) & 0xFFFF),
                (unsigned)(hi & 0xFFFF), (unsigned)(lo >> 48), (unsigned long long)(lo & 0xFFFFFFFFFFFFull));
    }
}

static char *draw_value_str(RulerState *st, Rng *r, ValueType type, KvErr *err) {
    StrBuf b = {0};
    draw_value(st, r, type, &b);
    return sb_finish(&b, err);
}

static void draw_upper(Rng *r, int len, StrBuf *out) {
    for (int i = 0; i < len; i++) {
        char c = (char)('A' + rng_below(r, 26));
        sb_add(out, &c, 1);
    }
}

/* First k of a Fisher–Yates pass over idx[0..n): k distinct indices in O(n). */
static void partial_shuffle(Rng *r, int *idx, int n, int k) {
    for (int i = 0; i < k && i < n - 1; i++) {
        int j = i + (int)rng_below(r, (uint64_t)(n - i));
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

static void fixed_shuffle(int *a, int n, const char *what) {
    Rng r;
    rng_seed(&r, FIXED_STREAM, what, (uint64_t)n);
    rng_shuffle(&r, a, n);
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Replaces every occurrence of from by to. */
static char *replace_all(const char *s, const char *from, const char *to, KvErr *err) {
    StrBuf b = {0};
    size_t lf = strlen(from);
    for (const char *p = s; *p;) {
        if (!strncmp(p, from, lf)) {
            sb_adds(&b, to);
            p += lf;
        } else {
            sb_add(&b, p, 1);
            p++;
        }
    }
    return sb_finish(&b, err);
}

/* RULER's singular edits, applied in order by plain global replacement before formatting. */
static char *singular_form(const char *text, KvErr *err) {
    static const char *const EDITS[][2] = {{"Some", "A"}, {"are all", "is"}, {"are", "is"}, {"answers", "answer"}};
    char *out = ds_strdup(text, err);
    for (int e = 0; e < 4 && out; e++) {
        char *next = replace_all(out, EDITS[e][0], EDITS[e][1], err);
        free(out);
        out = next;
    }
    return out;
}

static void gen_clear(Gen *g) {
    free(g->input);
    ds_strv_free(g->answers, g->n_answers);
    g->input = NULL;
    g->answers = NULL;
    g->n_answers = 0;
}

/* Formats the family's template + answer prefix with the given fields into g->input. */
static int format_input(Gen *g, const char *tmpl, const char *prefix, int n, const char *const *names,
                        const char *const *values, KvErr *err) {
    char *a = ds_fill(tmpl, n, names, values, err);
    char *b = a ? ds_fill(prefix, n, names, values, err) : NULL;
    StrBuf out = {0};
    if (b) {
        sb_adds(&out, a);
        sb_adds(&out, b);
    }
    free(a);
    free(b);
    return b && (g->input = sb_finish(&out, err)) ? 0 : -1;
}

/* ---------------------------------------------------------------- niah */

/* Lines of a noise / needle haystack with the needles inserted as RULER does: distinct line indices,
 * the largest taking needle 1, the next needle 2, ... (each goes before the line at its index). */
static void niah_lines(RulerState *st, Rng *r, int n_lines, char **needles, int n_needles, StrBuf *out) {
    int pos[64];
    rng_distinct(r, n_lines, n_needles, pos);
    qsort(pos, (size_t)n_needles, sizeof *pos, cmp_int);
    const char *plural = st->task->value_type == VAL_UUIDS ? "uuids" : "numbers";
    for (int line = 0; line < n_lines; line++) {
        for (int k = 0; k < n_needles; k++)
            if (pos[k] == line) {
                sb_adds(out, needles[n_needles - 1 - k]);
                sb_adds(out, "\n");
            }
        if (st->task->haystack == HAY_NOISE) {
            sb_adds(out, st->noise);
        } else {
            /* a filler needle with fresh key and value of the task's types, plural type name */
            StrBuf key = {0}, value = {0};
            draw_value(st, r, st->task->key_type, &key);
            draw_value(st, r, st->task->value_type, &value);
            const char *names[] = {"type_needle_v", "key", "value"};
            const char *vals[] = {plural, key.s ? key.s : "", value.s ? value.s : ""};
            char *s = ds_fill(st->needle_format, 3, names, vals, NULL);
            if (s) sb_adds(out, s);
            else out->failed = 1;
            free(s);
            sb_free(&key);
            sb_free(&value);
        }
        if (line + 1 < n_lines) sb_adds(out, "\n");
    }
}

static int is_closer(char c) { return c == '"' || c == '\'' || c == ')' || c == ']'; }

/* The first n_words essay words split into sentences (end = . ! ? with optional closing quotes or brackets,
 * then a space; a stand-in for NLTK punkt), with the needles placed at sentence indices drawn from RULER's 40
 * depths; every piece joined by one space. */
static void niah_essay(RulerState *st, Rng *r, int n_words, char **needles, int n_needles, StrBuf *out) {
    static const int DEPTHS[40] = {0,  3,  5,  8,  10, 13, 15, 18, 21, 23, 26, 28, 31, 33, 36, 38, 41, 44, 46, 49,
                                   51, 54, 56, 59, 62, 64, 67, 69, 72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100};
    size_t len = (size_t)st->word_end[n_words - 1];
    const char *text = st->essay;
    int n_sent = 0, cap = 0;
    size_t *ends = NULL; /* sentence i spans [start_i, ends[i]); the next starts after one space */
    for (size_t i = 0; i < len; i++) {
        if (text[i] != '.' && text[i] != '!' && text[i] != '?') continue;
        size_t e = i + 1;
        while (e < len && is_closer(text[e])) e++;
        if (e < len && text[e] != ' ') continue;
        if (n_sent == cap) {
            size_t *g = realloc(ends, (size_t)(cap = cap ? cap * 2 : 256) * sizeof *g);
            if (!g) {
                out->failed = 1;
                free(ends);
                return;
            }
            ends = g;
        }
        ends[n_sent++] = e;
        i = e;
    }
    if (n_sent == 0 || ends[n_sent - 1] < len) {
        if (n_sent == cap) {
            size_t *g = realloc(ends, (size_t)(cap + 1) * sizeof *g);
            if (!g) {
                out->failed = 1;
                free(ends);
                return;
            }
            ends = g;
        }
        ends[n_sent++] = len;
    }
    int pick[40], at[40];
    rng_distinct(r, 40, n_needles, pick);
    for (int k = 0; k < n_needles; k++) at[k] = (int)((long long)n_sent * DEPTHS[pick[k]] / 100);
    qsort(at, (size_t)n_needles, sizeof *at, cmp_int);
    int first = 1, k = 0;
    size_t start = 0;
    for (int s = 0; s <= n_sent; s++) {
        for (; k < n_needles && at[k] == s; k++) {
            if (!first) sb_adds(out, " ");
            sb_adds(out, needles[k]);
            first = 0;
        }
        if (s == n_sent) break;
        if (!first) sb_adds(out, " ");
        sb_add(out, text + start, ends[s] - start);
        first = 0;
        start = ends[s] + 1;
    }
    free(ends);
}

static int build_niah(Gen *g, int size, KvErr *err) {
    RulerState *st = g->st;
    const RulerTask *t = st->task;
    Rng r;
    rng_seed(&r, st->opt.seed, t->name, (uint64_t)g->row);
    int n_keys = t->n_keys > t->n_queries ? t->n_keys : t->n_queries, n_needles = n_keys * t->n_values;
    char *keys[4] = {0}, *needles[16] = {0}, *values[16] = {0};
    const char *plural = t->value_type == VAL_NUMBERS ? "numbers" : t->value_type == VAL_UUIDS ? "uuids" : "words";
    int rc = -1;
    for (int i = 0; i < n_keys; i++) {
        int dup;
        do {
            free(keys[i]);
            if (!(keys[i] = draw_value_str(st, &r, t->key_type, err))) goto done;
            dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(keys[i], keys[j]);
        } while (dup);
        for (int v = 0; v < t->n_values; v++) {
            if (!(values[i * t->n_values + v] = draw_value_str(st, &r, t->value_type, err))) goto done;
            const char *names[] = {"type_needle_v", "key", "value"};
            const char *vals[] = {plural, keys[i], values[i * t->n_values + v]};
            if (!(needles[i * t->n_values + v] = ds_fill(st->needle_format, 3, names, vals, err))) goto done;
        }
    }
    int order[16];
    for (int i = 0; i < n_needles; i++) order[i] = i;
    fixed_shuffle(order, n_needles, "niah-needle-order");
    char *shuffled[16];
    for (int i = 0; i < n_needles; i++) shuffled[i] = needles[order[i]];
    int queries[4];
    rng_distinct(&r, n_keys, t->n_queries, queries);

    StrBuf hay = {0}, query = {0};
    if (t->haystack == HAY_ESSAY) niah_essay(st, &r, size, shuffled, n_needles, &hay);
    else niah_lines(st, &r, size, shuffled, n_needles, &hay);
    for (int q = 0; q < t->n_queries; q++) {
        if (q > 0) sb_adds(&query, q + 1 == t->n_queries ? ", and " : ", ");
        sb_adds(&query, keys[queries[q]]);
    }
    char *context = sb_finish(&hay, err), *query_s = context ? sb_finish(&query, err) : NULL;
    if (!context) sb_free(&query);
    if (query_s) {
        /* one needle asked for: RULER edits the template to the singular before formatting */
        int singular = t->n_queries * t->n_values == 1;
        char type_v[16];
        snprintf(type_v, sizeof type_v, "%.*s", (int)strlen(plural) - (singular ? 1 : 0), plural);
        char *tmpl = singular ? singular_form(st->prompt_template, err) : NULL;
        char *prefix = tmpl ? singular_form(st->answer_prefix, err) : NULL;
        const char *names[] = {"type_needle_v", "context", "query"};
        const char *vals[] = {type_v, context, query_s};
        if ((!singular || (tmpl && prefix)) &&
            format_input(g, singular ? tmpl : st->prompt_template, singular ? prefix : st->answer_prefix, 3, names, vals,
                         err) == 0) {
            const char *ans[16];
            g->n_answers = 0;
            for (int q = 0; q < t->n_queries; q++)
                for (int v = 0; v < t->n_values; v++) ans[g->n_answers++] = values[queries[q] * t->n_values + v];
            rc = ds_strv_dup(&g->answers, ans, g->n_answers, err);
            if (rc != 0) g->n_answers = 0;
        }
        free(tmpl);
        free(prefix);
    }
    free(context);
    free(query_s);
done:
    for (int i = 0; i < 4; i++) free(keys[i]);
    for (int i = 0; i < 16; i++) free(needles[i]), free(values[i]);
    return rc;
}

/* ---------------------------------------------------------------- vt */

/* One variable-tracking text with n_noise noise copies: the chain "VAR A = 12345", "VAR B = VAR A ", ...
 * inserted in order at sorted distinct positions, pieces joined by a space (RULER 2024). Names have name_len
 * upper-case letters; names[] receives them (5 = 1 + 4 hops). */
static void vt_text(RulerState *st, Rng *r, int n_noise, int name_len, char names[5][8], StrBuf *out, int *value) {
    for (int i = 0; i < 5; i++) {
        int dup;
        do {
            for (int c = 0; c < name_len; c++) names[i][c] = (char)('A' + rng_below(r, 26));
            names[i][name_len] = '\0';
            dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(names[i], names[j]);
        } while (dup);
    }
    *value = 10000 + (int)rng_below(r, 89999);
    int pos[5];
    rng_distinct(r, n_noise, 5, pos);
    qsort(pos, 5, sizeof *pos, cmp_int);
    StrBuf raw = {0};
    int hop = 0;
    for (int i = 0; i < n_noise; i++) {
        for (; hop < 5 && pos[hop] == i; hop++) {
            if (hop == 0) sb_addf(&raw, "VAR %s = %d ", names[0], *value);
            else sb_addf(&raw, "VAR %s = VAR %s  ", names[hop], names[hop - 1]);
        }
        sb_adds(&raw, st->noise);
        sb_adds(&raw, i + 1 < n_noise ? "\n " : "\n");
    }
    /* the join put a space after every piece; RULER then turns ". \n" into ".\n" */
    char *joined = raw.failed ? NULL : replace_all(raw.s ? raw.s : "", ". \n", ".\n", NULL);
    if (joined) sb_adds(out, joined);
    else out->failed = 1;
    free(joined);
    sb_free(&raw);
}

static int vt_format(Gen *g, const char *context, int value, KvErr *err) {
    char query[16];
    snprintf(query, sizeof query, "%d", value);
    const char *fields[] = {"context", "query", "num_v"};
    const char *vals[] = {context, query, "5"};
    return format_input(g, g->st->prompt_template, g->st->answer_prefix, 3, fields, vals, err);
}

/* The in-context example: a 3-letter-name chain, its answer appended, then every answer name replaced by a
 * fresh random name of the same length so the example cannot leak into the real answer. */
static int vt_example(Gen *g, int n_noise, char **out, KvErr *err) {
    Rng r;
    rng_seed(&r, g->st->opt.seed, "vt-example", (uint64_t)g->row);
    char names[5][8];
    int value;
    StrBuf ctx = {0};
    vt_text(g->st, &r, n_noise, 3, names, &ctx, &value);
    char *context = sb_finish(&ctx, err);
    Gen ex = {g->st, g->row, NULL, NULL, 0, 0};
    if (!context || vt_format(&ex, context, value, err) != 0) return free(context), -1;
    free(context);
    StrBuf b = {0};
    sb_adds(&b, ex.input);
    for (int i = 0; i < 5; i++) sb_addf(&b, " %s", names[i]);
    sb_adds(&b, "\n\n");
    free(ex.input);
    char *text = sb_finish(&b, err);
    for (int i = 0; text && i < 5; i++) {
        StrBuf fresh = {0};
        draw_upper(&r, (int)strlen(names[i]), &fresh);
        char *f = sb_finish(&fresh, err);
        char *t = f ? replace_all(text, names[i], f, err) : NULL;
        free(f);
        free(text);
        text = t;
    }
    *out = text;
    return text ? 0 : -1;
}

static int vt_example_probe(void *ctx, int size, int *n_tokens, KvErr *err) {
    Gen *g = ctx;
    char *text;
    if (vt_example(g, size, &text, err) != 0) return -1;
    int rc = ds_count_tokens(&g->st->opt, text, n_tokens, err);
    free(text);
    return rc;
}

static int build_vt(Gen *g, int size, KvErr *err) {
    RulerState *st = g->st;
    if (g->icl_size == 0 &&
        ds_fit_size(vt_example_probe, g, VT_ICL_STEP, VT_ICL_STEP, 1 << 20, VT_ICL_TOKENS, st->icl_hint,
                    &g->icl_size, "vt in-context example", err) != 0)
        return -1;
    st->icl_hint = g->icl_size;
    char *example;
    if (vt_example(g, g->icl_size, &example, err) != 0) return -1;
    Rng r;
    rng_seed(&r, st->opt.seed, "vt", (uint64_t)g->row);
    char names[5][8];
    int value;
    StrBuf ctx = {0};
    vt_text(st, &r, size, 5, names, &ctx, &value);
    char *context = sb_finish(&ctx, err);
    int rc = -1;
    if (context && vt_format(g, context, value, err) == 0) {
        StrBuf b = {0};
        sb_adds(&b, example);
        sb_adds(&b, g->input);
        free(g->input);
        const char *ans[5] = {names[0], names[1], names[2], names[3], names[4]};
        if ((g->input = sb_finish(&b, err)) && ds_strv_dup(&g->answers, ans, 5, err) == 0) {
            g->n_answers = 5;
            rc = 0;
        }
    }
    free(context);
    free(example);
    return rc;
}

/* ---------------------------------------------------------------- cwe */

/* "1. w 2. w ..." of n_words distinct vocabulary words, the first n_common repeated common_rep times and
 * the rest rare_rep times, in an order that depends only on the list length (RULER reseeds with 42). */
static int cwe_list(RulerState *st, Rng *r, int n_words, int n_common, int common_rep, int rare_rep, StrBuf *out,
                    const char **common, KvErr *err) {
    int v = st->n_cwe_vocab;
    if (n_words > v) return kv_fail(err, "cwe: %d distinct words asked, the vocabulary has %d", n_words, v);
    int *idx = kv_malloc((size_t)v * sizeof *idx, err);
    int total = n_common * common_rep + (n_words - n_common) * rare_rep;
    int *list = idx ? kv_malloc((size_t)total * sizeof *list, err) : NULL;
    if (!list) return free(idx), -1;
    for (int i = 0; i < v; i++) idx[i] = i;
    partial_shuffle(r, idx, v, n_words);
    int k = 0;
    for (int w = 0; w < n_words; w++)
        for (int rep = 0; rep < (w < n_common ? common_rep : rare_rep); rep++) list[k++] = idx[w];
    fixed_shuffle(list, total, "cwe-list");
    for (int i = 0; i < total; i++) sb_addf(out, i ? " %d. %s" : "%d. %s", i + 1, st->cwe_vocab[list[i]]);
    for (int i = 0; i < n_common; i++) common[i] = st->cwe_vocab[idx[i]];
    free(idx);
    free(list);
    return 0;
}

static int build_cwe(Gen *g, int size, KvErr *err) {
    RulerState *st = g->st;
    Rng r;
    rng_seed(&r, st->opt.seed, "cwe", (uint64_t)g->row);
    int small = st->target < 4096; /* RULER's settings below 4K: fewer repeats, a smaller example */
    const char *ex_common[10], *common[10];
    StrBuf ex = {0}, list = {0};
    if (cwe_list(st, &r, small ? 20 : 40, 10, small ? 3 : 10, small ? 1 : 3, &ex, ex_common, err) != 0 ||
        cwe_list(st, &r, size, 10, small ? 6 : 30, small ? 1 : 3, &list, common, err) != 0) {
        sb_free(&ex);
        sb_free(&list);
        return -1;
    }
    char *ex_ctx = sb_finish(&ex, err), *ctx = ex_ctx ? sb_finish(&list, err) : NULL;
    if (!ex_ctx) sb_free(&list);
    int rc = -1;
    Gen example = {st, g->row, NULL, NULL, 0, 0};
    const char *names[] = {"context"};
    if (ctx && format_input(&example, st->prompt_template, st->answer_prefix, 1, names, (const char *[]){ex_ctx}, err) == 0 &&
        format_input(g, st->prompt_template, st->answer_prefix, 1, names, (const char *[]){ctx}, err) == 0) {
        StrBuf b = {0};
        sb_adds(&b, example.input);
        for (int i = 0; i < 10; i++) sb_addf(&b, i ? " %d. %s" : "%d. %s", i + 1, ex_common[i]);
        sb_adds(&b, "\n");
        sb_adds(&b, g->input);
        free(g->input);
        if ((g->input = sb_finish(&b, err)) && ds_strv_dup(&g->answers, common, 10, err) == 0) {
            g->n_answers = 10;
            rc = 0;
        }
    }
    free(example.input);
    free(ex_ctx);
    free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- fwe */

static int cmp_word(const void *a, const void *b) { return strcmp(a, b); }

static int build_fwe(Gen *g, int size, KvErr *err) {
    RulerState *st = g->st;
    Rng r;
    rng_seed(&r, st->opt.seed, "fwe", (uint64_t)g->row);
    int v = st->target / 50;
    if (v < 5) return kv_fail(err, "fwe: target %d is too short for a vocabulary", st->target);
    char (*words)[8] = kv_malloc((size_t)v * sizeof *words, err);
    int *order = words ? kv_malloc((size_t)v * sizeof *order, err) : NULL;
    if (!order) return free(words), -1;
    for (int i = 0; i < v; i++) {
        int dup;
        do {
            for (int c = 0; c < 6; c++) words[i][c] = (char)('a' + rng_below(&r, 26));
            words[i][6] = '\0';
            dup = 0;
            for (int j = 0; j < i; j++) dup |= !strcmp(words[i], words[j]);
        } while (dup);
    }
    qsort(words, (size_t)v, sizeof *words, cmp_word);
    for (int i = 0; i < v; i++) order[i] = i;
    fixed_shuffle(order, v, "fwe-vocabulary");
    strcpy(words[order[0]], "...");
    /* Zipf with alpha 2: rank r appears int(size * r^-2 / zeta(2)) times */
    const double zeta2 = 1.6449340668482264;
    int total = 0;
    for (int k = 1; k <= v; k++) total += (int)(size / ((double)k * k) / zeta2);
    int *list = kv_malloc((size_t)(total ? total : 1) * sizeof *list, err);
    int rc = -1;
    if (list) {
        int n = 0;
        for (int k = 1; k <= v; k++)
            for (int c = (int)(size / ((double)k * k) / zeta2); c > 0; c--) list[n++] = order[k - 1];
        fixed_shuffle(list, n, "fwe-text");
        StrBuf b = {0};
        for (int i = 0; i < n; i++) sb_addf(&b, i ? " %s" : "%s", words[list[i]]);
        char *ctx = sb_finish(&b, err);
        const char *names[] = {"context"};
        const char *ans[3] = {words[order[1]], words[order[2]], words[order[3]]};
        if (ctx && format_input(g, st->prompt_template, st->answer_prefix, 1, names, (const char *[]){ctx}, err) == 0 &&
            ds_strv_dup(&g->answers, ans, 3, err) == 0) {
            g->n_answers = 3;
            rc = 0;
        }
        free(ctx);
    }
    free(list);
    free(order);
    free(words);
    return rc;
}

/* ---------------------------------------------------------------- qa */

/* Documents and questions of SQuAD v2 dev / HotpotQA dev (distractor), read as RULER's qa.py does: documents
 * de-duplicated and sorted; a question has its own documents, preferred distractors (the other paragraphs of
 * its SQuAD article) and its answers. Without the files, the substitute uses essay passages instead. */
typedef struct {
    char *question;
    char **answers;
    int n_answers;
    int *own, n_own;
    int *pref, n_pref;
} QaQuestion;

typedef struct QaData {
    char **docs;
    int n_docs;
    QaQuestion *qs;
    int n_qs;
} QaData;

static void qa_free(QaData *d) {
    if (!d) return;
    ds_strv_free(d->docs, d->n_docs);
    for (int i = 0; i < d->n_qs; i++) {
        free(d->qs[i].question);
        ds_strv_free(d->qs[i].answers, d->qs[i].n_answers);
        free(d->qs[i].own);
        free(d->qs[i].pref);
    }
    free(d->qs);
    free(d);
}

static int doc_index(char **sorted, int n, const char *doc) {
    char **hit = bsearch(&doc, sorted, (size_t)n, sizeof *sorted, cmp_str);
    return hit ? (int)(hit - sorted) : -1;
}

/* Sorts and de-duplicates d->docs in place. */
static void qa_sort_docs(QaData *d) {
    qsort(d->docs, (size_t)d->n_docs, sizeof *d->docs, cmp_str);
    int u = 0;
    for (int i = 0; i < d->n_docs; i++) {
        if (u > 0 && !strcmp(d->docs[u - 1], d->docs[i])) free(d->docs[i]);
        else d->docs[u++] = d->docs[i];
    }
    d->n_docs = u;
}

static int push_str(char ***v, int *n, int *cap, char *s, KvErr *err) {
    if (!s) return -1;
    if (*n == *cap) {
        char **g = realloc(*v, (size_t)(*cap = *cap ? *cap * 2 : 64) * sizeof *g);
        if (!g) return free(s), kv_fail(err, "out of memory reading QA data");
        *v = g;
    }
    (*v)[(*n)++] = s;
    return 0;
}

static int push_int(int **v, int *n, int x, KvErr *err) {
    int *g = realloc(*v, (size_t)(*n + 1) * sizeof *g);
    if (!g) return kv_fail(err, "out of memory reading QA data");
    g[(*n)++] = x;
    *v = g;
    return 0;
}

/* Appends a question with its text (NULL text: the caller's lookup failed, err is set). */
static QaQuestion *qa_new_question(QaData *d, const char *text, KvErr *err) {
    if (!text) return NULL;
    QaQuestion *g = realloc(d->qs, (size_t)(d->n_qs + 1) * sizeof *g);
    if (!g) return kv_fail(err, "out of memory reading QA data"), NULL;
    d->qs = g;
    QaQuestion *q = &d->qs[d->n_qs];
    memset(q, 0, sizeof *q);
    if (!(q->question = ds_strdup(text, err))) return NULL;
    d->n_qs++;
    return q;
}

static char *hotpot_doc(const cJSON *entry, KvErr *err) {
    const cJSON *title = cJSON_GetArrayItem(entry, 0), *sents = cJSON_GetArrayItem(entry, 1), *s;
    if (!cJSON_IsString(title) || !cJSON_IsArray(sents)) return kv_fail(err, "context entry is not [title, [sentences]]"), NULL;
    StrBuf b = {0};
    sb_adds(&b, title->valuestring);
    sb_adds(&b, "\n");
    cJSON_ArrayForEach(s, sents) if (cJSON_IsString(s)) sb_adds(&b, s->valuestring);
    return sb_finish(&b, err);
}

/* Two passes over the file: documents first (to sort them), then questions mapped onto document indices. */
static int qa_read(QaData *d, const cJSON *j, int squad, const char *path, KvErr *err) {
    int cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *outer = squad ? cJSON_GetObjectItemCaseSensitive(j, "data") : j, *item;
        if (!cJSON_IsArray(outer))
            return kv_fail(err, "%s: expected %s", path, squad ? "SQuAD's {\"data\": [...]}" : "HotpotQA's [ ... ] list");
        cJSON_ArrayForEach(item, outer) {
            if (squad) {
                const cJSON *p, *q;
                int first_q = d->n_qs, *article = NULL, n_article = 0;
                cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(item, "paragraphs")) {
                    const char *ctx = ds_json_str(p, "context", path, err);
                    if (!ctx) return free(article), -1;
                    if (pass == 0) {
                        if (push_str(&d->docs, &d->n_docs, &cap, ds_strdup(ctx, err), err) != 0) return -1;
                        continue;
                    }
                    int di = doc_index(d->docs, d->n_docs, ctx);
                    if (push_int(&article, &n_article, di, err) != 0) return free(article), -1;
                    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(p, "qas")) {
                        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(q, "answers"), *a;
                        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "is_impossible")) ||
                            cJSON_GetArraySize(ans) == 0)
                            continue;
                        QaQuestion *qq = qa_new_question(d, ds_json_str(q, "question", path, err), err);
                        if (!qq || push_int(&qq->own, &qq->n_own, di, err) != 0) return free(article), -1;
                        int acap = 0;
                        cJSON_ArrayForEach(a, ans) {
                            const char *at = ds_json_str(a, "text", path, err);
                            if (!at || push_str(&qq->answers, &qq->n_answers, &acap, ds_strdup(at, err), err) != 0)
                                return free(article), -1;
                        }
                    }
                }
                /* the article's other paragraphs are the preferred distractors of its questions */
                for (int qi = first_q; qi < d->n_qs; qi++)
                    for (int k = 0; k < n_article; k++)
                        if (article[k] != d->qs[qi].own[0] &&
                            push_int(&d->qs[qi].pref, &d->qs[qi].n_pref, article[k], err) != 0)
                            return free(article), -1;
                free(article);
            } else {
                const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(item, "context"), *e;
                if (!cJSON_IsArray(ctx)) return kv_fail(err, "%s: a question without a 'context' list", path);
                if (pass == 0) {
                    cJSON_ArrayForEach(e, ctx) if (push_str(&d->docs, &d->n_docs, &cap, hotpot_doc(e, err), err) != 0) return -1;
                    continue;
                }
                const char *answer = ds_json_str(item, "answer", path, err);
                QaQuestion *qq = answer ? qa_new_question(d, ds_json_str(item, "question", path, err), err) : NULL;
                int acap = 0;
                if (!qq || push_str(&qq->answers, &qq->n_answers, &acap, ds_strdup(answer, err), err) != 0) return -1;
                cJSON_ArrayForEach(e, ctx) {
                    char *doc = hotpot_doc(e, err);
                    if (!doc) return -1;
                    int di = doc_index(d->docs, d->n_docs, doc);
                    free(doc);
                    if (push_int(&qq->own, &qq->n_own, di, err) != 0) return -1;
                }
            }
        }
        if (pass == 0) qa_sort_docs(d);
    }
    if (d->n_qs == 0) return kv_fail(err, "%s: no answerable questions", path);
    return 0;
}

/* Draws count distinct values of [0, n) not in taken[0..n_taken) and appends them to taken. */
static void draw_excluding(Rng *r, int n, int count, int *taken, int *n_taken) {
    for (int c = 0; c < count; c++) {
        int v, dup;
        do {
            v = (int)rng_below(r, (uint64_t)n);
            dup = 0;
            for (int k = 0; k < *n_taken && !dup; k++) dup = taken[k] == v;
        } while (dup);
        taken[(*n_taken)++] = v;
    }
}

static int qa_pool_size(const RulerState *st) { return st->qa ? st->qa->n_docs : st->n_words / QA_DOC_WORDS; }

/* Essay passage i of the substitute. */
static void passage(const RulerState *st, int i, StrBuf *out) {
    int first = i * QA_DOC_WORDS, last = first + QA_DOC_WORDS - 1;
    size_t from = first == 0 ? 0 : (size_t)st->word_end[first - 1] + 1;
    sb_add(out, st->essay + from, (size_t)st->word_end[last] - from);
}

static int build_qa(Gen *g, int size, KvErr *err) {
    RulerState *st = g->st;
    Rng r;
    rng_seed(&r, st->opt.seed, st->task_label, (uint64_t)g->row);
    int *docs = kv_malloc((size_t)size * sizeof *docs, err), n = 0;
    if (!docs) return -1;
    const QaQuestion *q = st->qa ? &st->qa->qs[g->row] : NULL;
    StrBuf question = {0}, answer = {0}, fact = {0};
    if (q) {
        for (int k = 0; k < q->n_own && n < size; k++) docs[n++] = q->own[k];
        if (size - n > q->n_pref) {
            for (int k = 0; k < q->n_pref; k++) docs[n++] = q->pref[k];
            draw_excluding(&r, st->qa->n_docs, size - n, docs, &n);
        } else {
            int *pick = kv_malloc((size_t)(q->n_pref ? q->n_pref : 1) * sizeof *pick, err);
            if (!pick) return free(docs), -1;
            for (int k = 0; k < q->n_pref; k++) pick[k] = k;
            partial_shuffle(&r, pick, q->n_pref, size - n);
            for (int k = 0; n < size; k++) docs[n++] = q->pref[pick[k]];
            free(pick);
        }
        sb_adds(&question, q->question);
    } else {
        /* substitute: one passage carries a templated fact the question asks for */
        docs[n++] = (int)rng_below(&r, (uint64_t)qa_pool_size(st));
        draw_excluding(&r, qa_pool_size(st), size - 1, docs, &n);
        StrBuf club = {0};
        draw_value(st, &r, VAL_WORDS, &club);
        sb_adds(&answer, st->nouns.v[rng_below(&r, (uint64_t)st->nouns.n)]);
        sb_addf(&fact, " The secret password of the %s club is %s.", club.s ? club.s : "", answer.s ? answer.s : "");
        sb_addf(&question, "What is the secret password of the %s club?", club.s ? club.s : "");
        sb_free(&club);
    }
    int gold = docs[0];
    fixed_shuffle(docs, n, "qa-documents");
    StrBuf ctx = {0};
    for (int k = 0; k < n; k++) {
        StrBuf doc = {0};
        if (q) sb_adds(&doc, st->qa->docs[docs[k]]);
        else passage(st, docs[k], &doc);
        if (!q && docs[k] == gold) sb_adds(&doc, fact.s ? fact.s : "");
        char index[16];
        snprintf(index, sizeof index, "%d", k + 1);
        const char *names[] = {"i", "document"}, *vals[] = {index, doc.s ? doc.s : ""};
        char *d = doc.failed ? NULL : ds_fill(st->doc_format, 2, names, vals, NULL);
        if (k) sb_adds(&ctx, "\n\n");
        if (d) sb_adds(&ctx, d);
        else ctx.failed = 1;
        free(d);
        sb_free(&doc);
    }
    free(docs);
    sb_free(&fact);
    char *context = sb_finish(&ctx, err), *query = context ? sb_finish(&question, err) : NULL;
    if (!context) sb_free(&question);
    int rc = -1;
    const char *names[] = {"context", "query"}, *vals[] = {context, query};
    if (query && format_input(g, st->prompt_template, st->answer_prefix, 2, names, vals, err) == 0) {
        if (q) {
            rc = ds_strv_dup(&g->answers, (const char *const *)q->answers, q->n_answers, err);
            g->n_answers = rc == 0 ? q->n_answers : 0;
        } else {
            char *a = sb_finish(&answer, err);
            if (a && ds_strv_dup(&g->answers, (const char *const *)&a, 1, err) == 0) {
                g->n_answers = 1;
                rc = 0;
            }
            free(a);
        }
    }
    sb_free(&answer);
    free(context);
    free(query);
    return rc;
}

static int qa_open(RulerState *st, KvErr *err) {
    int squad = !strcmp(st->task->name, "qa_1");
    const char *const names[2][2] = {{"squad.json", "dev-v2.0.json"}, {"hotpotqa.json", "hotpot_dev_distractor_v1.json"}};
    char path[4096] = "";
    struct stat sb;
    const char *dp = st->opt.data_path;
    if (!dp || !*dp) return 0; /* the substitute */
    if (stat(dp, &sb) == 0 && S_ISREG(sb.st_mode)) {
        snprintf(path, sizeof path, "%s", dp);
    } else {
        for (int k = 0; k < 2 && !*path; k++) {
            snprintf(path, sizeof path, "%s/%s", dp, names[squad ? 0 : 1][k]);
            if (stat(path, &sb) != 0) *path = '\0';
        }
        if (!*path)
            return kv_fail(err, "%s: no %s or %s there (RULER's %s source)", dp, names[squad ? 0 : 1][0],
                           names[squad ? 0 : 1][1], squad ? "SQuAD v2 dev" : "HotpotQA dev distractor");
    }
    size_t len;
    char *text = kv_read_file(path, &len, err);
    if (!text) return -1;
    st->qa_hash = ds_hash(DS_HASH_INIT, text, len);
    cJSON *j = kv_parse_json(text, len, path, err);
    free(text);
    if (!j) return -1;
    st->qa = kv_calloc(1, sizeof *st->qa, err);
    int rc = st->qa ? qa_read(st->qa, j, squad, path, err) : -1;
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- one sample: fit, build, split */

static int build(Gen *g, int size, KvErr *err) {
    gen_clear(g);
    switch (g->st->task->family) {
    case FAM_NIAH: return build_niah(g, size, err);
    case FAM_VT: return build_vt(g, size, err);
    case FAM_CWE: return build_cwe(g, size, err);
    case FAM_FWE: return build_fwe(g, size, err);
    case FAM_QA: return build_qa(g, size, err);
    }
    return kv_fail(err, "unknown RULER family");
}

static int size_probe(void *ctx, int size, int *n_tokens, KvErr *err) {
    Gen *g = ctx;
    if (build(g, size, err) != 0) return -1;
    return ds_count_tokens(&g->st->opt, g->input, n_tokens, err);
}

/* With opt.ruler_unit_sizing, the tasks whose coarse steps leave the prompt far below the target grow one line /
 * document at a time instead, as the current RULER's binary search does: one 25-line step of uuid needles is
 * ~1,100 tokens, so niah_multikey_3 at 4K lands at 52-54% of the target (SmolLM2), one 10-document step of qa at
 * 77-80%. By default they keep the late-2024 steps, as the reference data (niah_multikey_3: 3,053-3,080 Llama-3.1
 * tokens at 4K) was made. */
static int unit_sized(const RulerState *st) {
    const RulerTask *t = st->task;
    return st->opt.ruler_unit_sizing && ((t->family == FAM_NIAH && t->haystack != HAY_ESSAY) || t->family == FAM_QA);
}

/* RULER's search steps (the smallest size and the step) and the largest size the inputs allow. */
static void size_range(const RulerState *st, int *base, int *step, int *max_size) {
    const RulerTask *t = st->task;
    *max_size = 1 << 24;
    *base = *step = 1;
    switch (t->family) {
    case FAM_NIAH:
        *base = *step = t->haystack == HAY_ESSAY ? ESSAY_STEP : LINE_STEP;
        if (t->haystack == HAY_ESSAY) *max_size = st->n_words;
        if (unit_sized(st)) *step = 1;
        break;
    case FAM_VT: *base = *step = VT_STEP; break;
    case FAM_CWE:
        *base = 20, *step = CWE_STEP;
        *max_size = st->n_cwe_vocab;
        break;
    case FAM_FWE:
        *base = st->target / 6, *step = st->target / 32 > 0 ? st->target / 32 : 1;
        break;
    case FAM_QA:
        *base = *step = QA_STEP;
        if (unit_sized(st)) *step = 1;
        *max_size = qa_pool_size(st);
        break;
    }
}

/* kvpress's split: the question starts at the last match of the family's question pattern, the answer prefix
 * at the first match of the answer pattern inside the question. */
static int split_input(const RulerState *st, const char *input, Sample *s, KvErr *err) {
    regmatch_t m;
    int q = -1;
    for (size_t off = 0; regexec(&st->question_re, input + off, 1, &m, off ? REG_NOTBOL : 0) == 0;) {
        q = (int)(off + (size_t)m.rm_so);
        off += (size_t)(m.rm_eo > 0 ? m.rm_eo : 1);
    }
    if (q < 0) return kv_fail(err, "the generated text has no question matching kvpress's pattern");
    if (regexec(&st->answer_re, input + q, 1, &m, REG_NOTBOL) != 0)
        return kv_fail(err, "the generated question has no answer prefix matching kvpress's pattern");
    size_t a = (size_t)q + (size_t)m.rm_so;
    return (s->context = ds_strndup(input, (size_t)q, err)) &&
                   (s->question = ds_strndup(input + q, a - (size_t)q, err)) &&
                   (s->answer_prefix = ds_strdup(input + a, err))
               ? 0
               : -1;
}

static int ruler_get(void *state, int index, Sample *s, KvErr *err) {
    RulerState *st = state;
    Gen g = {st, st->rows[index], NULL, NULL, 0, 0};
    int base, step, max_size, size, rc = -1;
    size_range(st, &base, &step, &max_size);
    if (ds_fit_size(size_probe, &g, base, step, max_size, st->budget, st->size_hint, &size, "haystack", err) == 0 &&
        build(&g, size, err) == 0 && split_input(st, g.input, s, err) == 0 &&
        (s->suite = ds_strdup("ruler", err)) && (s->task = ds_strdup(st->task_label, err)) &&
        (s->metric = ds_strdup(FAMILY[st->task->family].metric, err)) &&
        (s->domain = ds_strdup(FAMILY[st->task->family].domain, err)) && (!st->note || (s->note = ds_strdup(st->note, err)))) {
        st->size_hint = size;
        s->answers = g.answers;
        s->n_answers = g.n_answers;
        g.answers = NULL;
        g.n_answers = 0;
        s->index = index;
        s->max_new_tokens = st->tokens_to_generate;
        s->use_chat = 1; /* kvpress wraps the context in the chat template (policies.md §4.3) */
        s->add_bos = 0;
        s->depth_percent = -1;
        s->target_tokens = st->target;
        rc = 0;
    }
    gen_clear(&g);
    return rc;
}

/* ---------------------------------------------------------------- the suite */

static void ruler_close(void *state) {
    RulerState *st = state;
    if (!st) return;
    free(st->prompt_template);
    free(st->answer_prefix);
    free(st->noise);
    free(st->needle_format);
    free(st->doc_format);
    if (st->have_re) {
        regfree(&st->question_re);
        regfree(&st->answer_re);
    }
    free(st->essay);
    free(st->word_end);
    ds_strv_free(st->adjectives.v, st->adjectives.n);
    ds_strv_free(st->nouns.v, st->nouns.n);
    ds_strv_free(st->verbs.v, st->verbs.n);
    free(st->cwe_vocab);
    qa_free(st->qa);
    free(st->rows);
    free(st);
}

static const char *const WORD_LISTS[] = {"ruler/wonderwords_v2.2.0/adjectivelist.txt",
                                         "ruler/wonderwords_v2.2.0/nounlist.txt",
                                         "ruler/wonderwords_v2.2.0/verblist.txt"};

/* st->assets_hash over the asset files the task reads (part of dataset_identity). */
static int hash_assets(RulerState *st, const char *assets, int needs_essay, int needs_words, KvErr *err) {
    uint64_t h = DS_HASH_INIT;
    if (ds_hash_asset(&h, assets, "ruler/ruler_task_templates.json", err) ||
        (needs_essay && ds_hash_asset(&h, assets, "ruler/PaulGrahamEssays.json", err)))
        return -1;
    for (int i = 0; i < 3 && needs_words; i++)
        if (ds_hash_asset(&h, assets, WORD_LISTS[i], err)) return -1;
    st->assets_hash = h;
    return 0;
}

static int ruler_open(void **state, const char *task, const DatasetOptions *opt, KvErr *err) {
    RulerState *st = kv_calloc(1, sizeof *st, err);
    if (!st) return -1;
    st->task = ruler_find(task);
    st->opt = *opt;
    st->task_label = st->task->name; /* the table's string: the caller's buffer may not outlive the dataset */
    st->target = opt->target_tokens > 0 ? opt->target_tokens : DEFAULT_TARGET;
    const char *assets = ds_assets_dir(opt);
    const RulerTask *t = st->task;
    int needs_essay = (t->family == FAM_NIAH && t->haystack == HAY_ESSAY) || t->family == FAM_QA;
    int needs_words = t->family == FAM_CWE || t->family == FAM_QA || t->key_type == VAL_WORDS || t->value_type == VAL_WORDS;
    int n = opt->n_samples > 0 ? opt->n_samples : DEFAULT_SAMPLES;
    if (!opt->count_tokens) {
        kv_fail(err, "RULER needs a token counter to fit the target length");
    } else if (hash_assets(st, assets, needs_essay, needs_words, err) == 0 && load_templates(st, assets, err) == 0 &&
               (!needs_essay || load_essay(st, assets, err) == 0) &&
               (!needs_words || (load_word_list(&st->adjectives, assets, WORD_LISTS[0], err) == 0 &&
                                 load_word_list(&st->nouns, assets, WORD_LISTS[1], err) == 0 &&
                                 load_word_list(&st->verbs, assets, WORD_LISTS[2], err) == 0)) &&
               (t->family != FAM_CWE || build_cwe_vocab(st, err) == 0) && (t->family != FAM_QA || qa_open(st, err) == 0)) {
        st->budget = st->target - st->tokens_to_generate;
        if (t->family == FAM_QA && !st->qa) {
            st->task_label = !strcmp(task, "qa_1") ? "qa_1_substitute" : "qa_2_substitute";
            st->note = "substitute qa data: essay passages with one templated fact (no SQuAD / HotpotQA at data_path)";
        }
        if (st->qa && n > st->qa->n_qs)
            kv_fail(err, "%d samples asked, the QA file has %d answerable questions", n, st->qa->n_qs);
        else if (st->budget <= 0)
            kv_fail(err, "target %d tokens leaves no room after %d tokens to generate", st->target, st->tokens_to_generate);
        else if (ds_subset_rows(n, opt, &st->rows, &st->n_rows, err) == 0) {
            *state = st;
            return 0;
        }
    }
    ruler_close(st);
    return -1;
}

static void ruler_sample_id(const void *state, int index, char *out, size_t size) {
    const RulerState *st = state;
    snprintf(out, size, "ruler:%s:%d", st->task_label, st->rows[index]);
}

/* The seed drives the generator; the target length is in the runner's key; n_samples does not change row r.
 * "sizing=unit" marks the tasks whose sizes the unit sizing changes, so their rows never mix with the reference
 * sizing's; the other tasks' samples, and identities, are the same under both. */
static void ruler_identity(const void *state, char *out, size_t size) {
    const RulerState *st = state;
    char qa[32] = "substitute";
    if (st->qa) snprintf(qa, sizeof qa, "%016llx", (unsigned long long)st->qa_hash);
    snprintf(out, size, "seed=%llu,assets=%016llx,qa=%s%s", st->opt.seed, (unsigned long long)st->assets_hash,
             st->task->family == FAM_QA ? qa : "none", unit_sized(st) ? ",sizing=unit" : "");
}

static int ruler_count(const void *state) { return ((const RulerState *)state)->n_rows; }
static int ruler_skipped(const void *state) { (void)state; return 0; }

static void ruler_print_list(FILE *f) {
    static const int TTG[] = {[FAM_NIAH] = 128, [FAM_VT] = 30, [FAM_CWE] = 120, [FAM_FWE] = 50, [FAM_QA] = 32};
    for (int i = 0; i < N_RULER_TASKS; i++) {
        const RulerTask *t = &RULER_TASKS[i];
        char spec[64];
        snprintf(spec, sizeof spec, "ruler:%s", t->name);
        fprintf(f, "%-34s %-18s %-20s %d%s\n", spec, FAMILY[t->family].metric, FAMILY[t->family].domain, TTG[t->family],
                t->family != FAM_QA              ? ""
                : i == N_RULER_TASKS - 1 ? "  (HotpotQA dev from a config's data_path or `data show --data`; else substitute)"
                                         : "  (SQuAD v2 dev from a config's data_path or `data show --data`; else substitute)");
    }
}

const SuiteOps RULER_SUITE = {"ruler", ruler_open, ruler_count, ruler_get, ruler_sample_id, ruler_identity, ruler_skipped,
                              ruler_close, ruler_task_known, ruler_print_list};

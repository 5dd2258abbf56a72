/* ds_util.c — the helpers every suite of datasets/ uses: growable strings, template filling, UTF-8 checks,
 * asset loading, token counting through the caller's callback and the token-budget size search. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/jsonfile.h"
#include "ds_internal.h"

/* ---------------------------------------------------------------- growable string */

static int sb_reserve(StrBuf *b, size_t extra) {
    if (b->failed) return -1;
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = 1;
        return -1;
    }
    b->s = s;
    b->cap = cap;
    return 0;
}

void sb_add(StrBuf *b, const char *s, size_t n) {
    if (sb_reserve(b, n) != 0) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void sb_adds(StrBuf *b, const char *s) { sb_add(b, s, strlen(s)); }

void sb_addf(StrBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || sb_reserve(b, (size_t)need) != 0) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)need + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)need;
}

char *sb_finish(StrBuf *b, KvErr *err) {
    if (!b->failed && sb_reserve(b, 0) == 0) {
        b->s[b->n] = '\0'; /* an empty buffer was only just allocated */
        char *s = b->s;
        *b = (StrBuf){0};
        return s;
    }
    sb_free(b);
    kv_fail(err, "out of memory building a sample text");
    return NULL;
}

void sb_free(StrBuf *b) {
    free(b->s);
    *b = (StrBuf){0};
}

/* ---------------------------------------------------------------- strings */

char *ds_strndup(const char *s, size_t n, KvErr *err) {
    char *d = kv_malloc(n + 1, err);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

uint64_t ds_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

uint64_t ds_hash_str(uint64_t h, const char *s) { return ds_hash(h, s, strlen(s) + 1); }

int ds_hash_asset(uint64_t *h, const char *assets_dir, const char *rel, KvErr *err) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", assets_dir, rel);
    char *text = kv_read_file(path, &len, err);
    if (!text) return -1;
    *h = ds_hash(ds_hash_str(*h, rel), text, len);
    free(text);
    return 0;
}

char *ds_strdup(const char *s, KvErr *err) { return ds_strndup(s, strlen(s), err); }

int ds_strv_dup(char ***out, const char *const *v, int n, KvErr *err) {
    *out = NULL;
    if (n <= 0) return 0;
    char **d = kv_calloc((size_t)n, sizeof *d, err);
    if (!d) return -1;
    for (int i = 0; i < n; i++) {
        if (!(d[i] = ds_strdup(v[i], err))) {
            ds_strv_free(d, i);
            return -1;
        }
    }
    *out = d;
    return 0;
}

void ds_strv_free(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

char *ds_fill(const char *tmpl, int n, const char *const *names, const char *const *values, KvErr *err) {
    StrBuf b = {0};
    const char *p = tmpl;
    while (*p) {
        int hit = -1;
        size_t hit_len = 0;
        if (*p == '{') {
            for (int i = 0; i < n && hit < 0; i++) {
                size_t len = strlen(names[i]);
                if (!strncmp(p + 1, names[i], len) && p[1 + len] == '}') {
                    hit = i;
                    hit_len = len + 2;
                }
            }
        }
        if (hit >= 0) {
            sb_adds(&b, values[hit]);
            p += hit_len;
        } else {
            sb_add(&b, p, 1);
            p++;
        }
    }
    return sb_finish(&b, err);
}

int ds_utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t len;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, min = 0x10000, c &= 0x07;
        } else {
            break;
        }
        if (i + len > n) break;
        size_t k = 1;
        for (; k < len && (u[i + k] & 0xC0) == 0x80; k++) c = (c << 6) | (u[i + k] & 0x3F);
        /* overlong forms, surrogates and values past U+10FFFF are invalid too */
        if (k < len || c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) break;
        i += len;
    }
    if (i < n && bad) *bad = i;
    return i >= n;
}

/* ---------------------------------------------------------------- assets and JSON */

const char *ds_assets_dir(const DatasetOptions *opt) {
    return opt && opt->assets_dir && *opt->assets_dir ? opt->assets_dir : "datasets/assets";
}

cJSON *ds_load_json(const char *assets_dir, const char *rel, KvErr *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", assets_dir, rel);
    return kv_read_json(path, err);
}

const char *ds_json_str(const cJSON *obj, const char *key, const char *where, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) {
        kv_fail(err, "%s: missing string '%s'", where, key);
        return NULL;
    }
    return v->valuestring;
}

/* ---------------------------------------------------------------- tokens */

int ds_count_tokens(const DatasetOptions *opt, const char *text, int *n, KvErr *err) {
    if (!opt->count_tokens) return kv_fail(err, "a token counter is required (pass the model's tokenizer)");
    return opt->count_tokens(opt->count_user, text, n, err);
}

int ds_fit_size(SizeProbeFn probe, void *ctx, int base, int step, int max_size, int budget, int hint,
                int *size_out, const char *what, KvErr *err) {
    /* sizes are indexed by m: size = base + m*step; find the largest fitting m */
    int m_max = max_size >= base ? (max_size - base) / step : -1;
    int tokens;
    if (m_max < 0 || probe(ctx, base, &tokens, err) != 0) {
        if (m_max < 0) kv_fail(err, "%s: no room for even the smallest haystack", what);
        return -1;
    }
    if (tokens > budget)
        return kv_fail(err, "%s: the target length is shorter than the task's template (%d tokens needed for the "
                       "smallest haystack, budget %d)", what, tokens, budget);
    int lo = 0, hi = m_max + 1; /* lo fits; hi does not (m_max + 1: not known yet) */
    int m = hint > base ? (hint - base) / step : 0;
    if (m > m_max) m = m_max;
    if (m > 0) {
        if (probe(ctx, base + m * step, &tokens, err) != 0) return -1;
        if (tokens <= budget) lo = m;
        else hi = m;
    }
    /* gallop upwards until an upper bound is found, then bisect */
    for (int delta = 1; hi == m_max + 1 && lo < m_max; delta *= 2) {
        int t = lo + delta > m_max ? m_max : lo + delta;
        if (probe(ctx, base + t * step, &tokens, err) != 0) return -1;
        if (tokens <= budget) lo = t;
        else hi = t;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (probe(ctx, base + mid * step, &tokens, err) != 0) return -1;
        if (tokens <= budget) lo = mid;
        else hi = mid;
    }
    *size_out = base + lo * step;
    return 0;
}

/* ---------------------------------------------------------------- subsets */

int ds_subset_rows(int n, const DatasetOptions *opt, int **rows, int *n_rows, KvErr *err) {
    *rows = kv_malloc((size_t)(n ? n : 1) * sizeof **rows, err);
    if (!*rows) return -1;
    *n_rows = n;
    if (opt->fraction > 0) {
        if (opt->seed > 0xFFFFFFFFull)
            return kv_fail(err, "seed %llu: pandas/numpy subsets take seeds below 2^32", opt->seed);
        if (np_legacy_permutation((uint32_t)opt->seed, n, *rows, err) != 0) return -1;
        *n_rows = (int)rint(opt->fraction * n); /* Python's round(): halves go to even, as rint does */
    } else {
        for (int i = 0; i < n; i++) (*rows)[i] = i;
    }
    if (opt->first_n > 0 && opt->first_n < *n_rows) *n_rows = opt->first_n;
    if (*n_rows == 0) return kv_fail(err, "the subset of %d records is empty", n);
    return 0;
}

/* ---------------------------------------------------------------- the public helpers that are not suites */

int dataset_count_words(void *user, const char *text, int *n_tokens, KvErr *err) {
    (void)user;
    (void)err;
    int n = 0, in_word = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        int space = *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v';
        if (!space && !in_word) n++;
        in_word = !space;
    }
    *n_tokens = n;
    return 0;
}

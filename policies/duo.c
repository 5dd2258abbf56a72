/* duo.c — DuoAttention head patterns: reading them, choosing the streaming heads, and the keep-set
 * (duo.h; the rule: policies/assets/duo_attention_patterns/README.md and kvpress duo_attention_press.py). */
#include "duo.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/jsonfile.h"

#define SCORES_FILE "full_attention_heads.tsv"
#define CONFIG_FILE "config.json"
#define MAX_PATTERN_HEADS (1 << 20)

void duo_pattern_free(DuoPattern *p) {
    if (!p) return;
    free(p->score);
    *p = (DuoPattern){0};
}

/* One row of the TSV into row[0..*n): tab-separated finite numbers. */
static int parse_row(char *line, const char *path, int line_no, double *row, int cap, int *n, KvErr *err) {
    *n = 0;
    for (char *field = line;; field++) {
        char *end;
        if (*field == '\t' || !*field) /* strtod would skip the tab and read the next column's number */
            return kv_fail(err, "%s: line %d, column %d: empty", path, line_no, *n + 1);
        errno = 0;
        double v = strtod(field, &end);
        if (end == field || errno || !isfinite(v))
            return kv_fail(err, "%s: line %d, column %d: not a finite number", path, line_no, *n + 1);
        if (*n == cap) return kv_fail(err, "%s: line %d: more than %d columns", path, line_no, cap);
        row[(*n)++] = v;
        while (*end == ' ' || *end == '\r') end++;
        if (!*end) return 0;
        if (*end != '\t')
            return kv_fail(err, "%s: line %d, column %d: unexpected '%c' (scores are tab-separated)", path, line_no,
                           *n, *end);
        field = end;
    }
}

static int load_scores(DuoPattern *p, const char *path, KvErr *err) {
    size_t len;
    char *text = kv_read_file(path, &len, err);
    if (!text) return -1;
    int rc = -1, cap = 1024, line_no = 0;
    double *row = kv_malloc(sizeof(double) * (size_t)cap, err);
    if (!row) goto done;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        if (strspn(line, " \t\r") == strlen(line)) continue; /* np.loadtxt skips blank lines */
        int n;
        if (parse_row(line, path, line_no, row, cap, &n, err)) goto done;
        if (p->n_layers == 0) p->n_kv_heads = n;
        else if (n != p->n_kv_heads) {
            kv_fail(err, "%s: line %d has %d scores, the first row has %d (one column per kv-head)", path, line_no, n,
                    p->n_kv_heads);
            goto done;
        }
        if ((long)(p->n_layers + 1) * n > MAX_PATTERN_HEADS) {
            kv_fail(err, "%s: more than %d scores", path, MAX_PATTERN_HEADS);
            goto done;
        }
        double *grown = realloc(p->score, sizeof(double) * (size_t)(p->n_layers + 1) * (size_t)n);
        if (!grown) {
            kv_fail(err, "%s: out of memory", path);
            goto done;
        }
        p->score = grown;
        for (int k = 0; k < n; k++) /* clipped as duo_attn.utils.load_attn_pattern does */
            p->score[(size_t)p->n_layers * n + k] = row[k] < 0 ? 0 : row[k] > 1 ? 1 : row[k];
        p->n_layers++;
    }
    if (p->n_layers == 0) kv_fail(err, "%s: no scores (expected one row per layer)", path);
    else rc = 0;
done:
    free(row);
    free(text);
    return rc;
}

static int config_size(const cJSON *cfg, const char *path, const char *key, int min, int *out, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(v)) return kv_fail(err, "%s: missing number '%s'", path, key);
    if (v->valuedouble != floor(v->valuedouble) || v->valuedouble < min || v->valuedouble > (1 << 30))
        return kv_fail(err, "%s: '%s' must be a whole number of at least %d (got %g)", path, key, min, v->valuedouble);
    *out = (int)v->valuedouble;
    return 0;
}

int duo_pattern_load(DuoPattern *out, const char *dir, KvErr *err) {
    *out = (DuoPattern){0};
    char path[1100];
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return kv_fail(err, "%s: not a folder (a DuoAttention pattern is a folder with %s and %s)", dir, SCORES_FILE,
                       CONFIG_FILE);
    snprintf(out->source, sizeof out->source, "%s", dir);
    snprintf(path, sizeof path, "%s/%s", dir, SCORES_FILE);
    if (load_scores(out, path, err)) goto fail;
    snprintf(path, sizeof path, "%s/%s", dir, CONFIG_FILE);
    cJSON *cfg = kv_read_json(path, err);
    if (!cfg) goto fail;
    /* recent_size 0 would be the reference's slice sink:-0, which masks nothing: refused rather than copied. */
    int rc = config_size(cfg, path, "sink_size", 0, &out->sink_size, err) ||
             config_size(cfg, path, "recent_size", 1, &out->recent_size, err);
    cJSON_Delete(cfg);
    if (!rc) return 0;
fail:
    duo_pattern_free(out);
    return -1;
}

static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; hay && *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* A pattern folder: one holding the scores file. */
static int is_pattern_dir(const char *root, const char *name) {
    char path[1100];
    struct stat st;
    if (name[0] == '.') return 0;
    snprintf(path, sizeof path, "%s/%s/%s", root, name, SCORES_FILE);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int duo_pattern_find(const char *root, const char *model_name, const char *model_path, char *dir, size_t dir_size,
                     KvErr *err) {
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return 0;
        return kv_fail(err, "%s: %s", root, strerror(errno));
    }
    size_t best = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        /* the longest match wins, so "Mistral-7B-Instruct-v0.3" beats a shorter folder it contains */
        if (n > best && is_pattern_dir(root, e->d_name) &&
            (contains_nocase(model_name, e->d_name) || contains_nocase(model_path, e->d_name))) {
            best = n;
            snprintf(dir, dir_size, "%s/%s", root, e->d_name);
        }
    }
    closedir(d);
    return best > 0;
}

void duo_pattern_shipped(const char *root, char *out, size_t size) {
    DIR *d = opendir(root);
    snprintf(out, size, "none");
    if (!d) return;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (is_pattern_dir(root, e->d_name) && n < size)
            n += (size_t)snprintf(out + n, size - n, "%s%s", n ? ", " : "", e->d_name);
    closedir(d);
}

int duo_streaming_count(int n_heads, double compression_ratio) {
    double x = n_heads * compression_ratio, r = floor(x);
    if (x - r > 0.5 || (x - r == 0.5 && fmod(r, 2.0) != 0)) r += 1;
    return (int)r;
}

typedef struct {
    double score;
    int index;
} Head;

static int cmp_head(const void *pa, const void *pb) {
    const Head *a = pa, *b = pb;
    if (a->score != b->score) return a->score < b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int duo_streaming_heads(const DuoPattern *p, double compression_ratio, unsigned char *streaming, KvErr *err) {
    int n = p->n_layers * p->n_kv_heads;
    if (!(compression_ratio >= 0 && compression_ratio <= 1))
        return kv_fail(err, "duoattention: compression ratio %g is outside [0, 1]", compression_ratio);
    Head *h = kv_malloc(sizeof(Head) * (size_t)n, err);
    if (!h) return -1;
    for (int i = 0; i < n; i++) h[i] = (Head){p->score[i], i};
    qsort(h, (size_t)n, sizeof *h, cmp_head);
    int n_streaming = duo_streaming_count(n, compression_ratio);
    memset(streaming, 0, (size_t)n);
    for (int i = 0; i < n_streaming && i < n; i++) streaming[h[i].index] = 1;
    free(h);
    return 0;
}

int duo_keepset(const DuoPattern *p, int n_layers, int n_kv_heads, int context_len, double compression_ratio,
                KeepSet *out, KvErr *err) {
    *out = (KeepSet){0};
    if (p->n_layers != n_layers || p->n_kv_heads != n_kv_heads)
        return kv_fail(err, "duoattention: the pattern %s has %d layers x %d kv-heads, the model %d x %d",
                       p->source, p->n_layers, p->n_kv_heads, n_layers, n_kv_heads);
    if (context_len < 1) return kv_fail(err, "duoattention: context length %d is not positive", context_len);
    int n = n_layers * n_kv_heads, L = context_len;
    unsigned char *streaming = kv_malloc((size_t)n, err);
    int *counts = streaming ? kv_malloc(sizeof(int) * (size_t)n, err) : NULL;
    int rc = -1;
    if (!counts || duo_streaming_heads(p, compression_ratio, streaming, err)) goto done;
    /* Python's keys[..., sink:-recent]: positions sink .. L-recent-1, empty when L <= sink + recent. */
    int cut_from = p->sink_size < L ? p->sink_size : L;
    int cut_to = L - p->recent_size > cut_from ? L - p->recent_size : cut_from;
    for (int s = 0; s < n; s++) counts[s] = streaming[s] ? L - (cut_to - cut_from) : L;
    if (keepset_init(out, n_layers, n_kv_heads, counts, err)) goto done;
    for (int s = 0; s < n; s++) {
        int *pos = out->positions + out->offsets[s], j = 0;
        for (int t = 0; t < L; t++)
            if (!streaming[s] || t < cut_from || t >= cut_to) pos[j++] = t;
    }
    rc = 0;
done:
    free(streaming);
    free(counts);
    return rc;
}

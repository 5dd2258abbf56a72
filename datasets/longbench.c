/* longbench.c — LongBench v1, the 16 English tasks, as the DefensiveKV harness feeds them (spec datasets.md §1,
 * policies.md §4.2–4.3).
 *
 * Records come from the official JSONL files, either a directory of TASK.jsonl or the official data.zip read in
 * place (member data/TASK.jsonl). Each record's prompt is split into the context part (compressed) and the
 * question part (fed after compression) with DefensiveKV's split templates, which are data files
 * (assets/longbench/defensivekv_split_prompts.json, dataset2maxlen.json); placeholders are replaced in one
 * pass so braces inside code or text stay as they are. The six few-shot / code tasks are fed raw: no chat
 * template and no BOS. Like the reference there is no truncation by default; target_tokens applies
 * LongBench's own middle truncation (keep the first and the last half of the prompt's tokens). Subsets
 * reproduce pandas' sample(frac, random_state=seed) row choice, or take the first N rows. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zip.h>

#include "ds_internal.h"

typedef struct {
    const char *name;
    const char *domain;
    const char *metric;
    int use_chat;
    int stop_on_newline;
} LbTask;

static const LbTask LB_TASKS[] = {
    {"narrativeqa", "single-doc QA", "qa_f1", 1, 0},
    {"qasper", "single-doc QA", "qa_f1", 1, 0},
    {"multifieldqa_en", "single-doc QA", "qa_f1", 1, 0},
    {"hotpotqa", "multi-doc QA", "qa_f1", 1, 0},
    {"2wikimqa", "multi-doc QA", "qa_f1", 1, 0},
    {"musique", "multi-doc QA", "qa_f1", 1, 0},
    {"gov_report", "summarization", "rouge_l", 1, 0},
    {"qmsum", "summarization", "rouge_l", 1, 0},
    {"multi_news", "summarization", "rouge_l", 1, 0},
    {"trec", "few-shot", "classification", 0, 0},
    {"triviaqa", "few-shot", "qa_f1", 0, 0},
    {"samsum", "few-shot", "rouge_l", 0, 1},
    {"passage_count", "synthetic", "count", 1, 0},
    {"passage_retrieval_en", "synthetic", "retrieval", 1, 0},
    {"lcc", "code", "code_sim", 0, 0},
    {"repobench-p", "code", "code_sim", 0, 0},
};
#define N_LB_TASKS (int)(sizeof LB_TASKS / sizeof LB_TASKS[0])

typedef struct {
    char *input, *context;
    char **answers, **classes;
    int n_answers, n_classes;
    int row; /* 0-based line of the file: the stable part of the sample id */
} LbRecord;

typedef struct {
    const LbTask *task;
    DatasetOptions opt;
    char *context_prompt, *question_prompt;
    int max_new_tokens;
    LbRecord *records;
    int n_records, skipped;
    int *rows; /* records[rows[i]] is sample i */
    int n_rows;
    uint64_t file_hash, prompt_hash; /* the task file's bytes; the prompt halves and max new tokens */
} LbState;

static const LbTask *lb_find(const char *task) {
    for (int i = 0; i < N_LB_TASKS; i++)
        if (!strcmp(LB_TASKS[i].name, task)) return &LB_TASKS[i];
    return NULL;
}

static int lb_task_known(const char *task) { return lb_find(task) != NULL; }

/* ---------------------------------------------------------------- reading the file or the zip member */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

enum { ZIP_CHUNK = 1 << 16 };

static char *read_zip_member(const char *zip_path, const char *member, size_t *len, KvErr *err) {
    int code = 0;
    zip_t *za = zip_open(zip_path, ZIP_RDONLY, &code);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, code);
        kv_fail(err, "%s: cannot open as a zip archive: %s", zip_path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return NULL;
    }
    char *buf = NULL;
    zip_stat_t st;
    zip_int64_t idx = zip_name_locate(za, member, 0);
    if (idx < 0) {
        kv_fail(err, "%s: no member '%s' in the archive (LongBench's data.zip holds data/TASK.jsonl)", zip_path,
                member);
    } else if (zip_stat_index(za, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
        kv_fail(err, "%s: cannot read the size of member '%s'", zip_path, member);
    } else {
        /* Read in chunks into a buffer grown as the bytes arrive, never allocated at the size the archive claims:
         * a 1 KB archive can claim gigabytes, while what inflates from it is bounded by its real size. */
        zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
        size_t n = 0, cap = 0;
        zip_int64_t got = zf ? 1 : -1;
        while (got > 0 && n <= st.size) {
            if (cap - n < ZIP_CHUNK + 1) {
                cap = cap ? 2 * cap : 4 * ZIP_CHUNK;
                char *grown = realloc(buf, cap);
                if (!grown) {
                    got = -2;
                    break;
                }
                buf = grown;
            }
            got = zip_fread(zf, buf + n, ZIP_CHUNK);
            if (got > 0) n += (size_t)got;
        }
        if (zf) zip_fclose(zf);
        if (got == -2) {
            kv_fail(err, "%s: out of memory reading member '%s' (%zu bytes so far)", zip_path, member, n);
        } else if (got < 0 || n != st.size) {
            kv_fail(err, "%s: member '%s' is corrupt or truncated (%zu bytes read, %llu claimed)", zip_path, member,
                    n, (unsigned long long)st.size);
        } else {
            buf[n] = '\0';
            *len = n;
            zip_discard(za);
            return buf;
        }
        free(buf);
        buf = NULL;
    }
    zip_discard(za);
    return buf;
}

/* Reads TASK.jsonl from a directory (also DIR/data/TASK.jsonl) or a LongBench data.zip; *where names it. */
static char *read_task_file(const char *data_path, const char *task, size_t *len, char *where, size_t where_size,
                            KvErr *err) {
    struct stat st;
    if (!data_path || !*data_path)
        return kv_fail(err, "LongBench needs a data path: a directory of TASK.jsonl files or LongBench's data.zip"),
               NULL;
    if (stat(data_path, &st) != 0) return kv_fail(err, "%s: no such file or directory", data_path), NULL;
    if (S_ISDIR(st.st_mode)) {
        snprintf(where, where_size, "%s/%s.jsonl", data_path, task);
        if (stat(where, &st) != 0) {
            char nested[4096];
            snprintf(nested, sizeof nested, "%s/data/%s.jsonl", data_path, task);
            if (stat(nested, &st) == 0) snprintf(where, where_size, "%s", nested);
        }
        return kv_read_file(where, len, err);
    }
    if (!ends_with(data_path, ".zip"))
        return kv_fail(err, "%s: expected a directory of TASK.jsonl files or LongBench's data.zip", data_path), NULL;
    char member[256];
    snprintf(member, sizeof member, "data/%s.jsonl", task);
    snprintf(where, where_size, "%s:%s", data_path, member);
    return read_zip_member(data_path, member, len, err);
}

/* ---------------------------------------------------------------- parsing records */

static void record_free(LbRecord *r) {
    free(r->input);
    free(r->context);
    ds_strv_free(r->answers, r->n_answers);
    ds_strv_free(r->classes, r->n_classes);
}

/* A JSON array of strings (or null when allow_null) into a string vector. */
static int json_strings(const cJSON *arr, int allow_null, char ***out, int *n, const char *key, KvErr *err) {
    *out = NULL;
    *n = 0;
    if (allow_null && (!arr || cJSON_IsNull(arr))) return 0;
    if (!cJSON_IsArray(arr)) return kv_fail(err, "'%s' is not a list of strings", key);
    int count = cJSON_GetArraySize(arr);
    const char **v = kv_calloc((size_t)(count ? count : 1), sizeof *v, err);
    if (!v) return -1;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsString(it)) {
            free(v);
            return kv_fail(err, "'%s' item %d is not a string", key, i);
        }
        v[i++] = it->valuestring;
    }
    int rc = ds_strv_dup(out, v, count, err);
    free(v);
    if (rc == 0) *n = count;
    return rc;
}

static int parse_record(const char *line, size_t len, const char *task, LbRecord *r, KvErr *err) {
    memset(r, 0, sizeof *r);
    size_t bad;
    if (!ds_utf8_valid(line, len, &bad)) return kv_fail(err, "invalid UTF-8 at byte %zu of the line", bad);
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return kv_fail(err, "not a JSON object");
    }
    int rc = -1;
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *context = cJSON_GetObjectItemCaseSensitive(j, "context");
    const cJSON *dataset = cJSON_GetObjectItemCaseSensitive(j, "dataset");
    if (!cJSON_IsString(input) || !cJSON_IsString(context)) {
        kv_fail(err, "missing string field 'input' or 'context'");
    } else if (cJSON_IsString(dataset) && strcmp(dataset->valuestring, task) != 0) {
        kv_fail(err, "record of dataset '%s' in the %s file", dataset->valuestring, task);
    } else if (json_strings(cJSON_GetObjectItemCaseSensitive(j, "answers"), 0, &r->answers, &r->n_answers,
                            "answers", err) == 0 &&
               json_strings(cJSON_GetObjectItemCaseSensitive(j, "all_classes"), 1, &r->classes, &r->n_classes,
                            "all_classes", err) == 0) {
        if (r->n_answers == 0) kv_fail(err, "'answers' is empty");
        else if ((r->input = ds_strdup(input->valuestring, err)) && (r->context = ds_strdup(context->valuestring, err)))
            rc = 0;
    }
    cJSON_Delete(j);
    if (rc != 0) record_free(r);
    return rc;
}

static int load_records(LbState *st, const char *text, size_t len, const char *where, KvErr *err) {
    int cap = 0;
    int line_no = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        line_no++;
        if (n > 0 && line[n - 1] == '\r') n--;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == n) continue; /* blank lines are not records */
        if (st->n_records == cap) {
            cap = cap ? cap * 2 : 256;
            LbRecord *r = realloc(st->records, (size_t)cap * sizeof *r);
            if (!r) return kv_fail(err, "%s: out of memory at line %d", where, line_no);
            st->records = r;
        }
        LbRecord *rec = &st->records[st->n_records];
        KvErr why;
        if (parse_record(line, n, st->task->name, rec, &why) != 0) {
            if (!st->opt.skip_bad_lines)
                return kv_fail(err, "%s:%d: %s (skip_bad_lines skips malformed lines)", where, line_no, why.msg);
            st->skipped++;
            continue;
        }
        rec->row = line_no - 1;
        st->n_records++;
    }
    if (st->n_records == 0) return kv_fail(err, "%s: no records", where);
    return 0;
}

/* ---------------------------------------------------------------- configuration (prompt halves, max tokens) */

static int load_config(LbState *st, const char *assets, KvErr *err) {
    cJSON *split = ds_load_json(assets, "longbench/defensivekv_split_prompts.json", err);
    if (!split) return -1;
    cJSON *maxlen = ds_load_json(assets, "longbench/dataset2maxlen.json", err);
    int rc = -1;
    const char *name = st->task->name;
    const char *cp = maxlen ? ds_json_str(cJSON_GetObjectItemCaseSensitive(split, "context_prompt"), name,
                                          "defensivekv_split_prompts.json context_prompt", err)
                            : NULL;
    const char *qp = cp ? ds_json_str(cJSON_GetObjectItemCaseSensitive(split, "question_prompt"), name,
                                      "defensivekv_split_prompts.json question_prompt", err)
                        : NULL;
    const cJSON *mx = qp ? cJSON_GetObjectItemCaseSensitive(maxlen, name) : NULL;
    if (qp && !cJSON_IsNumber(mx)) {
        kv_fail(err, "dataset2maxlen.json: no max new tokens for '%s'", name);
    } else if (qp && (st->context_prompt = ds_strdup(cp, err)) && (st->question_prompt = ds_strdup(qp, err))) {
        st->max_new_tokens = mx->valueint;
        rc = 0;
    }
    cJSON_Delete(split);
    cJSON_Delete(maxlen);
    return rc;
}

/* ---------------------------------------------------------------- subsets */

/* ---------------------------------------------------------------- middle truncation */

typedef struct {
    const DatasetOptions *opt;
    const char *text;
    const size_t *cut; /* character boundaries of the context part: cut[0] = 0 ... cut[n_cut - 1] = its length */
    char *scratch;
} Truncation;

static int count_range(Truncation *t, size_t from, size_t to, int *n, KvErr *err) {
    memcpy(t->scratch, t->text + from, to - from);
    t->scratch[to - from] = '\0';
    return ds_count_tokens(t->opt, t->scratch, n, err);
}

/* Keeps the longest prefix and the shortest-start suffix of prompt = context + question that each have at
 * most limit/2 tokens, as LongBench's decode(first half) + decode(last half), with the cut inside the
 * context (the question stays whole). Character positions are bisected with the token counter alone. */
static int truncate_middle(const DatasetOptions *opt, char **context, const char *question, int limit,
                           char **note, KvErr *err) {
    size_t lc = strlen(*context), lq = strlen(question);
    int total, n_q, half = limit / 2, rc = -1;
    Truncation t = {opt, NULL, NULL, NULL};
    char *prompt = kv_malloc(lc + lq + 1, err);
    if (!prompt) return -1;
    memcpy(prompt, *context, lc);
    memcpy(prompt + lc, question, lq + 1);
    t.text = prompt;
    size_t *cut = NULL;
    if (ds_count_tokens(opt, prompt, &total, err) != 0) goto done;
    if (total <= limit) {
        rc = 0;
        goto done;
    }
    if (ds_count_tokens(opt, question, &n_q, err) != 0) goto done;
    if (n_q > half) {
        kv_fail(err, "the question alone has %d tokens, more than half of the truncation limit %d", n_q, limit);
        goto done;
    }
    if (!(cut = kv_malloc((lc + 1) * sizeof *cut, err)) || !(t.scratch = kv_malloc(lc + lq + 1, err))) goto done;
    int n_cut = 0;
    for (size_t i = 0; i <= lc; i++)
        if (i == lc || ((unsigned char)prompt[i] & 0xC0) != 0x80) cut[n_cut++] = i;
    t.cut = cut;
    int lo = 0, hi = n_cut, n; /* prefix: cut[lo] fits, cut[hi] does not */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (count_range(&t, 0, cut[mid], &n, err) != 0) goto done;
        if (n <= half) lo = mid;
        else hi = mid;
    }
    int keep_head = lo;
    lo = keep_head - 1, hi = n_cut - 1; /* suffix start: cut[hi] fits, cut[lo] does not */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (count_range(&t, cut[mid], lc + lq, &n, err) != 0) goto done;
        if (n <= half) hi = mid;
        else lo = mid;
    }
    StrBuf b = {0};
    sb_add(&b, prompt, cut[keep_head]);
    sb_add(&b, prompt + cut[hi], lc - cut[hi]);
    char *shorter = sb_finish(&b, err);
    if (!shorter) goto done;
    free(*context);
    *context = shorter;
    b = (StrBuf){0};
    sb_addf(&b, "middle-truncated from %d to at most %d tokens", total, limit);
    if ((*note = sb_finish(&b, err))) rc = 0;
done:
    free(prompt);
    free(cut);
    free(t.scratch);
    return rc;
}

/* ---------------------------------------------------------------- the suite */

static void lb_close(void *state) {
    LbState *st = state;
    if (!st) return;
    for (int i = 0; i < st->n_records; i++) record_free(&st->records[i]);
    free(st->records);
    free(st->rows);
    free(st->context_prompt);
    free(st->question_prompt);
    free(st);
}

static int lb_open(void **state, const char *task, const DatasetOptions *opt, KvErr *err) {
    LbState *st = kv_calloc(1, sizeof *st, err);
    if (!st) return -1;
    st->task = lb_find(task);
    st->opt = *opt;
    char where[4096];
    size_t len = 0;
    char *text = NULL;
    if (opt->target_tokens > 0 && !opt->count_tokens) {
        kv_fail(err, "middle truncation to %d tokens needs a token counter", opt->target_tokens);
    } else if (load_config(st, ds_assets_dir(opt), err) == 0 &&
               (text = read_task_file(opt->data_path, task, &len, where, sizeof where, err)) &&
               load_records(st, text, len, where, err) == 0 &&
               ds_subset_rows(st->n_records, opt, &st->rows, &st->n_rows, err) == 0) {
        /* The bytes, not the path: the same file in a directory or inside data.zip is the same data. */
        st->file_hash = ds_hash(DS_HASH_INIT, text, len);
        st->prompt_hash = ds_hash(ds_hash_str(ds_hash_str(DS_HASH_INIT, st->context_prompt), st->question_prompt),
                                  &st->max_new_tokens, sizeof st->max_new_tokens);
        free(text);
        *state = st;
        return 0;
    }
    free(text);
    lb_close(st);
    return -1;
}

static int lb_count(const void *state) { return ((const LbState *)state)->n_rows; }
static int lb_skipped(const void *state) { return ((const LbState *)state)->skipped; }

static int lb_get(void *state, int index, Sample *s, KvErr *err) {
    LbState *st = state;
    const LbRecord *r = &st->records[st->rows[index]];
    const char *ctx_name[] = {"context"}, *in_name[] = {"input"};
    const char *ctx_val[] = {r->context}, *in_val[] = {r->input};
    if (!(s->suite = ds_strdup("longbench", err)) ||
        !(s->task = ds_strdup(st->task->name, err)) ||
        !(s->context = ds_fill(st->context_prompt, 1, ctx_name, ctx_val, err)) ||
        !(s->question = ds_fill(st->question_prompt, 1, in_name, in_val, err)) ||
        !(s->answer_prefix = ds_strdup("", err)) || !(s->metric = ds_strdup(st->task->metric, err)) ||
        !(s->domain = ds_strdup(st->task->domain, err)) ||
        ds_strv_dup(&s->answers, (const char *const *)r->answers, r->n_answers, err) != 0 ||
        ds_strv_dup(&s->all_classes, (const char *const *)r->classes, r->n_classes, err) != 0)
        return -1;
    s->n_answers = r->n_answers;
    s->n_classes = r->n_classes;
    if (st->task->stop_on_newline && !(s->stop_on_newline = ds_strdup("\n", err))) return -1;
    s->index = index;
    s->max_new_tokens = st->max_new_tokens;
    s->use_chat = st->task->use_chat;
    s->add_bos = 0; /* chat templates carry their own BOS; the raw tasks get none (bos_token = "") */
    s->depth_percent = -1;
    if (st->opt.target_tokens > 0 &&
        truncate_middle(&st->opt, &s->context, s->question, st->opt.target_tokens, &s->note, err) != 0)
        return -1;
    return 0;
}

static void lb_sample_id(const void *state, int index, char *out, size_t size) {
    const LbState *st = state;
    snprintf(out, size, "longbench:%s:%d", st->task->name, st->records[st->rows[index]].row);
}

static void lb_identity(const void *state, char *out, size_t size) {
    const LbState *st = state;
    snprintf(out, size, "file=%016llx,prompt=%016llx", (unsigned long long)st->file_hash,
             (unsigned long long)st->prompt_hash);
}

static void lb_print_list(FILE *f) {
    KvErr err;
    cJSON *maxlen = ds_load_json(ds_assets_dir(NULL), "longbench/dataset2maxlen.json", &err);
    for (int i = 0; i < N_LB_TASKS; i++) {
        const LbTask *t = &LB_TASKS[i];
        const cJSON *mx = maxlen ? cJSON_GetObjectItemCaseSensitive(maxlen, t->name) : NULL;
        char spec[64];
        snprintf(spec, sizeof spec, "longbench:%s", t->name);
        fprintf(f, "%-34s %-18s %-20s %d%s\n", spec, t->metric, t->domain, cJSON_IsNumber(mx) ? mx->valueint : -1,
                t->use_chat ? "" : "  (no chat template, no BOS)");
    }
    if (!maxlen) fprintf(f, "(max new tokens unknown: %s)\n", err.msg);
    cJSON_Delete(maxlen);
}

const SuiteOps LONGBENCH_SUITE = {"longbench", lb_open, lb_count, lb_get, lb_sample_id, lb_identity, lb_skipped,
                                  lb_close, lb_task_known, lb_print_list};

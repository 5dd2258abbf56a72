/* sweep.c — the runner behind `kvbench run`: plan, then per sample one prefill, every keep-set, batched decodes
 * within the memory (runs/memplan.h), scores, and one database transaction.
 *
 * Why the shape (docs/DESIGN.md §1): every policy compresses after each layer's full attention over the context,
 * so the prefill does not depend on the policy. The prefill runs once (runs/prepare.c, shared with `kvbench
 * trace`) with every policy state observing each layer; each state then selects a keep-set per budget; each
 * keep-set becomes a cache of its own (a view that reads the kept rows in the prefill cache, so the variants
 * hold no copies of the context; on the GPU a gathered copy where copies need no more batches); and the
 * variants decode in as few batches as fit the memory beside the prefill's cache, each batch reading the
 * weights once per step. The `full` variant decodes on the prefill cache itself (allocated with room for the
 * question and answer), so it costs no copy; its batch is the last, since it appends to that cache. The rows
 * are the same in any number of batches (a sequence's arithmetic does not depend on its batch). For the same
 * reason several samples may decode as one batch (decode_samples > 1, the decode pool): each sample whose variants
 * fit in one batch is prepared and held, its claim kept, until the pool is full, the next sample does not fit
 * beside it, or the plan's pass ends; then all of them decode together (each feeding its own question), and each
 * sample's rows are stored as if it had decoded alone.
 *
 * Resume: the plan is built from the database (rows already there are skipped, failed rows are retried), and a
 * sample's rows are written in one transaction, so after a kill — even kill -9 — the rerun redoes at most the
 * sample in flight. A row is only ever resumed under the identity that made it: the model's (weights and
 * tokenizer, util_model_identity) and each task's data (dataset_identity); a database holding rows of the same
 * model name or task made from other inputs is refused before any work, naming the change (configs/README.md
 * "Resume"). The database file is created only when the first sample is about to be written (or at the end of
 * a run with nothing to do), so a run that stops before its first sample leaves none behind. */
#include "sweep.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../datasets/dataset.h"
#include "../engine/backend.h"
#include "../engine/generate.h"
#include "../engine/model.h"
#include "../engine/tokenizer.h"
#include "../metrics/metrics.h"
#include "../store/claims.h"
#include "estimate.h"
#include "memplan.h"
#include "prepare.h"
#include "../store/protected.h"
#include "../store/store.h"
#include "trace.h"
#include "util.h"

/* ---------------------------------------------------------------- state of one model's sweep */

typedef struct {
    const RunConfig *cfg;
    const SweepOptions *opt;
    const RunModel *rm;
    Model *model;
    Tokenizer *tok;        /* the model's, or own_tok */
    Tokenizer *own_tok;    /* loaded from the config's "tokenizer" */
    Backend *be;
    Store *store;          /* NULL until the database exists (it is created for the first sample claimed) */
    Claimant me;           /* this process, as its claims name it (store/claims.h) */
    ClaimsHeartbeat *heartbeat; /* renews this run's claims while it lives; NULL until the first claim */
    long long run_id;
    char model_id[256];    /* util_model_identity of the current model */
    char log_name[256];    /* the current model's name as the log prints it (util_escape_text: a newline in it
                            * cannot start a line of its own) */
    char (*setups)[96];    /* [n_datasets] what else changes predictions: compress_question, max_new_tokens cap
                            * (traces: the steps), and the dataset's chat_template where it overrides the suite */
    char (*row_setups)[160]; /* [n_datasets] the current model's rows: its dataset's setup, the options its backend
                              * reports it computed with where they change bits, and its decode rule */
    StoreVariantKey *keys; /* [n_variants] */
    DuoPattern duo;        /* the model's DuoAttention pattern, when the config runs duoattention */
    int duo_na;            /* the model's "duo_attention_patterns" is "none": its duoattention cells are skipped */
    SweepStats *stats;
    double started_ms;
    double memory_limit;   /* bytes for the prefill's cache and the variants (--memory-limit, else the config's
                            * "memory_limit"); 0: none beyond the device's own */
    int decode_samples;    /* most samples decoded together (SweepOptions.decode_samples); 1: each alone */
    struct SampleJob **pool; /* [decode_samples] the decode pool: prepared samples waiting to decode together */
    int n_pool;
    double pool_need;      /* bytes the pooled samples' variants will take while they decode */
    double pool_prefill;   /* bytes of the pooled samples' prefill caches */
    int pool_seqs;         /* their variants (sequences of the joint batch; at most Backend.max_seqs) */
} Sweep;

typedef struct {
    int dataset, task, index;
    char *key;              /* the sample's database key (sample_key) */
    unsigned char *pending; /* [n_variants]: 1 = still to run */
} PlanItem;

typedef struct {
    Dataset **open;         /* [sum of tasks] */
    char (*specs)[256];     /* [sum of tasks] "suite:task", alive as long as the datasets (which may borrow it) */
    char (*labels)[128];    /* [sum of tasks] the task as samples name it (RULER: "qa_1_substitute" without data) */
    char (*data_ids)[256];  /* [sum of tasks] dataset_identity */
    int *first;             /* [n_datasets] index of a dataset's first task in open */
    PlanItem *items;
    int n_items;
} Plan;

static int count_tokens(void *user, const char *text, int *n_tokens, KvErr *err) {
    TokenIds ids = {0};
    int rc = tokenizer_encode(user, text, strlen(text), 0, &ids, err);
    *n_tokens = ids.n;
    ids_free(&ids);
    return rc;
}

/* The database key of a sample: its dataset id, plus the configured target length where one is set (RULER ids
 * do not carry it, and a 4k and an 8k run of one task must not share rows). */
static void sample_key(const char *id, const RunDataset *rd, char *out, size_t n) {
    if (rd->target_tokens > 0) snprintf(out, n, "%s@%d", id, rd->target_tokens);
    else snprintf(out, n, "%s", id);
}

int sweep_parse_shard(const char *text, int *index, int *count, KvErr *err) {
    char *end;
    errno = 0;
    long i = strtol(text, &end, 10);
    if (end == text || *end != '/' || errno) return kv_fail(err, "--shard '%s': expected i/N, e.g. 0/4", text);
    const char *rest = end + 1;
    long n = strtol(rest, &end, 10);
    if (end == rest || *end || errno || n < 1 || n > 1000000 || i < 0 || i >= n)
        return kv_fail(err, "--shard '%s': expected i/N with 0 <= i < N", text);
    *index = (int)i;
    *count = (int)n;
    return 0;
}

/* ---------------------------------------------------------------- plan */

static void plan_free(Plan *p, const RunConfig *cfg) {
    int total = 0;
    for (int d = 0; d < cfg->n_datasets; d++) total += cfg->datasets[d].n_tasks;
    for (int i = 0; p->open && i < total; i++) dataset_close(p->open[i]);
    for (int i = 0; i < p->n_items; i++) {
        free(p->items[i].pending);
        free(p->items[i].key);
    }
    free(p->open);
    free(p->specs);
    free(p->labels);
    free(p->data_ids);
    free(p->first);
    free(p->items);
    memset(p, 0, sizeof *p);
}

static int plan_add(Plan *p, int *cap, int d, int t, int index, const char *key, const unsigned char *pending, int n,
                    KvErr *err) {
    if (p->n_items == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        PlanItem *grown = realloc(p->items, (size_t)*cap * sizeof *grown);
        if (!grown) return kv_fail(err, "out of memory planning the sweep");
        p->items = grown;
    }
    PlanItem *it = &p->items[p->n_items];
    it->key = NULL;
    if (!(it->pending = kv_malloc((size_t)n, err))) return -1;
    if (!(it->key = strdup(key))) {
        free(it->pending);
        return kv_fail(err, "out of memory planning the sweep");
    }
    memcpy(it->pending, pending, (size_t)n);
    it->dataset = d;
    it->task = t;
    it->index = index;
    p->n_items++;
    return 0;
}

/* The task field of a sample id "suite:task:rest" into out (fallback when the id has no such field). */
static void id_task(const char *id, const char *fallback, char *out, size_t n) {
    const char *a = strchr(id, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (b) snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
    else snprintf(out, n, "%s", fallback);
}

/* Refuses a task whose rows in the database were made from other data, or which an earlier entry of the config
 * runs from other data under the same setup (their rows would share keys): fail before work. */
static int check_task_identity(const Sweep *sw, const Plan *p, int d, int k, KvErr *err) {
    const RunDataset *rd = &sw->cfg->datasets[d];
    char stored[256], change[600];
    for (int e = 0; e < d; e++)
        for (int j = p->first[e]; j < p->first[e] + sw->cfg->datasets[e].n_tasks; j++)
            if (!strcmp(sw->row_setups[e], sw->row_setups[d]) && !strcmp(p->specs[j], p->specs[k]) &&
                !strcmp(p->labels[j], p->labels[k]) && strcmp(p->data_ids[j], p->data_ids[k])) {
                store_identity_change(p->data_ids[j], p->data_ids[k], change, sizeof change);
                return kv_fail(err, "%s: datasets[%d] and datasets[%d] both run %s from other data (%s): their rows "
                                    "would share keys; put them in two configs with two databases",
                               sw->cfg->file, e, d, p->specs[k], change);
            }
    if (!sw->store) return 0;
    if (store_check_data(sw->store, sw->rm->name, sw->row_setups[d], rd->suite, p->labels[k], p->data_ids[k], stored,
                         sizeof stored, err))
        return -1;
    if (!stored[0]) return 0;
    store_identity_change(stored, p->data_ids[k], change, sizeof change);
    return kv_fail(err, "%s: datasets[%d] %s: %s holds rows of this task for model '%s' made from other data (%s); "
                        "rows of different inputs are never mixed: use a new --db, or the settings that made them",
                   sw->cfg->file, d, p->specs[k], sw->opt->db_path, sw->rm->name, change);
}

/* Opens every task and lists the samples of this shard (and --limit) that still miss a row (or have a failed
 * one). */
static int plan_build(Sweep *sw, Plan *p, KvErr *err) {
    const RunConfig *cfg = sw->cfg;
    int total = 0, cap = 0, nv = cfg->n_variants;
    memset(p, 0, sizeof *p);
    for (int d = 0; d < cfg->n_datasets; d++) total += cfg->datasets[d].n_tasks;
    unsigned char *done = kv_malloc((size_t)nv, err);
    p->open = kv_calloc((size_t)total, sizeof *p->open, err);
    p->specs = kv_calloc((size_t)total, sizeof *p->specs, err);
    p->labels = kv_calloc((size_t)total, sizeof *p->labels, err);
    p->data_ids = kv_calloc((size_t)total, sizeof *p->data_ids, err);
    p->first = kv_calloc((size_t)cfg->n_datasets, sizeof *p->first, err);
    if (!done || !p->open || !p->specs || !p->labels || !p->data_ids || !p->first) goto fail;
    for (int d = 0, k = 0; d < cfg->n_datasets; d++) {
        const RunDataset *rd = &cfg->datasets[d];
        p->first[d] = k;
        DatasetOptions o = {rd->data_path, sw->opt->assets_dir, rd->fraction, rd->first_n, rd->seed, rd->target_tokens,
                            rd->n_samples, rd->depths, rd->n_depths, rd->lengths, rd->n_lengths,
                            rd->skip_bad_lines, rd->ruler_unit_sizing, count_tokens, sw->tok};
        for (int t = 0; t < rd->n_tasks; t++, k++) {
            char *spec = p->specs[k], key[600];
            snprintf(spec, sizeof p->specs[k], "%s:%s", rd->suite, rd->tasks[t]);
            if (dataset_open(&p->open[k], spec, &o, err)) {
                kv_wrap(err, "%s: datasets[%d]", cfg->file, d);
                goto fail;
            }
            int n = dataset_count(p->open[k]);
            char first_id[512] = "";
            if (n > 0 && dataset_sample_id(p->open[k], 0, first_id, sizeof first_id, err)) goto fail;
            id_task(first_id, rd->tasks[t], p->labels[k], sizeof p->labels[k]);
            dataset_identity(p->open[k], p->data_ids[k], sizeof p->data_ids[k]);
            if (check_task_identity(sw, p, d, k, err)) goto fail;
            if (sw->opt->limit && sw->opt->limit < n) n = sw->opt->limit;
            for (int i = 0; i < n; i++) {
                char id[512];
                if (dataset_sample_id(p->open[k], i, id, sizeof id, err)) {
                    kv_wrap(err, "%s sample %d", spec, i);
                    goto fail;
                }
                sample_key(id, rd, key, sizeof key);
                if (sw->opt->shard_count > 1 &&
                    util_hash64(key) % (unsigned long long)sw->opt->shard_count != (unsigned long long)sw->opt->shard_index)
                    continue;
                if (!sw->store) memset(done, 0, (size_t)nv);
                else if ((sw->opt->trace ? store_traced : store_finished)(sw->store, sw->rm->name, sw->row_setups[d],
                                                                          key, sw->keys, nv, done, err))
                    goto fail;
                int missing = 0;
                for (int v = 0; v < nv; v++) {
                    done[v] = !done[v] && !(sw->duo_na && policy_needs_duo_pattern(&cfg->variants[v].policy));
                    missing |= done[v];
                }
                if (missing && plan_add(p, &cap, d, k, i, key, done, nv, err)) goto fail;
            }
        }
    }
    free(done);
    return 0;
fail:
    free(done);
    plan_free(p, cfg);
    return -1;
}

/* ---------------------------------------------------------------- one sample */

typedef struct {
    const RunVariant *v;
    KeepSet keep;       /* its keep-set, until its cache is made */
    int batch;          /* its decode batch (runs/memplan.h) */
    KvCache *cache;     /* its compressed cache; the prefill's own cache for full */
    TokenIds out;
    char *prediction;
    double score, select_ms, kept;
    double kept_fraction; /* kept / context length: the effective budget (DuoAttention's is not the nominal one) */
    int budget_tokens;
    int *protected_counts; /* [N][K] then [N][K] kept: the value-weighted policies' protected entries
                            * (store/protected.h); NULL for the others */
    int failed;
    KvErr err;
} VariantRun;

static void fail_all(VariantRun *runs, int n, const KvErr *err) {
    for (int i = 0; i < n; i++)
        if (!runs[i].failed) {
            runs[i].failed = 1;
            runs[i].err = *err;
        }
}

/* What variant i's allocation protects in its keep-set (store/protected.h), for a value-weighted policy scored
 * on the host (the device keeps no host state to count from: a prefill scored there stores no counts). */
static int variant_protected(const Prefill *pf, int i, const Budget *b, VariantRun *r, int n_heads) {
    if (pf->on_device) return 0;
    if (!(r->protected_counts = kv_malloc(2 * sizeof(int) * (size_t)n_heads, &r->err))) return -1;
    int rc = policy_protected_kept(pf->slots[pf->slot_of[i]].state, b, &r->keep, r->protected_counts, &r->err);
    if (rc == 0) memcpy(r->protected_counts + n_heads, r->keep.counts, sizeof(int) * (size_t)n_heads);
    if (rc != 0) {
        free(r->protected_counts);
        r->protected_counts = NULL;
    }
    return rc < 0 ? -1 : 0;
}

/* What one sample's run reports besides its variants' rows. */
typedef struct {
    double prefill_ms, decode_ms;
    double reconstruction_ms, reconstruction_cpu_ms; /* KVzip's pass (Prefill), in its rows' select_ms too */
    int context_tokens, question_tokens;
    int over_length; /* context + question + the new tokens exceed the model's max context */
    int n_batches;   /* decode batches (runs/memplan.h) */
    int joint_samples; /* samples its one batch decoded with, itself included (the decode pool); 1: alone */
} SampleOutcome;

/* One sample's state between its steps (SampleJob). */
typedef struct {
    TokenIds ctx, q, stops;
    ChatFormat chat;    /* what the context was rendered in (a reconstruction pass frames its inputs so) */
    int max_new;
    Prefill pf;
    int has_prefill;
    int n_ok;           /* variants with a keep-set or the prefill's cache, listed in idx */
    int full;           /* the full variant's place in idx; -1 when none */
    int *idx;           /* [n] */
    int *batch_of;      /* [n] each listed variant's decode batch */
    double *need;       /* [2n]: view bytes, then copy bytes, of the variants listed in idx */
    int use_views;      /* the variants decode on views of the prefill's cache, not on gathered copies */
    double budget;      /* bytes for the variants beside the prefill's cache */
    double device_free; /* the backend's free memory less its reserve (INFINITY: host memory) */
} SampleState;

/* What the prepare steps read of the sweep; chat frames a reconstruction pass (CHAT_NONE until the sample's tokens
 * are made, prepare_chat_format). */
static PrepareEnv sweep_env(const Sweep *sw, ChatFormat chat) {
    return (PrepareEnv){.model = sw->model, .tok = sw->tok, .be = sw->be,
                        .compress_question = sw->cfg->compress_question,
                        .duo_pattern = sw->duo.score ? &sw->duo : NULL, .chat = chat};
}

/* The sample's tokens and stop ids, and the refusals that need no prefill: over the model's context (with
 * "over_length": "error"), an empty context or question, a prefill cache past the memory limit. */
static int sample_tokens(Sweep *sw, const Sample *s, SampleState *st, SampleOutcome *o, KvErr *err) {
    const Model *m = sw->model;
    PrepareEnv env = sweep_env(sw, CHAT_NONE);
    if (prepare_tokens(&env, s, &st->ctx, &st->q, err) || prepare_stop_ids(&env, s, &st->stops, err)) return -1;
    st->chat = prepare_chat_format(&env, s);
    const int n_ctx = st->ctx.n, n_q = st->q.n;
    o->context_tokens = n_ctx;
    o->question_tokens = n_q;
    st->max_new = s->max_new_tokens;
    if (sw->cfg->max_new_tokens > 0 && sw->cfg->max_new_tokens < st->max_new) st->max_new = sw->cfg->max_new_tokens;
    o->over_length = m->cfg.max_context > 0 && n_ctx + n_q + st->max_new > m->cfg.max_context;
    if (o->over_length && sw->cfg->over_length_error)
        return kv_fail(err, "context %d + question %d + %d new tokens exceed the model's max context of %d tokens",
                       n_ctx, n_q, st->max_new, m->cfg.max_context);
    if (n_ctx < 1 || n_q < 1) return kv_fail(err, "empty %s after tokenization", n_ctx < 1 ? "context" : "question");
    /* A prefill whose cache alone exceeds the memory limit is not computed: its K and V rows of the context take at
     * least 2 bytes an element (estimate_kv_bytes_per_token); the exact size is checked again after it. */
    if (sw->memory_limit > 0 && estimate_kv_bytes_per_token(&m->cfg) * n_ctx > sw->memory_limit) {
        char least[32], limit[32];
        util_format_bytes(estimate_kv_bytes_per_token(&m->cfg) * n_ctx, least, sizeof least);
        util_format_bytes(sw->memory_limit, limit, sizeof limit);
        return kv_fail(err, "out of memory: the prefill's cache of at least %s alone exceeds the memory limit of %s",
                       least, limit);
    }
    return 0;
}

/* One observed prefill for every variant; the full variant decodes on its cache, so that gets room for question
 * and answer. */
static int sample_prefill(Sweep *sw, SampleState *st, VariantRun *runs, int n, SampleOutcome *o, KvErr *err) {
    PrepareEnv env = sweep_env(sw, st->chat);
    const PolicyConfig **policies = kv_calloc((size_t)n, sizeof *policies, err);
    if (!policies) return -1;
    int has_full = 0;
    for (int i = 0; i < n; i++) {
        policies[i] = &runs[i].v->policy;
        has_full |= policy_keeps_all(policies[i]);
    }
    int rc = prefill_run(&st->pf, &env, &st->ctx, policies, n, has_full ? st->q.n + st->max_new : 0, err);
    free(policies);
    if (rc) return -1;
    st->has_prefill = 1;
    o->prefill_ms = st->pf.prefill_ms;
    o->reconstruction_ms = st->pf.reconstruction_ms;
    o->reconstruction_cpu_ms = st->pf.reconstruction_cpu_ms;
    for (int k = 0; k < st->pf.n_slots; k++) sw->stats->select_ms += st->pf.slots[k].ms;
    return 0;
}

/* Each variant's keep-set, and what it needs while it decodes; a variant whose selection fails fails alone. */
static int sample_keep_sets(Sweep *sw, SampleState *st, VariantRun *runs, int n, KvErr *err) {
    const int NK = sw->model->cfg.n_layers * sw->model->cfg.n_kv_heads, room = st->q.n + st->max_new;
    Prefill *pf = &st->pf;
    if (!(st->need = kv_calloc(2 * (size_t)n, sizeof *st->need, err)) ||
        !(st->batch_of = kv_calloc((size_t)n, sizeof *st->batch_of, err)) ||
        !(st->idx = kv_calloc((size_t)n, sizeof *st->idx, err)))
        return -1;
    st->n_ok = 0;
    st->full = -1;
    for (int i = 0; i < n; i++) {
        VariantRun *r = &runs[i];
        if (pf->slot_of[i] < 0) { /* full decodes on the prefill's cache, which holds its room */
            r->cache = pf->cache;
            r->kept = r->budget_tokens = st->ctx.n;
            r->kept_fraction = 1;
            st->full = st->n_ok;
            st->need[st->n_ok] = st->need[n + st->n_ok] = 0;
            st->idx[st->n_ok++] = i;
            continue;
        }
        double t = util_now_ms();
        const Budget *b = &r->v->budget;
        r->budget_tokens = policy_budget_tokens(&r->v->policy, b, st->ctx.n);
        if (prefill_select(pf, i, b, &r->keep, &r->err) || variant_protected(pf, i, b, r, NK)) {
            r->failed = 1;
        } else {
            r->kept = (double)r->keep.total / NK;
            r->kept_fraction = r->kept / st->ctx.n;
            st->need[st->n_ok] = sw->be->variant_bytes(sw->be, pf->cache, &r->keep, room, 1);
            st->need[n + st->n_ok] = sw->be->variant_bytes(sw->be, pf->cache, &r->keep, room, 0);
            st->idx[st->n_ok++] = i;
        }
        double selected = util_now_ms() - t;
        r->select_ms = prefill_observe_ms(pf, i) + selected;
        sw->stats->select_ms += selected;
    }
    return 0;
}

/* The plan: views of the prefill (or copies) in as few decode batches as fit the memory left beside its cache and
 * beside what the decode pool holds (reserved_device: the pooled samples' variants, not made yet, out of the
 * device's free memory; reserved_limit: their prefills' caches and their variants, out of the memory limit). Fills
 * st->batch_of, use_views and budget, the full variant's batch last; *n_unfit: the variants that fit in none.
 * Returns the batches, -1 when out of memory. */
static int sample_plan(Sweep *sw, SampleState *st, int n, double reserved_device, double reserved_limit, int *n_unfit,
                       KvErr *err) {
    const double prefill_bytes = (double)st->pf.cache->arena_bytes;
    st->device_free = INFINITY;
    if (sw->be->memory_free && sw->be->memory_free(sw->be, &st->device_free, err)) return -1;
    st->budget = st->device_free - reserved_device;
    if (sw->memory_limit > 0 && sw->memory_limit - prefill_bytes - reserved_limit < st->budget)
        st->budget = sw->memory_limit - prefill_bytes - reserved_limit;
    int nb = memplan_choose(sw->be->cache_view ? st->need : NULL, st->need + n, st->n_ok, st->budget,
                            sw->be->views_fast, st->batch_of, &st->use_views, err);
    if (nb < 0) return -1;
    /* The full variant appends its question and answer to the prefill's cache, whose n_pos the other variants'
     * caches take when they are made: its batch decodes last. */
    int *batch_of = st->batch_of;
    if (st->full >= 0 && batch_of[st->full] >= 0 && batch_of[st->full] != nb - 1) {
        int a = batch_of[st->full];
        for (int j = 0; j < st->n_ok; j++)
            batch_of[j] = batch_of[j] == a ? nb - 1 : batch_of[j] == nb - 1 ? a : batch_of[j];
    }
    *n_unfit = 0;
    for (int j = 0; j < st->n_ok; j++) *n_unfit += batch_of[j] < 0;
    return nb;
}

/* Bytes the planned variants take while they decode (what a pooled sample reserves). */
static double sample_need(const SampleState *st, int n) {
    double need = 0;
    for (int j = 0; j < st->n_ok; j++)
        if (st->batch_of[j] >= 0) need += st->need[(st->use_views ? 0 : n) + j];
    return need;
}

/* Gives each variant its batch of the plan; a variant that fits in none fails alone, saying what it needed and
 * what was free. */
static void sample_plan_apply(Sweep *sw, SampleState *st, VariantRun *runs, int n, int nb, SampleOutcome *o) {
    const double prefill_bytes = (double)st->pf.cache->arena_bytes;
    for (int j = 0; j < st->n_ok; j++) {
        VariantRun *r = &runs[st->idx[j]];
        r->batch = st->batch_of[j];
        if (r->batch >= 0) continue;
        r->failed = 1;
        char prefill[32], limit[32], needed[32], left[32];
        util_format_bytes(prefill_bytes, prefill, sizeof prefill);
        util_format_bytes(sw->memory_limit, limit, sizeof limit);
        util_format_bytes(st->need[(st->use_views ? 0 : n) + j], needed, sizeof needed);
        util_format_bytes(st->budget, left, sizeof left);
        if (st->budget < 0)
            kv_fail(&r->err, "out of memory: the prefill's cache of %s alone exceeds the memory limit of %s", prefill,
                    limit);
        else
            kv_fail(&r->err, "out of memory: this variant's %s and decode need %s, %s are free for the variants beside "
                             "the prefill's cache of %s (%s)", st->use_views ? "view" : "gathered copy", needed, left,
                    prefill,
                    st->budget < st->device_free ? "the memory limit" : "the device's free memory less its reserve");
    }
    o->n_batches = nb;
}

/* What the steps leave, whichever step stopped: the variants' caches and keep-sets, the prefill, the buffers. */
static void sample_state_free(Sweep *sw, SampleState *st, VariantRun *runs, int n) {
    for (int i = 0; i < n; i++) {
        if (runs[i].cache && (!st->has_prefill || runs[i].cache != st->pf.cache))
            sw->be->cache_free(sw->be, runs[i].cache);
        runs[i].cache = NULL;
        keepset_free(&runs[i].keep);
    }
    if (st->has_prefill) prefill_free(&st->pf);
    st->has_prefill = 0;
    free(st->batch_of);
    free(st->need);
    free(st->idx);
    ids_free(&st->ctx);
    ids_free(&st->q);
    ids_free(&st->stops);
    *st = (SampleState){.full = -1};
}

static char *answers_json(const Sample *s) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < s->n_answers; i++) cJSON_AddItemToArray(a, cJSON_CreateString(s->answers[i]));
    char *text = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return text;
}

/* Builds the sample of a plan item, with the dataset's chat_template applied, and its database key; returns
 * whether it was built (if not, serr says why and there is nothing to free). */
static int item_sample(Plan *p, const PlanItem *it, const RunDataset *rd, const char *task, Sample *s, char *key,
                       size_t key_n, KvErr *serr) {
    char id[512];
    KvErr ignored;
    int built = dataset_get(p->open[it->task], it->index, s, serr) == 0;
    if (built && rd->chat != RUN_CHAT_SUITE) s->use_chat = rd->chat == RUN_CHAT_ON;
    if (built) snprintf(id, sizeof id, "%s", s->id);
    else if (dataset_sample_id(p->open[it->task], it->index, id, sizeof id, &ignored))
        snprintf(id, sizeof id, "%s:%s:%d", rd->suite, task, it->index);
    sample_key(id, rd, key, key_n);
    return built;
}

/* The samples row of an item (s NULL when the dataset could not build it). */
static StoreSample sample_row(const Sweep *sw, const Plan *p, const PlanItem *it, const RunDataset *rd,
                              const Sample *s, const char *key, int n_ctx, int n_q, const char *answers) {
    StoreSample ss = {sw->rm->name, sw->row_setups[it->dataset], key, s ? s->suite : rd->suite,
                      s ? s->task : p->labels[it->task], s ? s->domain : NULL, s ? s->metric : NULL, it->index,
                      s ? s->depth_percent : -1, s ? s->target_tokens : rd->target_tokens, n_ctx, n_q,
                      answers ? answers : "[]", s ? s->note : NULL, sw->model_id, p->data_ids[it->task], 0};
    return ss;
}

/* The database, created (with its directory) for the first sample claimed, and the heartbeat of this run's claims. */
static int open_store(Sweep *sw, KvErr *err) {
    if (!sw->store &&
        (util_make_parent_dirs(sw->opt->db_path, err) || store_open(&sw->store, sw->opt->db_path, 0, err)))
        return -1;
    return sw->heartbeat ? 0 : claims_heartbeat_start(&sw->heartbeat, sw->opt->db_path, &sw->me, err);
}

/* This model's run row, for the first sample written. */
static int begin_run(Sweep *sw, KvErr *err) {
    char rev[64], host[256] = "unknown", hash[32], shard[32];
    if (sw->run_id) return 0;
    if (open_store(sw, err)) return -1;
    util_git_revision(rev, sizeof rev);
    gethostname(host, sizeof host - 1);
    snprintf(hash, sizeof hash, "%016llx", util_hash64(sw->cfg->text));
    snprintf(shard, sizeof shard, "%d/%d", sw->opt->shard_index, sw->opt->shard_count);
    const char *tokenizer = sw->rm->tokenizer ? sw->rm->tokenizer : sw->model->tokenizer_kind;
    StoreRun r = {sw->cfg->name, sw->cfg->text, hash, rev, sw->rm->name, sw->rm->path, sw->model_id, tokenizer,
                  sw->rm->backend, host, sw->opt->shard_count > 1 ? shard : NULL, sw->opt->limit};
    return store_begin_run(sw->store, &r, &sw->run_id, err);
}


/* Traces one planned sample (kvbench trace, runs/trace.h) and stores its rows; -1 only when the database write
 * failed. A variant without a trace (its keep-set failed) is logged and gets no rows, so a rerun retries it. */
static int trace_item(Sweep *sw, Plan *p, const PlanItem *it, KvErr *err) {
    const RunConfig *cfg = sw->cfg;
    const RunDataset *rd = &cfg->datasets[it->dataset];
    const char *task = rd->tasks[it->task - p->first[it->dataset]];
    /* trace_sample sets the chat format from the sample */
    PrepareEnv env = sweep_env(sw, CHAT_NONE);
    Sample s;
    char key[600];
    KvErr serr = {{0}};
    SampleTrace tr = {0};
    StoreTrace *rows = NULL;
    StoreTraceSet *sets = NULL;
    int n = 0, rc = -1, n_rows = 0, n_sets = 0, n_failed = 0;
    const RunVariant **pending = kv_calloc((size_t)cfg->n_variants, sizeof *pending, err);
    if (!pending) return -1;
    for (int v = 0; v < cfg->n_variants; v++)
        if (it->pending[v]) pending[n++] = &cfg->variants[v];
    int built = item_sample(p, it, rd, task, &s, key, sizeof key, &serr);
    if (built) {
        if (trace_sample(&env, &s, pending, n, cfg->trace_steps, (Importance)cfg->trace_importance, &tr, err))
            goto done;
    } else if (trace_failed(&tr, n, &serr, err)) {
        goto done;
    }
    if (!(rows = kv_calloc((size_t)tr.n_steps * n + 1, sizeof *rows, err)) ||
        !(sets = kv_calloc((size_t)n + 1, sizeof *sets, err)))
        goto done;
    for (int i = 0; i < n; i++) {
        n_failed += tr.failed[i];
        if (!tr.failed[i] && tr.n_steps > 0)
            sets[n_sets++] = (StoreTraceSet){sw->keys[pending[i] - cfg->variants], tr.kept[i], tr.clamped_kept[i]};
        for (int t = 0; t < tr.n_steps && !tr.failed[i]; t++)
            rows[n_rows++] = (StoreTrace){sw->keys[pending[i] - cfg->variants],
                                          policy_needs_attention(&pending[i]->policy) ? pending[i]->policy.window : 0,
                                          t, tr.mean_r[(size_t)t * n + i], tr.min_r[(size_t)t * n + i],
                                          sw->model->cfg.n_layers, sw->model->cfg.n_kv_heads,
                                          tr.r_heads + ((size_t)t * n + i) * tr.n_pairs};
    }
    char *answers = built ? answers_json(&s) : NULL;
    StoreSample ss = sample_row(sw, p, it, rd, built ? &s : NULL, key, tr.context_tokens, tr.question_tokens, answers);
    rc = begin_run(sw, err);
    if (!rc) rc = store_write_traces(sw->store, sw->run_id, &ss, rows, n_rows, sets, n_sets, err);
    free(answers);
    if (rc) goto done;
    sw->stats->rows_written += store_last_written(sw->store);
    sw->stats->rows_failed += n_failed;
    sw->stats->samples_done++;
    sw->stats->samples_failed += n_failed == n;
    sw->stats->prefill_tokens += tr.context_tokens;
    sw->stats->decode_tokens += tr.n_steps;
    sw->stats->prefill_ms += tr.prefill_ms;
    sw->stats->decode_ms += tr.decode_ms;
    for (int i = 0; i < n; i++)
        if (tr.failed[i]) {
            fprintf(sw->opt->log, "%s%s: %s: %d of %d variants not traced (%s: %s)\n",
                    sw->opt->progress_line ? "\r\033[K" : "", sw->log_name, key, n_failed, n,
                    pending[i]->policy.name, tr.errs[i].msg);
            break;
        }
    if (!sw->opt->progress_line)
        fprintf(sw->opt->log, "%s: %s (%d/%d): %d keep-sets traced over %d steps, %d+%d tokens, prefill %.0f ms, "
                              "decode %.0f ms\n",
                sw->log_name, key, sw->stats->samples_done, sw->stats->samples_planned, n - n_failed, tr.n_steps,
                tr.context_tokens, tr.question_tokens, tr.prefill_ms, tr.decode_ms);
done:
    sample_trace_free(&tr);
    free(rows);
    free(sets);
    free(pending);
    if (built) sample_free(&s);
    return rc;
}

static void progress(Sweep *sw) {
    const SweepStats *st = sw->stats;
    if (!sw->opt->progress_line || st->samples_planned == 0) return;
    double elapsed = util_now_ms() - sw->started_ms;
    double per = st->samples_done ? elapsed / st->samples_done : 0;
    double eta = per * (st->samples_planned - st->samples_done) / 1000.0;
    fprintf(sw->opt->log, "\r\033[K%s: %d/%d samples  ETA %dm%02ds  prefill %.0f tok/s  decode %.1f tok/s",
            sw->log_name, st->samples_done, st->samples_planned, (int)(eta / 60), (int)eta % 60,
            st->prefill_ms > 0 ? st->prefill_tokens / (st->prefill_ms / 1000) : 0.0,
            st->decode_ms > 0 ? st->decode_tokens / (st->decode_ms / 1000) : 0.0);
    fflush(sw->opt->log);
}

/* One planned sample from its tokens to its rows: prepared (tokens, prefill, keep-sets, plan), decoded alone or in
 * the decode pool with other samples, then stored. */
typedef struct SampleJob {
    const PlanItem *it;
    Sample s;
    int built;         /* the dataset built s (else serr says why, and every variant fails with it) */
    KvErr serr;
    char key[600];
    VariantRun *runs;  /* [n] the pending variants */
    int n;
    SampleState st;
    SampleOutcome o;
    int prefill_failed; /* its prefill failed (perhaps for the memory the pool holds) */
} SampleJob;

static void job_free(Sweep *sw, SampleJob *job) {
    if (!job) return;
    sample_state_free(sw, &job->st, job->runs, job->n);
    for (int i = 0; job->runs && i < job->n; i++) {
        free(job->runs[i].prediction);
        free(job->runs[i].protected_counts);
        ids_free(&job->runs[i].out);
    }
    free(job->runs);
    if (job->built) sample_free(&job->s);
    free(job);
}

/* The job of a plan item with its sample built; -1 only when out of memory (fatal, as a failed write). */
static int job_new(Sweep *sw, Plan *p, const PlanItem *it, SampleJob **out, KvErr *err) {
    const RunConfig *cfg = sw->cfg;
    const RunDataset *rd = &cfg->datasets[it->dataset];
    SampleJob *job = kv_calloc(1, sizeof *job, err);
    if (!job || !(job->runs = kv_calloc((size_t)cfg->n_variants, sizeof *job->runs, err))) {
        free(job);
        return -1;
    }
    job->it = it;
    job->st.full = -1;
    for (int v = 0; v < cfg->n_variants; v++)
        if (it->pending[v]) job->runs[job->n++].v = &cfg->variants[v];
    job->built = item_sample(p, it, rd, rd->tasks[it->task - p->first[it->dataset]], &job->s, job->key,
                             sizeof job->key, &job->serr);
    *out = job;
    return 0;
}

/* Tokens, prefill and keep-sets; returns whether the job has variants to decode (a failed step fails them all,
 * with its error). The variants' state is reset first, so a job can be prepared again (after a prefill that failed
 * while the decode pool held memory). */
static int job_prepare(Sweep *sw, SampleJob *job) {
    sample_state_free(sw, &job->st, job->runs, job->n);
    for (int i = 0; i < job->n; i++) {
        VariantRun *r = &job->runs[i];
        free(r->protected_counts);
        *r = (VariantRun){.v = r->v};
    }
    job->o = (SampleOutcome){0};
    if (!job->built) {
        fail_all(job->runs, job->n, &job->serr);
        return 0;
    }
    KvErr err = {{0}};
    const double cpu_started = util_cpu_ms();
    int rc = sample_tokens(sw, &job->s, &job->st, &job->o, &err);
    job->prefill_failed = !rc && sample_prefill(sw, &job->st, job->runs, job->n, &job->o, &err);
    rc = rc || job->prefill_failed || sample_keep_sets(sw, &job->st, job->runs, job->n, &err);
    sw->stats->sample_cpu_ms += util_cpu_ms() - cpu_started;
    if (rc) fail_all(job->runs, job->n, &err);
    return !rc && job->st.n_ok > 0;
}

/* Decodes batch `batch` of each of the jobs in one joint decode (runs/memplan.h; one job: one of its batches; the
 * pool: its jobs' only batch): each variant's cache made from its sample's prefill, one generate_greedy_groups with
 * a group per sample, each answer decoded to text and scored, then the caches freed. A variant whose cache or score
 * fails fails alone; a failing decode fails the variants it decoded. */
static void decode_joint(Sweep *sw, SampleJob *const *jobs, int n_jobs, int batch) {
    int total = 0, nc = 0, ng = 0;
    for (int k = 0; k < n_jobs; k++) total += jobs[k]->n;
    KvErr err = {{0}};
    KvCache **caches = kv_calloc((size_t)total + 1, sizeof *caches, &err);
    TokenIds *outs = caches ? kv_calloc((size_t)total + 1, sizeof *outs, &err) : NULL;
    int *variant_of = outs ? kv_calloc((size_t)total + 1, sizeof *variant_of, &err) : NULL;
    GenerateGroup *groups = variant_of ? kv_calloc((size_t)n_jobs, sizeof *groups, &err) : NULL;
    SampleJob **group_job = groups ? kv_calloc((size_t)n_jobs, sizeof *group_job, &err) : NULL;
    if (!group_job) {
        for (int k = 0; k < n_jobs; k++) fail_all(jobs[k]->runs, jobs[k]->n, &err);
        goto done;
    }
    const double cpu_started = util_cpu_ms();
    for (int k = 0; k < n_jobs; k++) {
        SampleJob *job = jobs[k];
        SampleState *st = &job->st;
        const int first = nc;
        for (int j = 0; j < st->n_ok; j++) {
            VariantRun *r = &job->runs[st->idx[j]];
            if (r->batch != batch || r->failed) continue;
            if (r->cache != st->pf.cache) {
                double t = util_now_ms();
                int rc = (st->use_views ? sw->be->cache_view : sw->be->cache_gather)(
                    sw->be, st->pf.cache, &r->keep, st->q.n + st->max_new, &r->cache, &r->err);
                keepset_free(&r->keep);
                double made = util_now_ms() - t;
                r->select_ms += made;
                sw->stats->select_ms += made;
                if (rc) {
                    r->failed = 1;
                    continue;
                }
            }
            variant_of[nc] = st->idx[j];
            caches[nc++] = r->cache;
        }
        if (nc == first) continue;
        GenerateOptions go = {st->max_new, st->stops.ids, st->stops.n, NULL,
                              sw->cfg->stop_any_token ? GEN_STOP_ANY_TOKEN : GEN_STOP_REFERENCE};
        groups[ng] = (GenerateGroup){.caches = caches + first, .n_seqs = nc - first, .prompt = st->q.ids,
                                     .n_prompt = st->q.n, .opt = go, .out = outs + first};
        group_job[ng++] = job;
    }
    if (ng == 0) goto done;
    KvErr derr = {{0}};
    int rc = generate_greedy_groups(sw->be, groups, ng, &derr);
    if (rc) kv_wrap(&derr, "decode");
    sw->stats->decode_batches++;
    for (int g = 0; g < ng; g++) {
        SampleJob *job = group_job[g];
        const GenerateGroup *gr = &groups[g];
        job->o.decode_ms += gr->stats.feed_ms + gr->stats.decode_ms;
        job->o.joint_samples = ng;
        sw->stats->decode_tokens += gr->stats.decode_tokens;
        for (int b = 0; b < gr->n_seqs; b++) {
            const Sample *s = &job->s;
            VariantRun *r = &job->runs[variant_of[gr->out - outs + b]];
            r->out = gr->out[b];
            gr->out[b] = (TokenIds){0};
            if (r->cache != job->st.pf.cache) sw->be->cache_free(sw->be, r->cache);
            r->cache = NULL;
            if (rc) {
                r->failed = 1;
                r->err = derr;
            } else if (!(r->prediction =
                             tokenizer_decode(sw->tok, r->out.ids, r->out.n, TOK_DECODE_SKIP_SPECIAL, &r->err)) ||
                       metric_score(s->metric, s->task, r->prediction, (const char *const *)s->answers, s->n_answers,
                                    (const char *const *)s->all_classes, s->n_classes, &r->score, &r->err)) {
                r->failed = 1;
            }
        }
    }
    sw->stats->sample_cpu_ms += util_cpu_ms() - cpu_started;
done:
    for (int i = 0; outs && i < total; i++) ids_free(&outs[i]);
    free(caches);
    free(outs);
    free(variant_of);
    free(groups);
    free(group_job);
}

/* Stores a job's rows, logs it, frees it and releases its claim; -1 only when the database write failed (fatal). */
static int job_store(Sweep *sw, Plan *p, SampleJob *job, KvErr *err) {
    const RunConfig *cfg = sw->cfg;
    const PlanItem *it = job->it;
    const RunDataset *rd = &cfg->datasets[it->dataset];
    const int n = job->n;
    const SampleOutcome o = job->o;
    VariantRun *runs = job->runs;
    int n_failed = 0, rc = 0;
    StoreResult *rows = kv_calloc((size_t)n + 1, sizeof *rows, err);
    for (int i = 0; rows && i < n; i++) {
        VariantRun *r = &runs[i];
        int vi = (int)(r->v - cfg->variants);
        StoreResult *row = &rows[i];
        row->key = sw->keys[vi];
        row->keep_fraction = r->v->budget.tokens > 0 ? 0 : r->v->budget.keep_fraction;
        row->budget_tokens = r->budget_tokens;
        row->kept_tokens = r->kept;
        row->kept_fraction = r->kept_fraction;
        row->prediction = r->failed ? NULL : r->prediction;
        row->score = r->score;
        row->generated_tokens = r->out.n;
        row->prefill_ms = o.prefill_ms;
        row->select_ms = r->select_ms;
        row->decode_ms = o.decode_ms;
        row->error = r->failed ? r->err.msg : NULL;
        n_failed += r->failed;
    }
    char *answers = job->built ? answers_json(&job->s) : NULL;
    StoreSample ss = sample_row(sw, p, it, rd, job->built ? &job->s : NULL, job->key, o.context_tokens,
                                o.question_tokens, answers);
    ss.over_length = o.over_length;
    const int n_layers = sw->model->cfg.n_layers, n_kv_heads = sw->model->cfg.n_kv_heads;
    ProtectedSet *sets = rows ? kv_calloc((size_t)n + 1, sizeof *sets, err) : NULL;
    int n_sets = 0;
    for (int i = 0; sets && i < n; i++)
        if (!runs[i].failed && runs[i].protected_counts)
            sets[n_sets++] = (ProtectedSet){rows[i].key, n_layers, n_kv_heads, runs[i].protected_counts,
                                            runs[i].protected_counts + n_layers * n_kv_heads};
    if (!sets || begin_run(sw, err) || store_write_sample(sw->store, sw->run_id, &ss, rows, n, err) ||
        protected_write(sw->store, ss.model, ss.setup, ss.sample_key, sets, n_sets, err))
        rc = -1;
    else {
        sw->stats->rows_written += store_last_written(sw->store);
        sw->stats->rows_replaced += store_last_replaced(sw->store);
        sw->stats->rows_failed += n_failed;
        sw->stats->samples_done++;
        if (n_failed == n) sw->stats->samples_failed++;
        if (job->st.n_ok > 0 && n_failed < n) sw->stats->prefill_tokens += o.context_tokens;
        sw->stats->prefill_ms += o.prefill_ms;
        sw->stats->decode_ms += o.decode_ms;
        sw->stats->samples_split += o.n_batches > 1;
        const VariantRun *first = NULL;
        for (int i = 0; i < n && !first; i++)
            if (runs[i].failed) first = &runs[i];
        if (first)
            fprintf(sw->opt->log, "%s%s: %s: %d of %d variants failed (%s: %s)\n",
                    sw->opt->progress_line ? "\r\033[K" : "", sw->log_name, job->key, n_failed, n,
                    first->v->policy.name, first->err.msg);
    }
    if (!sw->opt->progress_line && rc == 0) {
        double mean = 0;
        int ok = 0;
        for (int i = 0; i < n; i++)
            if (!runs[i].failed) mean += runs[i].score, ok++;
        /* the mean of the variants that ran: a failed variant has no score, and a 0 for it would read as one */
        char scored[96], recon[96] = "", joint[64] = "";
        if (!ok) snprintf(scored, sizeof scored, "no score (every variant failed)");
        else if (ok < n) snprintf(scored, sizeof scored, "mean score %.3f of the %d that ran (%d failed)", mean / ok, ok,
                                  n - ok);
        else snprintf(scored, sizeof scored, "mean score %.3f", mean / ok);
        if (o.reconstruction_ms > 0)
            snprintf(recon, sizeof recon, ", reconstruction pass %.0f ms (%.0f CPU-ms)", o.reconstruction_ms,
                     o.reconstruction_cpu_ms);
        if (o.joint_samples > 1)
            snprintf(joint, sizeof joint, " with %d other sample%s", o.joint_samples - 1,
                     o.joint_samples == 2 ? "" : "s");
        fprintf(sw->opt->log, "%s: %s (%d/%d): %d variants, %d+%d tokens, prefill %.0f ms%s, decode %.0f ms in %d "
                              "batch%s%s, %s\n",
                sw->log_name, job->key, sw->stats->samples_done, sw->stats->samples_planned, n, o.context_tokens,
                o.question_tokens, o.prefill_ms, recon, o.decode_ms, o.n_batches, o.n_batches == 1 ? "" : "es", joint,
                scored);
    }
    free(answers);
    free(sets);
    free(rows);
    KvErr release_err;
    if (claims_release(sw->store, &sw->me, sw->rm->name, sw->row_setups[it->dataset], it->key,
                       rc ? &release_err : err))
        rc = -1;
    job_free(sw, job);
    progress(sw);
    return rc;
}

/* Drops the pooled jobs without storing them (a fatal error stopped the run) and releases their claims. */
static void pool_discard(Sweep *sw) {
    for (int k = 0; k < sw->n_pool; k++) {
        KvErr ignored;
        SampleJob *job = sw->pool[k];
        if (sw->store)
            claims_release(sw->store, &sw->me, sw->rm->name, sw->row_setups[job->it->dataset], job->it->key,
                           &ignored);
        job_free(sw, job);
    }
    sw->n_pool = sw->pool_seqs = 0;
    sw->pool_need = sw->pool_prefill = 0;
}

/* Decodes the pooled samples together and stores each; -1 when a database write failed. */
static int pool_flush(Sweep *sw, Plan *p, KvErr *err) {
    if (sw->n_pool == 0) return 0;
    decode_joint(sw, sw->pool, sw->n_pool, 0);
    int rc = 0, k = 0;
    for (; k < sw->n_pool && !rc; k++) rc = job_store(sw, p, sw->pool[k], err);
    /* after a failed write, the jobs not stored are dropped with their claims */
    for (int j = 0; j < sw->n_pool - k; j++) sw->pool[j] = sw->pool[k + j];
    sw->n_pool -= k;
    pool_discard(sw);
    return rc;
}

/* Runs one planned sample: prepared, then decoded alone (in as many batches as its plan needs) and stored, or,
 * when its variants fit in one batch and the sweep decodes several samples at once (SweepOptions.decode_samples),
 * held in the decode pool beside the others until the pool is full or the plan's pass ends (pool_flush). A sample
 * that would not fit beside the pool, or whose preparation fails while the pool holds memory, waits until the pool
 * has decoded and is planned (prepared) again alone, so the pool never costs a sample a row. -1 only when the
 * database write failed (fatal). */
static int process_item(Sweep *sw, Plan *p, const PlanItem *it, KvErr *err) {
    SampleJob *job = NULL;
    if (job_new(sw, p, it, &job, err)) return -1;
    int ready = job_prepare(sw, job);
    if (sw->n_pool > 0 && job->prefill_failed) {
        if (pool_flush(sw, p, err)) {
            job_free(sw, job);
            return -1;
        }
        ready = job_prepare(sw, job);
    }
    if (ready) {
        KvErr plan_err = {{0}};
        int unfit = 0, nb = sample_plan(sw, &job->st, job->n, sw->pool_need, sw->pool_prefill + sw->pool_need, &unfit,
                                        &plan_err);
        const int n_seqs = job->st.n_ok, max_seqs = sw->be->max_seqs;
        if (sw->n_pool > 0 && (nb != 1 || unfit > 0 || (max_seqs > 0 && sw->pool_seqs + n_seqs > max_seqs))) {
            if (pool_flush(sw, p, err)) {
                job_free(sw, job);
                return -1;
            }
            nb = sample_plan(sw, &job->st, job->n, 0, 0, &unfit, &plan_err);
        }
        if (nb < 0) {
            fail_all(job->runs, job->n, &plan_err);
        } else {
            sample_plan_apply(sw, &job->st, job->runs, job->n, nb, &job->o);
            if (nb == 1 && sw->decode_samples > 1) {
                sw->pool_need += sample_need(&job->st, job->n);
                sw->pool_prefill += (double)job->st.pf.cache->arena_bytes;
                sw->pool_seqs += n_seqs;
                sw->pool[sw->n_pool++] = job;
                return sw->n_pool == sw->decode_samples ? pool_flush(sw, p, err) : 0;
            }
            for (int batch = 0; batch < nb; batch++) decode_joint(sw, &job, 1, batch);
        }
    }
    return job_store(sw, p, job, err);
}

/* What claim_item found: the sample is this run's to compute, another live run is computing it, or another run has
 * written every row this run had planned for it. */
typedef enum { CLAIM_MINE, CLAIM_HELD, CLAIM_FINISHED } ClaimState;

/* Claims a planned sample for this run (store/claims.h) and drops the variants another run finished since the plan
 * was made. */
static int claim_item(Sweep *sw, PlanItem *it, ClaimState *state, KvErr *err) {
    const char *setup = sw->row_setups[it->dataset];
    int nv = sw->cfg->n_variants, pending = 0, taken = 0;
    unsigned char *done = kv_malloc((size_t)nv, err);
    if (!done || open_store(sw, err) || claims_take(sw->store, &sw->me, sw->rm->name, setup, it->key, &taken, err) ||
        (taken && (sw->opt->trace ? store_traced : store_finished)(sw->store, sw->rm->name, setup, it->key, sw->keys,
                                                                   nv, done, err))) {
        free(done);
        return -1;
    }
    for (int v = 0; taken && v < nv; v++) pending += it->pending[v] = it->pending[v] && !done[v];
    free(done);
    *state = !taken ? CLAIM_HELD : pending ? CLAIM_MINE : CLAIM_FINISHED;
    return *state == CLAIM_FINISHED ? claims_release(sw->store, &sw->me, sw->rm->name, setup, it->key, err) : 0;
}

/* Runs the plan's samples that no other run holds, then waits for those another run is computing: each is tried
 * again every second until that run has stored it (or its claim lapses, and this run computes it), so a run
 * ends only when every planned sample is stored, by it or by another run. */
static int run_plan(Sweep *sw, Plan *plan, KvErr *err) {
    unsigned char *held = kv_malloc((size_t)plan->n_items, err);
    if (!held) return -1;
    memset(held, 1, (size_t)plan->n_items);
    int rc = 0, n_held = plan->n_items, said = -1;
    while (!rc && n_held) {
        for (int i = 0; i < plan->n_items && !rc; i++) {
            PlanItem *it = &plan->items[i];
            ClaimState state;
            if (!held[i] || (rc = claim_item(sw, it, &state, err)) || state == CLAIM_HELD) continue;
            held[i] = 0;
            n_held--;
            if (state == CLAIM_FINISHED) {
                sw->stats->samples_elsewhere++;
                continue;
            }
            if (!sw->opt->trace) {
                rc = process_item(sw, plan, it, err); /* it releases the claim once the rows are stored */
                continue;
            }
            rc = trace_item(sw, plan, it, err);
            KvErr release_err;
            if (claims_release(sw->store, &sw->me, sw->rm->name, sw->row_setups[it->dataset], it->key,
                               rc ? &release_err : err))
                rc = -1;
            progress(sw);
        }
        /* the pooled samples decode before this run waits for others' (or ends) */
        if (!rc) rc = pool_flush(sw, plan, err);
        if (rc) pool_discard(sw);
        if (rc || !n_held) break;
        if (n_held != said)
            fprintf(sw->opt->log, "%s%s: waiting for %d sample%s another run on this database is computing\n",
                    sw->opt->progress_line ? "\r\033[K" : "", sw->log_name, n_held, n_held == 1 ? "" : "s");
        said = n_held;
        fflush(sw->opt->log);
        struct timespec second = {1, 0};
        nanosleep(&second, NULL);
    }
    free(held);
    return rc;
}

/* ---------------------------------------------------------------- one model */

/* The options model m's backend is asked for: the command line's over its config's "cpu" over the environment. */
static int model_backend_options(const RunConfig *cfg, const SweepOptions *opt, const RunModel *m,
                                 BackendOptions *options, KvErr *err) {
    char where[1100];
    snprintf(where, sizeof where, "%s: models[%d]", cfg->file, (int)(m - cfg->models));
    return util_backend_options(options, opt->backend_flags, m->cpu, where, err);
}

static int load_model(Sweep *sw, KvErr *err) {
    const RunModel *rm = sw->rm;
    if (backend_load_model(&sw->model, rm->backend, rm->path, err))
        return kv_wrap(err, "%s: model '%s'", sw->cfg->file, rm->name);
    if (rm->tokenizer) {
        if (tokenizer_load(&sw->own_tok, rm->tokenizer, err)) return kv_wrap(err, "%s: tokenizer", sw->cfg->file);
        sw->tok = sw->own_tok;
    } else {
        sw->tok = sw->model->tokenizer;
    }
    if (!sw->tok)
        return kv_fail(err, "%s: model '%s' has no tokenizer (a synthetic model needs \"tokenizer\": PATH)",
                       sw->cfg->file, rm->name);
    if (tokenizer_vocab_size(sw->tok) > sw->model->cfg.vocab_size)
        return kv_fail(err, "%s: model '%s': the tokenizer has %d tokens, the model's vocabulary only %d",
                       sw->cfg->file, rm->name, tokenizer_vocab_size(sw->tok), sw->model->cfg.vocab_size);
    BackendOptions options;
    if (model_backend_options(sw->cfg, sw->opt, rm, &options, err)) return -1;
    return backend_open(&sw->be, rm->backend, sw->model, &options, err);
}

/* "chat_template": true asks for a rendering the model must have; without a template the prompt would silently
 * stay plain while its rows claim chat=1. */
static int check_chat(const Sweep *sw, KvErr *err) {
    for (int d = 0; d < sw->cfg->n_datasets; d++)
        if (sw->cfg->datasets[d].chat == RUN_CHAT_ON && sw->model->cfg.chat == CHAT_NONE)
            return kv_fail(err, "%s: datasets[%d].chat_template: model '%s' has no chat template", sw->cfg->file, d,
                           sw->rm->name);
    return 0;
}

/* The model's identity, and a refusal when the database holds rows of this model name made from another model
 * (checked before the model is loaded). */
static int check_model_identity(Sweep *sw, KvErr *err) {
    char stored[256], stored_path[1024], change[600];
    if (util_model_identity(sw->rm->path, sw->rm->tokenizer, sw->model_id, sizeof sw->model_id, err))
        return kv_wrap(err, "%s: model '%s'", sw->cfg->file, sw->rm->name);
    if (!sw->store) return 0;
    if (store_check_model(sw->store, sw->rm->name, sw->model_id, stored, sizeof stored, stored_path,
                          sizeof stored_path, err))
        return -1;
    if (!stored[0]) return 0;
    store_identity_change(stored, sw->model_id, change, sizeof change);
    return kv_fail(err, "%s: model '%s': %s holds rows of this name made from another model (they came from %s, "
                        "the config names %s: %s); rows of different inputs are never mixed: give the model another "
                        "\"name\", or use a new --db", sw->cfg->file, sw->rm->name, sw->opt->db_path, stored_path,
                   sw->rm->path, change);
}

/* A model's result rows also name its tokenizer's decode rule where that is transformers' clean-up of spaces before
 * punctuation (tokenizer_clean_up_spaces): rows stored before kvbench applied it hold the text without it, under
 * the setup without the suffix, so resume runs them again and the report keeps the two apart. Traces hold no text. */
static void model_setups(Sweep *sw) {
    const char *rule = !sw->opt->trace && tokenizer_clean_up_spaces(sw->tok) ? ",clean_up_spaces" : "";
    /* the backend's options that change predictions and traces alike, as it reports it ran them (so a label
     * never names a path that did not run) */
    BackendOptions used;
    char options[64];
    backend_options_used(sw->be, &used);
    backend_setup_label(&used, options, sizeof options);
    for (int d = 0; d < sw->cfg->n_datasets; d++)
        snprintf(sw->row_setups[d], sizeof sw->row_setups[d], "%s%s%s", sw->setups[d], options, rule);
}

static int sweep_model(Sweep *sw, KvErr *err) {
    Plan plan = {0};
    char duo_dir[1100];
    sw->run_id = 0;
    util_escape_text(sw->rm->name, sw->log_name, sizeof sw->log_name);
    int rc = check_model_identity(sw, err), duo = 0;
    if (!rc) {
        duo = config_duo_pattern_dir(sw->cfg, sw->rm, duo_dir, sizeof duo_dir, err);
        sw->duo_na = config_duo_na(sw->cfg, sw->rm);
        if (duo < 0 || (duo == 1 && duo_pattern_load(&sw->duo, duo_dir, err)))
            rc = kv_wrap(err, "%s: model '%s'", sw->cfg->file, sw->rm->name);
    }
    if (!rc && sw->duo_na)
        fprintf(sw->opt->log, "%s: duoattention N/A (\"duo_attention_patterns\": \"none\"); its cells are skipped\n",
                sw->log_name);
    if (!rc) rc = load_model(sw, err);
    if (!rc && duo == 1 && (sw->duo.n_layers != sw->model->cfg.n_layers || sw->duo.n_kv_heads != sw->model->cfg.n_kv_heads))
        rc = kv_fail(err, "%s: model '%s': the DuoAttention pattern %s has %d layers x %d kv-heads, the model %d x %d",
                     sw->cfg->file, sw->rm->name, sw->duo.source, sw->duo.n_layers, sw->duo.n_kv_heads,
                     sw->model->cfg.n_layers, sw->model->cfg.n_kv_heads);
    if (!rc) rc = check_chat(sw, err);
    if (!rc) model_setups(sw);
    if (!rc) rc = plan_build(sw, &plan, err);
    if (!rc) {
        int variants = 0;
        for (int i = 0; i < plan.n_items; i++)
            for (int v = 0; v < sw->cfg->n_variants; v++) variants += plan.items[i].pending[v];
        fprintf(sw->opt->log, "%s: %d samples to run (%d rows); %s\n", sw->log_name, plan.n_items, variants,
                plan.n_items ? "starting" : "nothing to do");
    }
    if (!rc && plan.n_items) {
        sw->stats->samples_planned += plan.n_items;
        rc = run_plan(sw, &plan, err);
        if (sw->opt->progress_line) fputc('\n', sw->opt->log);
        if (!rc && sw->run_id) rc = store_end_run(sw->store, sw->run_id, err);
    }
    plan_free(&plan, sw->cfg);
    duo_pattern_free(&sw->duo);
    backend_close(sw->be);
    tokenizer_free(sw->own_tok);
    model_free(sw->model);
    sw->be = NULL;
    sw->own_tok = NULL;
    sw->model = NULL;
    sw->tok = NULL;
    return rc;
}

/* Model files, tokenizers and DuoAttention patterns exist: checked for every model before the first one is
 * loaded. */
static int check_inputs(const RunConfig *cfg, const SweepOptions *opt, KvErr *err) {
    struct stat st;
    for (int i = 0; i < cfg->n_models; i++) {
        const RunModel *m = &cfg->models[i];
        char duo_dir[1100];
        DuoPattern duo;
        int has_duo = config_duo_pattern_dir(cfg, m, duo_dir, sizeof duo_dir, err);
        if (has_duo < 0 || (has_duo == 1 && duo_pattern_load(&duo, duo_dir, err)))
            return kv_wrap(err, "%s: models[%d] '%s'", cfg->file, i, m->name);
        if (has_duo == 1) duo_pattern_free(&duo);
        if (strncmp(m->path, "synthetic:", 10) && stat(m->path, &st))
            return kv_fail(err, "%s: models[%d].path: %s: %s", cfg->file, i, m->path, strerror(errno));
        if (m->tokenizer && stat(m->tokenizer, &st))
            return kv_fail(err, "%s: models[%d].tokenizer: %s: %s", cfg->file, i, m->tokenizer, strerror(errno));
        if (strcmp(m->backend, "cpu") && !strstr(backend_available(), m->backend))
            return kv_fail(err, "%s: models[%d].backend: '%s' is not in this build (available: %s)", cfg->file, i,
                           m->backend, backend_available());
        BackendOptions options;
        if (model_backend_options(cfg, opt, m, &options, err)) return -1;
        if (strcmp(m->backend, "cpu") && options.cache == KV_ELEM_F16)
            return kv_fail(err, "%s: models[%d].backend: cache 'f16' is the cpu backend's half-precision cache; "
                                "backend '%s' keeps its own (set cache f32, or leave it unset, or use backend cpu)",
                           cfg->file, i, m->backend);
    }
    return 0;
}

int sweep_run(const RunConfig *cfg, const SweepOptions *opt, SweepStats *stats, KvErr *err) {
    SweepStats local = {0};
    Sweep sw = {0};
    sw.cfg = cfg;
    sw.opt = opt;
    sw.stats = stats ? stats : &local;
    memset(sw.stats, 0, sizeof *sw.stats);
    sw.started_ms = util_now_ms();
    sw.memory_limit = opt->memory_limit > 0 ? opt->memory_limit : cfg->memory_limit;
    sw.decode_samples = opt->decode_samples > 0   ? opt->decode_samples
                        : cfg->decode_samples > 0 ? cfg->decode_samples
                                                  : 1;
    if (opt->trace && cfg->trace_steps < 1)
        return kv_fail(err, "%s: no \"trace\" section (kvbench trace needs e.g. \"trace\": {\"steps\": 64})", cfg->file);
    if (check_inputs(cfg, opt, err)) return -1;
    claims_self(&sw.me);
    if (!(sw.setups = kv_calloc((size_t)cfg->n_datasets, sizeof *sw.setups, err)) ||
        !(sw.row_setups = kv_calloc((size_t)cfg->n_datasets, sizeof *sw.row_setups, err)) ||
        !(sw.keys = kv_calloc((size_t)cfg->n_variants, sizeof *sw.keys, err)) ||
        !(sw.pool = kv_calloc((size_t)sw.decode_samples, sizeof *sw.pool, err))) {
        free(sw.setups);
        free(sw.row_setups);
        free(sw.keys);
        return -1;
    }
    /* Traces are keyed apart from results: the steps and the importance change them, max_new_tokens does not
     * (the default importance adds nothing, so attention traces keep the key they had). A chat_template
     * override changes every prompt of its dataset, so its rows must not pass for the suite protocol's (resume)
     * nor be averaged with them (report sections are per setup); without one the setup stays as it was. */
    for (int d = 0; d < cfg->n_datasets; d++) {
        const RunChat chat = cfg->datasets[d].chat;
        char *setup = sw.setups[d];
        const char *importance =
            cfg->trace_importance == IMPORTANCE_VALUE_WEIGHTED ? ",importance=value_weighted" : "";
        int k = opt->trace ? snprintf(setup, sizeof *sw.setups, "trace,cq=%d,steps=%d%s", cfg->compress_question,
                                      cfg->trace_steps, importance)
                           : snprintf(setup, sizeof *sw.setups, "cq=%d,max_new=%d", cfg->compress_question,
                                      cfg->max_new_tokens);
        if (chat != RUN_CHAT_SUITE)
            k += snprintf(setup + k, sizeof *sw.setups - (size_t)k, ",chat=%d", chat == RUN_CHAT_ON);
        /* the non-default generation and length rules change predictions; the defaults add nothing (a trace
         * decodes without stop tokens and always refuses an over-long sample) */
        if (!opt->trace && cfg->stop_any_token) k += snprintf(setup + k, sizeof *sw.setups - (size_t)k, ",stop=any");
        if (!opt->trace && cfg->over_length_error) snprintf(setup + k, sizeof *sw.setups - (size_t)k, ",long=error");
    }
    for (int v = 0; v < cfg->n_variants; v++) {
        const RunVariant *x = &cfg->variants[v];
        sw.keys[v] = (StoreVariantKey){x->policy.name, aggregation_name(x->policy.aggregation), x->params,
                                       x->budget_label};
    }
    /* An existing database is opened (and checked) now; a new one is created for the first sample written. */
    struct stat st;
    int rc = stat(opt->db_path, &st) ? util_check_creatable(opt->db_path, err)
                                     : store_open(&sw.store, opt->db_path, 0, err);
    for (int i = 0; i < cfg->n_models && !rc; i++) {
        sw.rm = &cfg->models[i];
        rc = sweep_model(&sw, err);
    }
    /* A run that had nothing to do still leaves the database it was asked for (a shard with no samples merges). */
    if (!rc && !sw.store)
        rc = util_make_parent_dirs(opt->db_path, err) || store_open(&sw.store, opt->db_path, 0, err) ? -1 : 0;
    claims_heartbeat_stop(sw.heartbeat);
    store_close(sw.store);
    free(sw.setups);
    free(sw.row_setups);
    free(sw.keys);
    free(sw.pool);
    sw.stats->wall_ms = util_now_ms() - sw.started_ms;
    return rc;
}

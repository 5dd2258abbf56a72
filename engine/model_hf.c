/* model_hf.c — a Llama / Mistral / Qwen2 model from a Hugging Face directory: config.json, one
 * model.safetensors or shards listed by model.safetensors.index.json, tokenizer.json (+ tokenizer_config.json),
 * generation_config.json. Tensors may be f32, f16 or bf16 and are converted to f32 into the arena; Hugging Face
 * checkpoints are already in rotate-half order, so nothing is permuted. Spec: models.md §2. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "jsonfile.h"
#include "model_internal.h"
#include "num.h"
#include "safetensors.h"
#include "tokenizer.h"

typedef struct {
    const char *dir;
    char path[1200];   /* scratch: the file being read, for messages */
} HfDir;

static const char *dir_file(HfDir *h, const char *name) {
    snprintf(h->path, sizeof h->path, "%s/%s", h->dir, name);
    return h->path;
}

/* Parses DIR/name; *out = NULL (and 0) when the file is absent and optional. */
static int read_json(HfDir *h, const char *name, int required, cJSON **out, KvErr *err) {
    *out = NULL;
    const char *path = dir_file(h, name);
    if (!required && access(path, F_OK)) return 0;
    if (!(*out = kv_read_json(path, err))) return -1;
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return kv_fail(err, "%s: not a valid JSON object", path);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * config.json */

/* A JSON number as an int; `what` names it in messages ("key 'hidden_size'"). */
static int json_int(const cJSON *v, const char *path, const char *what, int *out, KvErr *err) {
    long long i = 0;
    NumCheck r = cJSON_IsNumber(v) ? num_integer(v->valuedouble, INT_MIN, INT_MAX, &i) : NUM_NOT_INTEGER;
    if (r == NUM_OUT_OF_RANGE)
        return kv_fail(err, "%s: %s = %g is out of range (at most %d)", path, what, v->valuedouble, INT_MAX);
    if (r) return kv_fail(err, "%s: %s is not an integer", path, what);
    *out = (int)i;
    return 0;
}

static int get_int(const cJSON *o, const char *path, const char *key, int required, int *out, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return required ? kv_fail(err, "%s: missing key '%s'", path, key) : 0;
    char what[160];
    snprintf(what, sizeof what, "key '%s'", key);
    return json_int(v, path, what, out, err);
}

static int get_float(const cJSON *o, const char *path, const char *key, int required, float *out, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return required ? kv_fail(err, "%s: missing key '%s'", path, key) : 0;
    if (!cJSON_IsNumber(v)) return kv_fail(err, "%s: key '%s' is not a number", path, key);
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *path, const char *key, int *out, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return kv_fail(err, "%s: key '%s' is not true/false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* eos_token_id as an int or a list of ints; returns 1 when the key was there. */
static int add_eos_ids(ModelConfig *c, const cJSON *o, const char *path, KvErr *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id"), *e;
    int id;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v)) {
        if (json_int(v, path, "eos_token_id", &id, err)) return -1;
        model_add_eos(c, id);
        return 1;
    }
    if (!cJSON_IsArray(v)) return kv_fail(err, "%s: eos_token_id is neither an integer nor a list", path);
    cJSON_ArrayForEach(e, v) {
        if (json_int(e, path, "an eos_token_id list entry", &id, err)) return -1;
        model_add_eos(c, id);
    }
    return 1;
}

static int read_rope_scaling(const cJSON *cfg, ModelConfig *c, const char *path, KvErr *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!rs || cJSON_IsNull(rs)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(type)) return kv_fail(err, "%s: rope_scaling has no rope_type", path);
    if (!strcmp(type->valuestring, "default")) return 0;
    if (strcmp(type->valuestring, "llama3"))
        return kv_fail(err, "%s: rope_scaling type '%s' is not supported (only llama3)", path, type->valuestring);
    c->rope_scaling = 1;
    return get_float(rs, path, "factor", 1, &c->rope_factor, err) ||
           get_float(rs, path, "low_freq_factor", 1, &c->rope_low_freq_factor, err) ||
           get_float(rs, path, "high_freq_factor", 1, &c->rope_high_freq_factor, err) ||
           get_int(rs, path, "original_max_position_embeddings", 1, &c->rope_original_max_pos, err);
}

static int read_config(HfDir *h, const cJSON *cfg, ModelConfig *c, KvErr *err) {
    const char *path = dir_file(h, "config.json");
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a)) a = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    if (!cJSON_IsString(a)) return kv_fail(err, "%s: missing key 'architectures'", path);
    const char *arch = a->valuestring;
    if (!strcmp(arch, "LlamaForCausalLM") || !strcmp(arch, "llama")) c->arch = ARCH_LLAMA;
    else if (!strcmp(arch, "MistralForCausalLM") || !strcmp(arch, "mistral")) c->arch = ARCH_MISTRAL;
    else if (!strcmp(arch, "Qwen2ForCausalLM") || !strcmp(arch, "qwen2")) c->arch = ARCH_QWEN2;
    else return kv_fail(err, "%s: unsupported architecture '%s' (kvbench loads LlamaForCausalLM, "
                             "MistralForCausalLM, Qwen2ForCausalLM)", path, arch);

    c->max_context = 2048;
    c->rope_theta = 10000.0f;
    c->bos_id = -1;
    if (get_int(cfg, path, "hidden_size", 1, &c->d_model, err) ||
        get_int(cfg, path, "intermediate_size", 1, &c->d_ff, err) ||
        get_int(cfg, path, "num_hidden_layers", 1, &c->n_layers, err) ||
        get_int(cfg, path, "num_attention_heads", 1, &c->n_heads, err) ||
        get_int(cfg, path, "vocab_size", 1, &c->vocab_size, err) ||
        get_float(cfg, path, "rms_norm_eps", 1, &c->rms_eps, err) ||
        get_int(cfg, path, "max_position_embeddings", 0, &c->max_context, err) ||
        get_float(cfg, path, "rope_theta", 0, &c->rope_theta, err) ||
        get_bool(cfg, path, "tie_word_embeddings", &c->tied_embeddings, err) ||
        get_int(cfg, path, "bos_token_id", 0, &c->bos_id, err) || read_rope_scaling(cfg, c, path, err))
        return -1;
    c->n_kv_heads = c->n_heads;
    c->head_dim = c->n_heads > 0 ? c->d_model / c->n_heads : 0;
    if (get_int(cfg, path, "num_key_value_heads", 0, &c->n_kv_heads, err) ||
        get_int(cfg, path, "head_dim", 0, &c->head_dim, err))
        return -1;
    int attention_bias = 0, mlp_bias = 0;
    if (get_bool(cfg, path, "attention_bias", &attention_bias, err) || get_bool(cfg, path, "mlp_bias", &mlp_bias, err))
        return -1;
    if (attention_bias || mlp_bias)
        return kv_fail(err, "%s: %s is not supported", path, attention_bias ? "attention_bias" : "mlp_bias");
    c->qkv_bias = c->arch == ARCH_QWEN2;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return kv_fail(err, "%s: hidden_act must be \"silu\"", path);
    if (model_check_config(c, path, err)) return -1;
    return add_eos_ids(c, cfg, path, err) < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------------------------
 * Tokenizer side: ids, BOS policy, chat template. */

/* A tokenizer_config token field: "text" or {"content": "text"}. */
static const char *token_text(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Whether tokenizer.json's post-processor puts a special token before the text (Llama-3's
 * TemplateProcessing, possibly inside a Sequence) — what HF does when tokenizer_config has no add_bos_token. */
static int post_processor_adds_bos(const cJSON *pp) {
    if (!cJSON_IsObject(pp)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type"), *e;
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence")) {
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
            if (post_processor_adds_bos(e)) return 1;
        return 0;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing")) return 0;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    return cJSON_GetObjectItemCaseSensitive(first, "SpecialToken") != NULL;
}

static int read_tokenizer_side(HfDir *h, Model *m, int have_eos, KvErr *err) {
    ModelConfig *c = &m->cfg;
    cJSON *gen = NULL, *tcfg = NULL;
    const char *tmpl = NULL;
    char *tmpl_file = NULL;
    int rc = -1, has_add_bos = 0;
    if (read_json(h, "generation_config.json", 0, &gen, err)) goto done;
    if (gen) {
        const char *path = dir_file(h, "generation_config.json");
        if (get_int(gen, path, "bos_token_id", 0, &c->bos_id, err)) goto done;
        /* generation_config's stop list replaces config.json's */
        if (cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id")) c->n_eos = 0;
        int r = add_eos_ids(c, gen, path, err);
        if (r < 0) goto done;
        have_eos |= r;
    }
    if (!access(dir_file(h, "tokenizer.json"), F_OK)) {
        if (tokenizer_load(&m->tokenizer, h->dir, err)) goto done;
        snprintf(m->tokenizer_kind, sizeof m->tokenizer_kind, "tokenizer.json");
    }
    if (read_json(h, "tokenizer_config.json", 0, &tcfg, err)) goto done;
    if (tcfg) {
        const char *path = dir_file(h, "tokenizer_config.json");
        const char *eos = token_text(tcfg, "eos_token"), *bos = token_text(tcfg, "bos_token");
        if (!have_eos && eos && m->tokenizer) model_add_eos(c, tokenizer_token_id(m->tokenizer, eos));
        if (c->bos_id < 0 && bos && m->tokenizer) c->bos_id = tokenizer_token_id(m->tokenizer, bos);
        has_add_bos = cJSON_GetObjectItemCaseSensitive(tcfg, "add_bos_token") != NULL;
        if (has_add_bos && get_bool(tcfg, path, "add_bos_token", &c->add_bos, err)) goto done;
        /* chat_template: a string, or a list of {name, template} (the "default" one is used) */
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tcfg, "chat_template"), *e;
        if (cJSON_IsString(ct)) tmpl = ct->valuestring;
        if (cJSON_IsArray(ct)) {
            cJSON_ArrayForEach(e, ct) {
                const char *name = token_text(e, "name"), *t = token_text(e, "template");
                if (t && (!tmpl || (name && !strcmp(name, "default")))) tmpl = t;
            }
        }
    }
    if (!has_add_bos && m->tokenizer) {
        cJSON *tj = NULL;
        if (read_json(h, "tokenizer.json", 1, &tj, err)) goto done;
        c->add_bos = post_processor_adds_bos(cJSON_GetObjectItemCaseSensitive(tj, "post_processor"));
        cJSON_Delete(tj);
    }
    if (!tmpl && !access(dir_file(h, "chat_template.jinja"), F_OK)) {
        tmpl_file = kv_read_file(h->path, NULL, err);
        if (!tmpl_file) goto done;
        tmpl = tmpl_file;
    }
    if (c->bos_id < 0) c->add_bos = 0;
    c->chat = model_chat_format(c->arch, m->name, tmpl, tmpl ? strlen(tmpl) : 0);
    rc = 0;
done:
    free(tmpl_file);
    cJSON_Delete(gen);
    cJSON_Delete(tcfg);
    return rc;
}

/* ---------------------------------------------------------------------------------------------------------
 * Weights */

typedef struct {
    cJSON *weight_map;     /* tensor name -> shard file; NULL for a single model.safetensors */
    SafeTensors **shards;
    char **shard_names;
    int n_shards;
} Shards;

static void shards_close(Shards *s) {
    for (int i = 0; i < s->n_shards; i++) {
        st_close(s->shards[i]);
        free(s->shard_names[i]);
    }
    free(s->shards);
    free(s->shard_names);
    cJSON_Delete(s->weight_map);
}

static int shard_open(HfDir *h, Shards *s, const char *name, KvErr *err) {
    for (int i = 0; i < s->n_shards; i++)
        if (!strcmp(s->shard_names[i], name)) return 0;
    if (strchr(name, '/')) return kv_fail(err, "%s: shard name '%s' is not a plain file name", h->path, name);
    SafeTensors **ns = realloc(s->shards, (size_t)(s->n_shards + 1) * sizeof *ns);
    if (ns) s->shards = ns;
    char **nn = realloc(s->shard_names, (size_t)(s->n_shards + 1) * sizeof *nn);
    if (nn) s->shard_names = nn;
    if (!ns || !nn) return kv_fail(err, "%s: out of memory", h->dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", h->dir, name);
    if (access(path, F_OK))
        return kv_fail(err, "%s/model.safetensors.index.json: shard '%s' is missing", h->dir, name);
    SafeTensors *st;
    if (st_open(&st, path, err)) return -1;
    s->shards[s->n_shards] = st;
    s->shard_names[s->n_shards++] = strdup(name);
    return 0;
}

static int shards_open(HfDir *h, Shards *s, KvErr *err) {
    cJSON *index = NULL;
    if (read_json(h, "model.safetensors.index.json", 0, &index, err)) return -1;
    if (!index) {
        if (access(dir_file(h, "model.safetensors"), F_OK))
            return kv_fail(err, "%s: no model.safetensors or model.safetensors.index.json", h->dir);
        return shard_open(h, s, "model.safetensors", err);
    }
    s->weight_map = cJSON_DetachItemFromObjectCaseSensitive(index, "weight_map");
    cJSON_Delete(index);
    dir_file(h, "model.safetensors.index.json");
    if (!cJSON_IsObject(s->weight_map)) return kv_fail(err, "%s: missing key 'weight_map'", h->path);
    if (!s->weight_map->child) return kv_fail(err, "%s: weight_map names no tensor", h->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, s->weight_map) {
        if (!cJSON_IsString(e)) return kv_fail(err, "%s: weight_map entry '%s' is not a file name", h->path, e->string);
        if (shard_open(h, s, e->valuestring, err)) return -1;
    }
    return 0;
}

typedef struct {
    HfDir *h;
    const Shards *shards;
} HfSource;

static int plan_tensor(void *source, const WeightRef *w, int index, TensorCopy *c, KvErr *err) {
    HfDir *h = ((HfSource *)source)->h;
    const Shards *s = ((HfSource *)source)->shards;
    (void)index;
    /* shards_open opened every shard the index names (each a string), and at least one */
    const SafeTensors *st = s->shards[0];
    if (s->weight_map) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s->weight_map, w->hf_name);
        if (!f) return kv_fail(err, "%s/model.safetensors.index.json: no shard holds tensor '%s'", h->dir, w->hf_name);
        for (int i = 0; i < s->n_shards; i++)
            if (!strcmp(s->shard_names[i], f->valuestring)) st = s->shards[i];
    }
    const StTensor *t = st_find(st, w->hf_name);
    if (!t)
        return kv_fail(err, "%s: missing tensor '%s'%s", st_path(st), w->hf_name,
                       s->weight_map ? " (model.safetensors.index.json places it in this shard)" : "");
    if (t->ggml_type < 0)
        return kv_fail(err, "%s: tensor '%s' has dtype %s (kvbench loads F32, F16, BF16)", st_path(st), t->name,
                       t->dtype);
    int ok = t->n_dims == w->n_dims && (w->n_dims == 1 ? t->shape[0] == w->cols
                                                       : t->shape[0] == w->rows && t->shape[1] == w->cols);
    if (!ok) {
        char got[128] = "";
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
                     (unsigned long long)t->shape[i]);
        if (w->n_dims == 1)
            return kv_fail(err, "%s: tensor '%s' has shape [%s], expected [%llu]", st_path(st), t->name, got,
                           (unsigned long long)w->cols);
        return kv_fail(err, "%s: tensor '%s' has shape [%s], expected [%llu, %llu]", st_path(st), t->name, got,
                       (unsigned long long)w->rows, (unsigned long long)w->cols);
    }
    *c = (TensorCopy){.data = t->data, .type = t->ggml_type, .rows = w->rows, .cols = w->cols,
                      .row_bytes = ggml_type_bytes(t->ggml_type, w->cols), .dst = w->dst};
    return 0;
}

int model_load_hf(Model *m, const char *dir, const WeightFill *fill, KvErr *err) {
    HfDir h = {.dir = dir};
    cJSON *cfg = NULL;
    Shards shards = {0};
    HfSource source = {&h, &shards};
    int rc = -1;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *base = dir + n;
    while (base > dir && base[-1] != '/') base--;
    snprintf(m->name, sizeof m->name, "%.*s", (int)(dir + n - base), base);

    if (read_json(&h, "config.json", 1, &cfg, err) || read_config(&h, cfg, &m->cfg, err)) goto done;
    int have_eos = m->cfg.n_eos > 0;
    /* A second read that only streams the weights needs no tokenizer. */
    if ((fill->mode != FILL_VISIT && read_tokenizer_side(&h, m, have_eos, err)) || shards_open(&h, &shards, err) ||
        model_fill_weights(m, fill, plan_tensor, &source, err))
        goto done;
    model_rope_inv_freq(&m->cfg, m->rope_inv_freq);
    rc = 0;
done:
    shards_close(&shards);
    cJSON_Delete(cfg);
    return rc;
}

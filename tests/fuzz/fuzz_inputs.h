/* fuzz_inputs.h — one untrusted input handed to the code that reads it, for the libFuzzer targets
 * (tests/fuzz/fuzz_target.c, `make fuzz`) and for test_model_input's replay of the corpus in tests/data/fuzz/.
 *
 * Targets: "index" (model.safetensors.index.json), "tokenizer_config" (tokenizer_config.json) and "config_json"
 * (config.json) of a Hugging Face directory — the input replaces that file in a copy of the tiny Llama fixture
 * (tests/data/hf_fixtures/llama, two shards) and the model is loaded — and "run_config" (a `kvbench run` config,
 * parsed). "gguf_tokenizer", "tokenizer_json" and "spm_model": the input is a GGUF file, a tokenizer.json or a
 * SentencePiece tokenizer.model; it is loaded as a tokenizer, which then encodes and decodes varied texts (and
 * the input's last bytes as a text of its own). "results_db": the input drives a small generator that edits a
 * copy of a kvbench results database (fuzz_results_db below); the copy is then reported and merged into a new
 * file. "zip": the input is LongBench's data.zip, from which a task is read. "gguf_tensors": the input is a GGUF
 * file; it is opened, every tensor of a type kvbench reads (and at most FUZZ_MAX_ELEMS elements) is dequantised
 * from an exact-size copy of its bytes (so a sanitizer sees any read past them), and the file is loaded as a model.
 * Any input must either load or be refused with one line naming the file (a refused merge leaving no file);
 * anything else (a crash, a sanitizer report, a message without the file or over several lines) is a finding.
 * Run from the project root. */
#ifndef KVBENCH_FUZZ_INPUTS_H
#define KVBENCH_FUZZ_INPUTS_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../../datasets/dataset.h"
#include "../../engine/gguf.h"
#include "../../engine/model.h"
#include "../../engine/tokenizer.h"
#include "../../report/report.h"
#include "../../report/stats.h"
#include "../../runs/config.h"
#include "../../store/store.h"

#define FUZZ_FIXTURE "tests/data/hf_fixtures/llama"

static char fuzz_dir[64];

/* Empties a directory, one level of subdirectories included, and removes it. */
static void fuzz_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p)) fuzz_remove_tree(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}

static void fuzz_remove_dir(void) { fuzz_remove_tree(fuzz_dir); }

/* A temporary copy of the fixture (symlinks to its files, by absolute path), made once per process. */
static int fuzz_make_dir(void) {
    if (fuzz_dir[0]) return 0;
    char cwd[400], src[1024], dst[1024];
    /* in memory where there is a tmpfs: the results_db target creates and deletes databases on every input */
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/kvbench_fuzz_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!getcwd(cwd, sizeof cwd) || !mkdtemp(fuzz_dir)) return -1;
    atexit(fuzz_remove_dir);
    DIR *d = opendir(FUZZ_FIXTURE);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(src, sizeof src, "%s/%s/%s", cwd, FUZZ_FIXTURE, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", fuzz_dir, e->d_name);
        if (symlink(src, dst)) break;
    }
    int ok = d && !e;
    if (d) closedir(d);
    return ok ? 0 : -1;
}

/* Puts `data` in the directory as `file` (the file's fixture original restored by the next call for another file). */
static int fuzz_write(const char *file, const uint8_t *data, size_t n) {
    static const char *const replaceable[] = {"model.safetensors.index.json", "tokenizer_config.json", "config.json"};
    char p[1024], src[1024], cwd[400];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    for (size_t i = 0; i < sizeof replaceable / sizeof replaceable[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir, replaceable[i]);
        snprintf(src, sizeof src, "%s/%s/%s", cwd, FUZZ_FIXTURE, replaceable[i]);
        unlink(p);
        if (strcmp(file, replaceable[i]) && symlink(src, p)) return -1;
    }
    snprintf(p, sizeof p, "%s/%s", fuzz_dir, file);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Writes `data` to fuzz_dir/name; its path in path. */
static int fuzz_put(const char *name, const uint8_t *data, size_t n, char *path, size_t path_n) {
    snprintf(path, path_n, "%s/%s", fuzz_dir, name);
    unlink(path); /* never written through a symlink into the fixture */
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* -1 with the reason in why when a message is not one line naming `must_name`. */
static int fuzz_one_line(const char *target, const char *msg, const char *must_name, char *why, size_t why_n) {
    if (strchr(msg, '\n') || (must_name && !strstr(msg, must_name)) || !msg[0]) {
        snprintf(why, why_n, "%s: refused without one line naming %s: '%s'", target, must_name ? must_name : "it",
                 msg);
        return -1;
    }
    return 0;
}

/* Encodes and decodes varied texts, and the input's last bytes as a text (when valid UTF-8: others must be refused,
 * in one line); decodes every id the vocabulary's first and last 64 hold. */
static int fuzz_tokenizer_use(const Tokenizer *t, const uint8_t *data, size_t n, char *why, size_t why_n) {
    static const char *const texts[] = {
        "", " ", "  hello   world  ", "Hello, world! It's 2024.", "<s>[INST] caf\xc3\xa9 </s>", "caf\xc3\xa9",
        "cafe\xcc\x81 na\xc3\xafve", "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d",
        "\xea\xb0\x80\xeb\x82\x98", "12345 678.9", "\n\n\t tabs\r\n", "<|im_start|>user\nhi<|im_end|>",
        "\xe2\x96\x81 \xe2\x96\x81\xe2\x96\x81x", "a\xcc\x81\xcc\x80\xcc\x82", "<unk><0x41>", "\xef\xbb\xbf BOM",
    };
    size_t nt = sizeof texts / sizeof texts[0];
    char own[65];
    size_t own_n = n < 64 ? n : 64;
    memcpy(own, data + n - own_n, own_n);
    own[own_n] = 0;
    for (size_t i = 0; i <= nt; i++) {
        const char *text = i < nt ? texts[i] : own;
        size_t len = i < nt ? strlen(text) : own_n;
        for (int special = 0; special < 2; special++) {
            TokenIds ids = {0};
            KvErr err = {{0}};
            if (tokenizer_encode(t, text, len, special, &ids, &err)) {
                ids_free(&ids);
                if (fuzz_one_line("encode", err.msg, NULL, why, why_n)) return -1;
                continue;
            }
            for (int flags = 0; flags < 4; flags++) { /* TOK_DECODE_SKIP_SPECIAL, TOK_DECODE_RAW */
                char *back = tokenizer_decode(t, ids.ids, ids.n, flags, &err);
                if (!back && fuzz_one_line("decode", err.msg, NULL, why, why_n)) {
                    ids_free(&ids);
                    return -1;
                }
                free(back);
            }
            ids_free(&ids);
        }
    }
    int nv = tokenizer_vocab_size(t), some[128], k = 0;
    for (int id = 0; id < nv && id < 64; id++) some[k++] = id;
    for (int id = nv - 64 > 64 ? nv - 64 : 64; id < nv; id++) some[k++] = id;
    KvErr err = {{0}};
    for (int flags = 0; flags < 4; flags++)
        for (int i = 0; i < k; i++) {
            char *back = tokenizer_decode(t, &some[i], 1, flags, &err);
            free(back);
        }
    return 0;
}

/* The results database the "results_db" generator edits: a run with two samples (results) and a traced sample
 * (traces, trace_heads, trace_sets), made once per process with the store's own writer. */
static int fuzz_base_db(char *path, size_t path_n) {
    static int made;
    snprintf(path, path_n, "%s/base.db", fuzz_dir);
    if (made) return 0;
    Store *s;
    KvErr err = {{0}};
    long long run;
    StoreRun r = {"t", "{}", "abc", "rev", "m", "m.gguf", "fp=aa", "m.gguf", "cpu", "host", "0/2", 0};
    if (store_open(&s, path, 0, &err) || store_begin_run(s, &r, &run, &err)) return -1;
    StoreVariantKey keys[] = {{"snapkv", "mean", "w=32,k=5", "20%"}, {"defensivekv", "max+prior", "w=32", "20%"},
                              {"full", "mean", "", "100%"}};
    float heads[6] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.4f};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        char key[32];
        snprintf(key, sizeof key, "ruler:vt:%d", i);
        StoreSample m = {"m", "cq=0", key, "ruler", i < 2 ? "vt" : "cwe", "tracing", "string_match_all", i, -1, 4096,
                         3000, 40, "[\"a\"]", NULL, "fp=aa", "seed=42", 0};
        StoreResult res[3];
        for (int k = 0; k < 3; k++) {
            memset(&res[k], 0, sizeof res[k]);
            res[k].key = keys[k];
            res[k].keep_fraction = 0.2;
            res[k].budget_tokens = 600;
            res[k].kept_tokens = 600;
            res[k].prediction = k == 1 && i == 1 ? NULL : "answer";
            res[k].score = 0.5 * k;
            res[k].error = k == 1 && i == 1 ? "out of memory" : NULL;
            res[k].kept_fraction = 0.2;
        }
        rc = store_write_sample(s, run, &m, res, 3, &err);
        if (!rc && i == 2) {
            StoreTrace tr[4];
            for (int k = 0; k < 4; k++)
                tr[k] = (StoreTrace){keys[k % 2], 32, k / 2, 0.7, 0.4, 2, 3, heads};
            StoreTraceSet sets[] = {{keys[0], 600, -1}, {keys[1], 600, 12}};
            m.sample_key = "ruler:cwe:0";
            rc = store_write_traces(s, run, &m, tr, 4, sets, 2, &err);
        }
    }
    store_close(s);
    made = rc == 0;
    return rc;
}

/* The generator: a copy of the base database, its tables made non-STRICT and without NOT NULL when the first
 * byte is odd (what another program could write), then one edit per 8 input bytes — set a column of a row to a
 * value (NULL, an integer, a real, a text, a blob), delete a row, copy a row, or change the schema version. */
static int fuzz_results_db(const uint8_t *data, size_t n, const char *path) {
    static const char *const texts[] = {"abc", "", "mean", "max+prior", "full", "20%", "100%", "m", "fp=aa",
                                        "seed=42", "a'b\"c\nd", "snapkv", "cq=0", "2", "-1", "1e999"};
    static const long long ints[] = {0, 1, -1, 2, 3, 65536, 32768, 2147483647LL, 2147483648LL, -2147483649LL,
                                     9223372036854775807LL, (-9223372036854775807LL - 1), 600, 4096, 100, 7};
    static const double reals[] = {0.0, -0.0, 0.5, 1.0, -1.0, 1e308, -1e308, 1e-320, 3.5, 100.0, 2.5e9, -7.25};
    char base[600], sql[900];
    if (fuzz_base_db(base, sizeof base)) return -1;
    size_t size = 0;
    KvErr err = {{0}};
    char *bytes = kv_read_file(base, &size, &err);
    FILE *f = bytes ? fopen(path, "wb") : NULL;
    int ok = f && fwrite(bytes, 1, size, f) == size;
    if (f) ok = fclose(f) == 0 && ok;
    free(bytes);
    if (!ok) return -1;
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
    if (n > 0 && (data[0] & 1))
        sqlite3_exec(db, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(replace(sql, ') STRICT', "
                         "')'), ' NOT NULL', '') WHERE type = 'table'; PRAGMA writable_schema = OFF;", NULL, NULL, NULL);
    sqlite3_close(db);
    if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
    static const char *const tables[] = {"runs", "samples", "results", "traces", "trace_heads", "trace_sets", "meta"};
    for (size_t at = 1; at + 8 <= n; at += 8) {
        const uint8_t *op = data + at;
        const char *table = tables[op[1] % 7];
        char column[64] = "rowid";
        sqlite3_stmt *st;
        snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') WHERE cid = %d", table, op[2] % 20);
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            snprintf(column, sizeof column, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        int row = op[3] % 8;
        switch (op[0] % 4) {
        case 0:
            snprintf(sql, sizeof sql, "UPDATE %s SET \"%s\" = ?1 WHERE rowid = %d", table, column, row);
            break;
        case 1:
            snprintf(sql, sizeof sql, "DELETE FROM %s WHERE rowid = %d", table, row);
            break;
        case 2:
            snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO %s SELECT * FROM %s WHERE rowid = %d; UPDATE %s SET \"%s\" = "
                                      "?1 WHERE rowid = last_insert_rowid()", table, table, row, table, column);
            break;
        default:
            snprintf(sql, sizeof sql, "UPDATE meta SET value = ?1 WHERE key = 'schema_version'");
        }
        /* The statements one at a time, each with the value bound where it has a ?1. */
        const char *rest = sql;
        while (*rest) {
            if (sqlite3_prepare_v2(db, rest, -1, &st, &rest) != SQLITE_OK || !st) break;
            if (sqlite3_bind_parameter_count(st)) {
                const uint8_t *v = op + 5;
                switch (op[4] % 6) {
                case 0: sqlite3_bind_null(st, 1); break;
                case 1: /* wrapping on purpose: the extremes plus 0..3 */
                    sqlite3_bind_int64(st, 1, (long long)((unsigned long long)ints[v[0] % 16] + (v[1] & 3)));
                    break;
                case 2: sqlite3_bind_double(st, 1, reals[v[0] % 12]); break;
                case 3: sqlite3_bind_text(st, 1, texts[v[0] % 16], -1, SQLITE_STATIC); break;
                case 4: sqlite3_bind_blob(st, 1, v, v[2] % 4, SQLITE_STATIC); break;
                default: sqlite3_bind_zeroblob(st, 1, 4 * (v[0] % 16)); break;
                }
            }
            sqlite3_step(st);
            sqlite3_finalize(st);
        }
    }
    sqlite3_close(db);
    return 0;
}

#define FUZZ_MAX_ELEMS (1u << 20)

/* gguf_tensors: 1 when the file opened (its tensors dequantised, the model loaded or refused in one line), 0 when
 * refused in one line naming it; -1 otherwise. */
static int fuzz_gguf_tensors(const uint8_t *data, size_t n, char *why, size_t why_n) {
    char path[600];
    if (fuzz_make_dir() || fuzz_put("tensors.gguf", data, n, path, sizeof path)) {
        snprintf(why, why_n, "cannot write tensors.gguf");
        return -1;
    }
    KvErr err = {{0}};
    GgufFile *g = NULL;
    if (gguf_open(&g, path, &err)) return fuzz_one_line("gguf_tensors", err.msg, path, why, why_n);
    size_t budget = FUZZ_MAX_ELEMS;
    int rc = 1;
    for (int i = 0; i < gguf_n_tensors(g) && rc == 1; i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        const GgmlTypeTraits *tt = ggml_type_traits(t->type);
        uint64_t elems = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        char reason[384];
        if (!tt || t->ne[0] % tt->block || elems / tt->block * tt->bytes != t->n_bytes) {
            snprintf(why, why_n, "gguf_tensors: tensor '%s' accepted with type %d, shape %llu x %llu x %llu x %llu and "
                     "%zu bytes", t->name, t->type, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                     (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], t->n_bytes);
            rc = -1;
        } else if (!ggml_unreadable(t->type, reason, sizeof reason) && elems <= budget) {
            budget -= elems;
            uint8_t *copy = malloc(t->n_bytes + 1);
            float *out = malloc(elems * sizeof *out + 1);
            if (copy && out) {
                memcpy(copy, t->data, t->n_bytes);
                if (ggml_dequantize(t->type, copy, out, elems, &err)) {
                    snprintf(why, why_n, "gguf_tensors: tensor '%s': %s", t->name, err.msg);
                    rc = -1;
                }
            }
            free(copy);
            free(out);
        }
    }
    gguf_close(g);
    if (rc < 0) return rc;
    Model *m = NULL;
    if (model_load(&m, path, &err) && fuzz_one_line("gguf_tensors (model)", err.msg, path, why, why_n)) rc = -1;
    model_free(m);
    return rc;
}

/* 1 when the input was loaded (parsed), 0 when it was refused properly; else -1 with what went wrong in why. */
static int fuzz_input(const char *target, const uint8_t *data, size_t n, char *why, size_t why_n) {
    KvErr err = {{0}};
    const char *file = !strcmp(target, "index")              ? "model.safetensors.index.json"
                       : !strcmp(target, "tokenizer_config") ? "tokenizer_config.json"
                       : !strcmp(target, "config_json")      ? "config.json"
                                                             : NULL;
    int rc;
    const char *must_name;
    if (file) {
        if (fuzz_make_dir() || fuzz_write(file, data, n)) {
            snprintf(why, why_n, "cannot prepare %s in %s", file, fuzz_dir);
            return -1;
        }
        Model *m = NULL;
        rc = model_load(&m, fuzz_dir, &err);
        model_free(m);
        must_name = fuzz_dir;
    } else if (!strcmp(target, "gguf_tokenizer") || !strcmp(target, "tokenizer_json") ||
               !strcmp(target, "spm_model")) {
        char path[600];
        /* in a directory of its own: a tokenizer.json is read with the tokenizer_config.json beside it */
        const char *name = target[0] == 'g'   ? "tok/fuzz.gguf"
                           : target[0] == 't' ? "tok/tokenizer.json"
                                              : "tok/tokenizer.model";
        char tok_dir[100];
        if (fuzz_make_dir() ||
            (snprintf(tok_dir, sizeof tok_dir, "%s/tok", fuzz_dir), mkdir(tok_dir, 0700) && errno != EEXIST) ||
            fuzz_put(name, data, n, path, sizeof path)) {
            snprintf(why, why_n, "cannot write %s", name);
            return -1;
        }
        Tokenizer *t = NULL;
        rc = tokenizer_load(&t, path, &err);
        if (!rc) {
            int used = fuzz_tokenizer_use(t, data, n, why, why_n);
            tokenizer_free(t);
            if (used) return -1;
            return 1;
        }
        return fuzz_one_line(target, err.msg, path, why, why_n);
    } else if (!strcmp(target, "gguf_tensors")) {
        return fuzz_gguf_tensors(data, n, why, why_n);
    } else if (!strcmp(target, "results_db")) {
        char path[600], out[700], merged[700], tmp[800];
        if (fuzz_make_dir() || fuzz_results_db(data, n, (snprintf(path, sizeof path, "%s/in.db", fuzz_dir), path))) {
            snprintf(why, why_n, "cannot make the database in %s", fuzz_dir);
            return -1;
        }
        snprintf(out, sizeof out, "%s/report", fuzz_dir);
        snprintf(merged, sizeof merged, "%s/merged.db", fuzz_dir);
        snprintf(tmp, sizeof tmp, "%s.merging-%ld", merged, (long)getpid());
        /* No gnuplot: the figure scripts are written, not run (that refusal is the one expected). min_n 2, so
         * the two or three samples a table holds still make intervals, comparisons and verdicts; the fewest
         * resamples the report accepts (STATS_MIN_RESAMPLES), as the bootstrap's paths do not depend on the count
         * and the default 2,000 made this target 100 times slower than 16 did. */
        ReportOptions ro = {path, out, "kvbench-fuzz-no-gnuplot", NULL, 0, 2, STATS_MIN_RESAMPLES};
        int reported = report_write(&ro, &err) == 0 || strstr(err.msg, "gnuplot not found");
        if (!reported && fuzz_one_line("report", err.msg, path, why, why_n)) return -1;
        fuzz_remove_tree(out);
        const char *inputs[] = {path};
        unlink(merged);
        int merge_rc = store_merge_into(merged, inputs, 1, &err);
        if (merge_rc && fuzz_one_line("merge", err.msg, path, why, why_n)) return -1;
        if (merge_rc && (access(merged, F_OK) == 0 || access(tmp, F_OK) == 0)) {
            snprintf(why, why_n, "merge: refused ('%.600s') but left %.600s", err.msg, merged);
            return -1;
        }
        unlink(merged);
        return reported;
    } else if (!strcmp(target, "zip")) {
        char path[600];
        if (fuzz_make_dir() || fuzz_put("data.zip", data, n, path, sizeof path)) {
            snprintf(why, why_n, "cannot write data.zip");
            return -1;
        }
        DatasetOptions o = {0};
        o.data_path = path;
        Dataset *ds;
        rc = dataset_open(&ds, "longbench:trec", &o, &err);
        if (rc) return fuzz_one_line(target, err.msg, path, why, why_n);
        for (int i = 0; i < dataset_count(ds) && i < 16; i++) {
            Sample s;
            if (dataset_get(ds, i, &s, &err) == 0) sample_free(&s);
            else if (fuzz_one_line(target, err.msg, NULL, why, why_n)) {
                dataset_close(ds);
                return -1;
            }
        }
        dataset_close(ds);
        return 1;
    } else if (!strcmp(target, "run_config")) {
        char *text = malloc(n + 1);
        if (!text) return 0;
        memcpy(text, data, n);
        text[n] = '\0';
        RunConfig cfg;
        rc = config_parse(&cfg, "fuzz.json", text, &err);
        if (!rc) config_free(&cfg);
        free(text);
        must_name = "fuzz.json";
    } else {
        snprintf(why, why_n, "unknown fuzz target '%s'", target);
        return -1;
    }
    if (rc && (!strstr(err.msg, must_name) || strchr(err.msg, '\n'))) {
        snprintf(why, why_n, "%s: refused without one line naming %s: '%s'", target, must_name, err.msg);
        return -1;
    }
    return rc == 0;
}

#endif

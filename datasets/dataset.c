/* dataset.c — the public face of datasets/: parses "SUITE:TASK", picks the suite's row of the table and
 * forwards to it; frees samples; lists every task. The suites themselves are longbench.c, ruler.c, niah.c. */
#include <stdlib.h>
#include <string.h>

#include "ds_internal.h"

struct Dataset {
    const SuiteOps *ops;
    void *state;
};

static const SuiteOps *const SUITES[] = {&LONGBENCH_SUITE, &RULER_SUITE, &NIAH_SUITE};
#define N_SUITES (int)(sizeof SUITES / sizeof SUITES[0])

/* Splits spec into its suite row and task name (points into spec). */
static int parse_spec(const char *spec, const SuiteOps **ops, const char **task, KvErr *err) {
    const char *colon = spec ? strchr(spec, ':') : NULL;
    if (!colon || colon == spec || !colon[1])
        return kv_fail(err, "dataset '%s': expected SUITE:TASK (e.g. longbench:multi_news, ruler:vt, niah:needle)",
                       spec ? spec : "(null)");
    for (int i = 0; i < N_SUITES; i++) {
        if (strlen(SUITES[i]->name) == (size_t)(colon - spec) && !strncmp(spec, SUITES[i]->name, colon - spec)) {
            *ops = SUITES[i];
            *task = colon + 1;
            if (!SUITES[i]->task_known(*task))
                return kv_fail(err, "dataset '%s': unknown %s task '%s' (kvbench data list shows them)", spec,
                               SUITES[i]->name, *task);
            return 0;
        }
    }
    return kv_fail(err, "dataset '%s': unknown suite '%.*s' (longbench, ruler, niah)", spec, (int)(colon - spec),
                   spec);
}

int dataset_task_known(const char *spec, KvErr *err) {
    const SuiteOps *ops;
    const char *task;
    return parse_spec(spec, &ops, &task, err) == 0;
}

int dataset_open(Dataset **out, const char *spec, const DatasetOptions *opt, KvErr *err) {
    *out = NULL;
    const SuiteOps *ops;
    const char *task;
    DatasetOptions defaults = {0};
    if (!opt) opt = &defaults;
    if (parse_spec(spec, &ops, &task, err) != 0) return -1;
    if (opt->fraction < 0 || opt->fraction > 1)
        return kv_fail(err, "dataset '%s': fraction %g is outside [0, 1]", spec, opt->fraction);
    if (opt->first_n < 0 || opt->target_tokens < 0 || opt->n_samples < 0)
        return kv_fail(err, "dataset '%s': negative first_n, target_tokens or n_samples", spec);
    Dataset *ds = kv_calloc(1, sizeof *ds, err);
    if (!ds) return -1;
    ds->ops = ops;
    if (ops->open(&ds->state, task, opt, err) != 0) {
        free(ds);
        return kv_wrap(err, "%s", spec);
    }
    *out = ds;
    return 0;
}

int dataset_count(const Dataset *ds) { return ds->ops->count(ds->state); }

int dataset_get(Dataset *ds, int index, Sample *out, KvErr *err) {
    memset(out, 0, sizeof *out);
    int n = dataset_count(ds);
    if (index < 0 || index >= n)
        return kv_fail(err, "%s sample index %d is out of range (the task has %d)", ds->ops->name, index, n);
    char id[512];
    ds->ops->sample_id(ds->state, index, id, sizeof id);
    if (!(out->id = ds_strdup(id, err)) || ds->ops->get(ds->state, index, out, err) != 0) {
        sample_free(out);
        return kv_wrap(err, "%s", id);
    }
    return 0;
}

int dataset_sample_id(const Dataset *ds, int index, char *out, size_t size, KvErr *err) {
    int n = dataset_count(ds);
    if (index < 0 || index >= n)
        return kv_fail(err, "%s sample index %d is out of range (the task has %d)", ds->ops->name, index, n);
    ds->ops->sample_id(ds->state, index, out, size);
    return 0;
}

void dataset_identity(const Dataset *ds, char *out, size_t size) { ds->ops->identity(ds->state, out, size); }

int dataset_skipped(const Dataset *ds) { return ds->ops->skipped(ds->state); }

void dataset_close(Dataset *ds) {
    if (!ds) return;
    ds->ops->close(ds->state);
    free(ds);
}

void sample_free(Sample *s) {
    if (!s) return;
    free(s->id);
    free(s->suite);
    free(s->task);
    free(s->context);
    free(s->question);
    free(s->answer_prefix);
    ds_strv_free(s->answers, s->n_answers);
    ds_strv_free(s->all_classes, s->n_classes);
    free(s->metric);
    free(s->stop_on_newline);
    free(s->domain);
    free(s->note);
    memset(s, 0, sizeof *s);
}

void dataset_print_list(void *file) {
    FILE *f = file;
    fprintf(f, "%-34s %-18s %-20s %s\n", "SUITE:TASK", "METRIC", "DOMAIN", "MAX NEW TOKENS");
    for (int i = 0; i < N_SUITES; i++) SUITES[i]->print_list(f);
}

/* cmd_score.c — `kvbench score`: one prediction scored by one metric, to check a metric by hand against the
 * reference (the number prints as Python prints a float: the shortest text that reads back the same).
 * Usage errors (unknown metric or option, missing value) exit 2, scoring failures 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../metrics/metrics.h"
#include "commands.h"

static const char USAGE[] =
    "usage: kvbench score --metric NAME [--task T] --pred TEXT --answer TEXT [--answer TEXT ...] [--class C ...]\n"
    "  prints the sample's score in [0, 1]; --task applies the task's rules (trec / triviaqa / samsum / lsht\n"
    "  score the first line only); --class lists the label set of classification (trec, lsht)\n";

/* Python's repr of a score: the fewest significant digits that round-trip, "0.0" rather than "0". */
static void print_shortest(double x) {
    char buf[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    printf("%s%s\n", buf, strpbrk(buf, ".e") ? "" : ".0");
}

int cmd_score(int argc, char **argv) {
    const char *metric = NULL, *task = NULL, *pred = NULL;
    const char **answers = calloc((size_t)argc + 1, sizeof *answers);
    const char **classes = calloc((size_t)argc + 1, sizeof *classes);
    int n_answers = 0, n_classes = 0, status = 2;
    if (!answers || !classes) {
        fprintf(stderr, "kvbench score: out of memory\n");
        status = 1;
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            fputs(USAGE, stdout);
            status = 0;
            goto done;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvbench score: %s needs a value\n%s", opt, USAGE);
            goto done;
        }
        const char *val = argv[++i];
        if (!strcmp(opt, "--metric")) metric = val;
        else if (!strcmp(opt, "--task")) task = val;
        else if (!strcmp(opt, "--pred")) pred = val;
        else if (!strcmp(opt, "--answer")) answers[n_answers++] = val;
        else if (!strcmp(opt, "--class")) classes[n_classes++] = val;
        else {
            fprintf(stderr, "kvbench score: unknown option '%s'\n%s", opt, USAGE);
            goto done;
        }
    }
    if (!metric || !pred || n_answers == 0) {
        fprintf(stderr, "kvbench score: --metric, --pred and at least one --answer are required\n%s", USAGE);
        goto done;
    }
    if (!metric_known(metric)) {
        fprintf(stderr, "kvbench score: unknown metric '%s' (known: %s)\n", metric, metric_names());
        goto done;
    }
    KvErr err;
    double score;
    if (metric_score(metric, task, pred, answers, n_answers, n_classes ? classes : NULL, n_classes, &score, &err)) {
        fprintf(stderr, "kvbench score: %s\n", err.msg);
        status = 1;
        goto done;
    }
    print_shortest(score);
    status = 0;
done:
    free(answers);
    free(classes);
    return status;
}

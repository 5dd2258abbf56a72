/* cli.c — the kvbench command line: the subcommand table, --help for each, dispatch. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/backend.h"
#include "../runs/util.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;   /* one line, after "kvbench " */
    const char *details; /* printed by `kvbench NAME --help` after the line; may be NULL */
} Command;

/* run, trace and generate take the backend's options (runs/util.h util_backend_options). */
#define BACKEND_FLAGS_HELP                                                                                      \
    "  " UTIL_BACKEND_FLAGS_USAGE "\n"                                                                          \
    "               the cpu backend's options, over a model's \"cpu\" in the config and the environment's\n"    \
    "               KVBENCH_DECODE, KVBENCH_CACHE, KVBENCH_SIMD, KVBENCH_FAST_KERNEL (docs/running.md)\n"

static const Command COMMANDS[] = {
    {"run", cmd_run, "run CONFIG.json [--db PATH] [--limit N] [--shard i/N] [--memory-limit SIZE] [--decode-samples N]"
     "  run a sweep",
     "  --db PATH    results database (default: the config's \"db\", else results/kvbench.db)\n"
     "  --limit N    at most N samples per task\n"
     "  --shard i/N  only the samples whose id hashes to i mod N (0 <= i < N)\n"
     "  --memory-limit SIZE  memory for a sample's prefill cache and its variants (e.g. 8GiB; default: the config's\n"
     "               \"memory_limit\", else the device's): the variants decode in as few batches as fit, same rows\n"
     "  --decode-samples N  decode the variants of up to N samples as one batch where the memory holds them\n"
     "               (default: the config's \"decode_samples\", else 1): fewer weight reads per step, same rows\n"
     BACKEND_FLAGS_HELP},
    {"report", cmd_report, "report [CONFIG.json | --db PATH] [--out DIR]  tables and figures from a database",
     "  CONFIG.json  report the config's \"db\" (results/kvbench.db when it names none)\n"
     "  --db PATH    report this database; without CONFIG.json or --db: results/kvbench.db, or the only .db in "
     "results/\n"
     "  --out DIR    output folder (default: beside the database, DB_STEM_report/)\n"
     "  --outlier R  fragility outlier threshold on R_t (default 0.5)\n"
     "  --min-n N    fewest samples behind an interval, a * or a verdict (default 10; fewer: \"too few samples\")\n"
     "  --resamples N  bootstrap resamples behind each interval (default 2000, at least 1000)\n"},
    {"trace", cmd_trace, "trace CONFIG.json [--db PATH] [--limit N] [--shard i/N]  retained-importance traces",
     "  options as for run, but --memory-limit\n"},
    {"export", cmd_export, "export --kvpress DIR --db PATH                  results in kvpress's evaluation layout",
     "  one directory per model, suite, task and variant: metrics.json, predictions.csv, config.yaml (docs/kvpress.md)\n"},
    {"merge", cmd_merge, "merge OUT.db IN.db...                           combine shard databases",
     "  rows already in OUT.db are kept, none duplicated\n"},
    {"slurm", cmd_slurm, "slurm CONFIG.json --shards N [--submit] ...     write (and submit) a Slurm job array",
     "  kvbench slurm with no arguments lists every option\n"},
    {"info", cmd_info, "info MODEL                                      model configuration summary",
     "  MODEL: a .gguf file, a Hugging Face directory or synthetic:SHAPE\n"},
    {"tokenize", cmd_tokenize, "tokenize (--model M | --tokenizer P) (--text T | --file F) [--decode]", NULL},
    {"generate", cmd_generate, "generate --model M --prompt T [--chat] [--max-new N] [--backend cpu|cuda]",
     BACKEND_FLAGS_HELP},
    {"select", cmd_select, "select --model M --file F --policy P --budget B [--aggregation A] [--window W]",
     "  B: a keep fraction (0.2 or 20%) or tokens per head (512tok); A: default, mean, max, max+prior\n"},
    {"data", cmd_data, "data list | data show SUITE:TASK --index I [--model M] | data check CONFIG.json [--quiet]",
     "  data check: every input of a config (variables, models, task files, database) checked without loading\n"
     "  weights, every problem listed at once; kvbench run and trace run the same check first\n"},
    {"score", cmd_score, "score --metric NAME [--task T] --pred TEXT --answer TEXT [--answer TEXT ...] [--class C ...]",
     NULL},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    const char *wait = getenv("OMP_WAIT_POLICY");
    fprintf(f, "kvbench — KV-cache eviction benchmarks (backends: %s; OpenMP wait policy: %s)\n\nusage: kvbench "
               "COMMAND ...   (kvbench COMMAND --help for one command)\n",
            backend_available(), wait ? wait : "libgomp's default");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  kvbench %s\n", COMMANDS[i].usage);
}

static int is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int kvbench_main(int argc, char **argv) {
    if (argc < 2 || is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        const Command *c = &COMMANDS[i];
        if (strcmp(argv[1], c->name)) continue;
        /* `kvbench data list --help`: data's subcommands take the flag one place later */
        if ((argc > 2 && is_help(argv[2])) || (!strcmp(c->name, "data") && argc > 3 && is_help(argv[3]))) {
            printf("usage: kvbench %s\n%s", c->usage, c->details ? c->details : "");
            return 0;
        }
        return c->fn(argc - 2, argv + 2);
    }
    fprintf(stderr, "kvbench: unknown command '%s' (try kvbench --help)\n", argv[1]);
    return 2;
}

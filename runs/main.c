/* main.c — the kvbench command line: dispatches to the subcommands of commands.h. */
#include <stdio.h>
#include <string.h>

#include "../engine/backend.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
} Command;

static const Command COMMANDS[] = {
    {"run", cmd_run, "run CONFIG.json [--db PATH] [--limit N] [--shard i/N]   run a sweep into SQLite"},
    {"report", cmd_report, "report [--db PATH] [--out DIR]                 tables and figures from a database"},
    {"trace", cmd_trace, "trace CONFIG.json [--db PATH] [--limit N] [--shard i/N]  retained-importance traces"},
    {"merge", cmd_merge, "merge OUT.db IN.db...                           combine shard databases"},
    {"slurm", cmd_slurm, "slurm CONFIG.json --shards N [--submit] ...     write (and submit) a Slurm job array"},
    {"info", cmd_info, "info MODEL                                      model configuration summary"},
    {"tokenize", cmd_tokenize, "tokenize (--model M | --tokenizer P) (--text T | --file F) [--decode]"},
    {"generate", cmd_generate, "generate --model M --prompt T [--chat] [--max-new N]"},
    {"select", cmd_select, "select --model M --file F --policy P --budget B [--aggregation A]"},
    {"data", cmd_data, "data list | data show SUITE:TASK --index I [--model M]"},
    {"score", cmd_score, "score --metric NAME [--task T] --pred TEXT --answer TEXT [--answer TEXT ...] [--class C ...]"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "kvbench — KV-cache eviction benchmarks (backends: %s)\n\nusage: kvbench COMMAND ...\n",
            backend_available());
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  kvbench %s\n", COMMANDS[i].usage);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "kvbench: unknown command '%s' (try kvbench --help)\n", argv[1]);
    return 2;
}

/* commands.h — the kvbench subcommands. Each takes the arguments after its name and returns the process
 * exit status (0 ok, 1 a failure it reported on stderr, 2 a usage error). One file per group:
 *   cmd_model.c   info, tokenize, generate          (engine)
 *   cmd_select.c  select                            (policies)
 *   cmd_data.c    data                              (datasets)
 *   cmd_run.c     run, report, merge                (runs, report)
 *   cmd_score.c   score                             (metrics)
 *   cmd_slurm.c   slurm                             (scale-out)
 *   cmd_trace.c   trace                             (fragility)
 *   cmd_export.c  export                            (results in kvpress's layout)
 */
#ifndef KVBENCH_COMMANDS_H
#define KVBENCH_COMMANDS_H

#include "../store/store.h"

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_select(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_slurm(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_export(int argc, char **argv);

/* The command line `run` and `trace` share (cmd_run.c): CONFIG.json [--db PATH] [--limit N] [--shard i/N];
 * cmd names the command in messages, trace selects retained-importance traces instead of scored runs. */
int cmd_sweep(const char *cmd, int trace, int argc, char **argv);

/* kvbench merge with store options a test sets (StoreMergeOptions.pause_ms; stop is the command's own). */
int cmd_merge_with(int argc, char **argv, const StoreMergeOptions *test_options);

#endif

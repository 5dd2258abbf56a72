/* cmd_trace.c — `kvbench trace CONFIG.json [--db PATH] [--limit N] [--shard i/N]`: retained-importance traces
 * (docs/fragility.md). The command line, planning, resume, shards and database are those of `kvbench run`
 * (cmd_sweep, runs/sweep.c); per sample the work is runs/trace.c. The config needs a "trace" section. */
#include "commands.h"

int cmd_trace(int argc, char **argv) { return cmd_sweep("trace", 1, argc, argv); }

/* cmd_run.c — PENDING: replaced by the module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench run: not built yet\n"); return 1; }
int cmd_report(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench report: not built yet\n"); return 1; }
int cmd_merge(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench merge: not built yet\n"); return 1; }
int cmd_slurm(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench slurm: not built yet\n"); return 1; }
int cmd_trace(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench trace: not built yet\n"); return 1; }

/* cmd_data.c — PENDING: replaced by the module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_data(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench data: not built yet\n"); return 1; }
int cmd_score(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench score: not built yet\n"); return 1; }

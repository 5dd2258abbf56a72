/* cmd_select.c — PENDING: replaced by the module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_select(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench select: not built yet\n"); return 1; }

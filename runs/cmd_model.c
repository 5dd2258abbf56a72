/* cmd_model.c — PENDING: replaced by the module's owner. */
#include <stdio.h>
#include "commands.h"
int cmd_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench info: not built yet\n"); return 1; }
int cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench tokenize: not built yet\n"); return 1; }
int cmd_generate(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "kvbench generate: not built yet\n"); return 1; }

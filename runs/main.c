/* main.c — the kvbench program: the command line is in cli.c. */
#include "cli.h"

int main(int argc, char **argv) { return kvbench_main(argc, argv); }

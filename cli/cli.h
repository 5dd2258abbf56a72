/* cli.h — the kvbench command line as a function, so tests can run it in-process: dispatches argv[1] to the
 * subcommands of commands.h; `kvbench COMMAND --help` (or -h) prints that command's usage and exits 0 for every
 * command, before the command sees its arguments. */
#ifndef KVBENCH_CLI_H
#define KVBENCH_CLI_H

int kvbench_main(int argc, char **argv);

#endif

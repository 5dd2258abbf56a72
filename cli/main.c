/* main.c — the kvbench program: the command line is in cli.c; before it, the OpenMP wait policy. */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* libgomp reads OMP_WAIT_POLICY once, as the program starts. Its default lets idle threads spin before they sleep,
 * which on a machine busy with other work holds the core their partner thread needs: OpenMP regions (prefill,
 * policy scoring) then crawl at 2 threads. Passive measured level with it on an idle machine (prefill at 512 and
 * 2048 tokens within 3% either way, make bench, 2026-12-01). So kvbench runs passive unless the user chose a
 * policy: it sets the variable and starts itself again, once; if that fails it goes on with libgomp's default. */
int main(int argc, char **argv) {
    if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0) execv("/proc/self/exe", argv);
    return kvbench_main(argc, argv);
}

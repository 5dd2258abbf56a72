/* bench_util.h — the clocks every benchmark program reads, so kvbench and its peer (tests/peer_llama.c) are
 * timed the same way: wall seconds (CLOCK_MONOTONIC), the process's CPU seconds (getrusage: user + system of
 * all its threads, spinning OpenMP workers included) and its peak resident set (ru_maxrss). Tokens per
 * CPU-second hold steady while other jobs load the machine; tokens per wall-second do not. */
#ifndef KVBENCH_BENCH_UTIL_H
#define KVBENCH_BENCH_UTIL_H

#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
    double wall_s, cpu_s;
} BenchClock;

static inline BenchClock bench_clock(void) {
    struct timespec ts;
    struct rusage ru;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    getrusage(RUSAGE_SELF, &ru);
    BenchClock c = {ts.tv_sec + ts.tv_nsec / 1e9, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                                                      ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6};
    return c;
}

/* The time since `start`, wall and CPU. */
static inline BenchClock bench_since(BenchClock start) {
    BenchClock now = bench_clock();
    BenchClock d = {now.wall_s - start.wall_s, now.cpu_s - start.cpu_s};
    return d;
}

/* The one line format run_bench.sh reads: key, items per wall-second, items per CPU-second. */
static inline void bench_print_rate(const char *key, double items, BenchClock spent) {
    printf("%s %.2f %.2f\n", key, items / spent.wall_s, spent.cpu_s > 0 ? items / spent.cpu_s : 0.0);
    fflush(stdout);
}

/* Peak resident set of this process so far, MiB. */
static inline double bench_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static inline void bench_random_ids(int *ids, int n, int vocab, unsigned seed) {
    for (int i = 0; i < n; i++) ids[i] = (int)((seed = seed * 1103515245u + 12345u) >> 8) % vocab;
}

#endif

/* cmd_run.c — `kvbench run`, `kvbench report`, `kvbench merge`, and the command line `kvbench trace` shares
 * with run (cmd_sweep): argument parsing only; the work is in sweep.c (runner), store.c (database) and report/
 * (tables and figures); datacheck.c checks every input first. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/num.h"
#include "../report/report.h"
#include "../runs/config.h"
#include "../runs/datacheck.h"
#include "../runs/memplan.h"
#include "../runs/sweep.h"
#include "../runs/util.h"
#include "../store/protected.h"
#include "../store/store.h"
#include "commands.h"

#define DEFAULT_DB "results/kvbench.db"
#define DEFAULT_DB_DIR "results"
/* The exit status of a run that finished but stored failed rows (1: it stopped, 2: bad command line), so that
 * scripts and Slurm notice (docs/running.md, "Resume and exit status"). */
#define EXIT_ROWS_FAILED 3

/* Reads the value of option argv[*i] into *out; 0 ok, -1 when it is missing (message printed). */
static int option_value(const char *cmd, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvbench %s: %s needs a value\n", cmd, argv[*i]);
        return -1;
    }
    *out = argv[++*i];
    return 0;
}

/* An option's value as an integer in [1, 1000000]. */
static int count_option(const char *cmd, int argc, char **argv, int *i, int *out) {
    const char *text;
    long long n = 0;
    if (option_value(cmd, argc, argv, i, &text)) return -1;
    if (num_parse_integer(text, 1, 1000000, &n)) {
        fprintf(stderr, "kvbench %s: %s '%s': expected an integer in [1, 1000000]\n", cmd, argv[*i - 1], text);
        return -1;
    }
    *out = (int)n;
    return 0;
}

int cmd_sweep(const char *cmd, int trace, int argc, char **argv) {
    const char *config_path = NULL, *db = NULL, *limit = NULL, *shard = NULL, *memory = NULL, *joint = NULL;
    SweepOptions opt = {0};
    for (int i = 0, key; i < argc; i++) {
        if ((key = util_backend_flag(argv[i])) >= 0) {
            if (option_value(cmd, argc, argv, &i, &opt.backend_flags[key])) return 2;
        } else if (!strcmp(argv[i], "--db")) {
            if (option_value(cmd, argc, argv, &i, &db)) return 2;
        } else if (!strcmp(argv[i], "--limit")) {
            if (option_value(cmd, argc, argv, &i, &limit)) return 2;
        } else if (!strcmp(argv[i], "--shard")) {
            if (option_value(cmd, argc, argv, &i, &shard)) return 2;
        } else if (!trace && !strcmp(argv[i], "--memory-limit")) {
            if (option_value(cmd, argc, argv, &i, &memory)) return 2;
        } else if (!trace && !strcmp(argv[i], "--decode-samples")) {
            if (option_value(cmd, argc, argv, &i, &joint)) return 2;
        } else if (argv[i][0] == '-' || config_path) {
            fprintf(stderr, "kvbench %s: unexpected argument '%s'\n"
                            "usage: kvbench %s CONFIG.json [--db PATH] [--limit N] [--shard i/N]%s\n"
                            "         " UTIL_BACKEND_FLAGS_USAGE "\n", cmd, argv[i], cmd,
                    trace ? "" : " [--memory-limit SIZE] [--decode-samples N]");
            return 2;
        } else {
            config_path = argv[i];
        }
    }
    if (!config_path) {
        fprintf(stderr, "usage: kvbench %s CONFIG.json [--db PATH] [--limit N] [--shard i/N]%s\n"
                        "         " UTIL_BACKEND_FLAGS_USAGE "\n"
                        "  --db PATH    results database (default: the config's \"db\", else " DEFAULT_DB ")\n"
                        "  --limit N    at most N samples per task\n"
                        "  --shard i/N  only the samples whose id hashes to i mod N (0 <= i < N)\n"
                        "  --decode, --cache, --simd, --fast-kernel  the cpu backend's options, over each model's "
                        "\"cpu\" in the config and KVBENCH_DECODE, ... (docs/running.md)\n%s", cmd,
                trace ? "" : " [--memory-limit SIZE] [--decode-samples N]",
                trace ? "" : "  --memory-limit SIZE  memory for a sample's prefill cache and its variants (e.g. 8GiB; "
                             "default: the config's \"memory_limit\", else the device's): the variants decode in as "
                             "few batches as fit, with the same rows\n"
                             "  --decode-samples N  decode the variants of up to N samples as one batch where the "
                             "memory holds them (default: the config's \"decode_samples\", else 1), with the same "
                             "rows\n");
        return 2;
    }
    KvErr err = {{0}};
    if (util_backend_flags_check(opt.backend_flags, &err)) {
        fprintf(stderr, "kvbench %s: %s\n", cmd, err.msg);
        return 2;
    }
    if (limit) {
        long long n = 0;
        NumCheck r = num_parse_integer(limit, 1, 100000000, &n);
        if (r) {
            fprintf(stderr, "kvbench %s: --limit '%s': %s\n", cmd, limit,
                    r == NUM_OUT_OF_RANGE ? "out of range [1, 100000000]" : "expected a positive integer");
            return 2;
        }
        opt.limit = (int)n;
    }
    if (joint) {
        long long n = 0;
        NumCheck r = num_parse_integer(joint, 1, CONFIG_MAX_DECODE_SAMPLES, &n);
        if (r) {
            if (r == NUM_OUT_OF_RANGE)
                fprintf(stderr, "kvbench %s: --decode-samples '%s': out of range [1, %d]\n", cmd, joint,
                        CONFIG_MAX_DECODE_SAMPLES);
            else
                fprintf(stderr, "kvbench %s: --decode-samples '%s': expected a positive integer\n", cmd, joint);
            return 2;
        }
        opt.decode_samples = (int)n;
    }
    if ((memory && memplan_parse_bytes(memory, "--memory-limit", &opt.memory_limit, &err)) ||
        (shard && sweep_parse_shard(shard, &opt.shard_index, &opt.shard_count, &err))) {
        fprintf(stderr, "kvbench %s: %s\n", cmd, err.msg);
        return 2;
    }
    char assets[4096];
    if (util_assets_dir(assets, sizeof assets, &err)) {
        fprintf(stderr, "kvbench %s: %s\n", cmd, err.msg);
        return 1;
    }
    opt.assets_dir = assets;
    /* Every input checked, every problem listed, before any model loads or any database is created. */
    DataCheckOptions check = {stderr, 0, 0, db, trace, assets};
    DataCheckResult found;
    datacheck_config(config_path, &check, &found);
    if (found.problems) {
        fprintf(stderr, "kvbench %s: %d problem%s in %s's inputs; nothing was run\n", cmd, found.problems,
                found.problems == 1 ? "" : "s", config_path);
        return 1;
    }
    RunConfig cfg;
    if (config_load(&cfg, config_path, &err)) {
        fprintf(stderr, "kvbench %s: %s\n", cmd, err.msg);
        return 1;
    }
    opt.db_path = db ? db : cfg.db ? cfg.db : DEFAULT_DB;
    opt.log = stderr;
    opt.progress_line = isatty(fileno(stderr));
    opt.trace = trace;
    SweepStats st;
    int rc = sweep_run(&cfg, &opt, &st, &err);
    if (rc) fprintf(stderr, "kvbench %s: %s\n", cmd, err.msg);
    char replaced[64] = "", elsewhere[128] = "";
    if (st.rows_replaced) snprintf(replaced, sizeof replaced, " (and %ld failed rows replaced)", st.rows_replaced);
    if (st.samples_elsewhere)
        snprintf(elsewhere, sizeof elsewhere, ", %d done by another run on this database",
                 st.samples_elsewhere);
    /* A run refused before its first sample has its one line above, not a summary of nothing. */
    if (!rc || st.samples_done)
        fprintf(stderr, "kvbench %s: %d of %d samples done here (%d of them failed)%s, %ld rows written to %s%s; %ld "
                        "rows failed; %.1f s\n", cmd, st.samples_done, st.samples_planned, st.samples_failed, elsewhere,
                st.rows_written, opt.db_path, replaced, st.rows_failed, st.wall_ms / 1000);
    if (!trace && st.samples_done)
        fprintf(stderr, "kvbench %s: %ld decode batches; %d sample%s needed more than one (the memory did not hold "
                        "all their variants at once)\n", cmd, st.decode_batches, st.samples_split,
                st.samples_split == 1 ? "" : "s");
    if (!rc && st.rows_failed)
        fprintf(stderr, "kvbench %s: %ld rows failed (their errors are in the log and the database; a rerun retries "
                        "them): exit status %d\n", cmd, st.rows_failed, EXIT_ROWS_FAILED);
    config_free(&cfg);
    return rc ? 1 : st.rows_failed ? EXIT_ROWS_FAILED : 0;
}

int cmd_run(int argc, char **argv) { return cmd_sweep("run", 0, argc, argv); }

/* The database `kvbench report` reads when given neither a config nor --db: DEFAULT_DB, else the only .db in its
 * folder (the demo writes results/cpu_demo.db); 0 ok, -1 with a message naming the candidates. */
static int default_report_db(char *out, size_t n) {
    if (!access(DEFAULT_DB, F_OK)) {
        snprintf(out, n, "%s", DEFAULT_DB);
        return 0;
    }
    DIR *dir = opendir(DEFAULT_DB_DIR);
    char found[1024] = "";
    int count = 0;
    for (struct dirent *e; dir && (e = readdir(dir));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".db")) continue;
        if (!count) snprintf(out, n, "%s/%s", DEFAULT_DB_DIR, e->d_name);
        snprintf(found + strlen(found), sizeof found - strlen(found), " %s/%s", DEFAULT_DB_DIR, e->d_name);
        count++;
    }
    if (dir) closedir(dir);
    if (count == 1) return 0;
    if (count == 0)
        fprintf(stderr, "kvbench report: no database: neither %s nor any %s/*.db exists (run `kvbench run CONFIG.json` "
                        "first, or pass CONFIG.json or --db PATH)\n", DEFAULT_DB, DEFAULT_DB_DIR);
    else
        fprintf(stderr, "kvbench report: %d databases in %s/ (%s ) and no %s: say which with CONFIG.json or --db PATH\n",
                count, DEFAULT_DB_DIR, found, DEFAULT_DB);
    return -1;
}

int cmd_report(int argc, char **argv) {
    static const char USAGE[] = "usage: kvbench report [CONFIG.json | --db PATH] [--out DIR] [--outlier R] [--min-n N] [--resamples N]   "
                                "(kvbench report --help)\n";
    ReportOptions opt = {NULL, NULL, NULL, stdout, 0, 0, 0};
    const char *config_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *outlier;
        if (!strcmp(argv[i], "--db")) {
            if (option_value("report", argc, argv, &i, &opt.db_path)) return 2;
        } else if (!strcmp(argv[i], "--out")) {
            if (option_value("report", argc, argv, &i, &opt.out_dir)) return 2;
        } else if (!strcmp(argv[i], "--outlier")) {
            char *end;
            if (option_value("report", argc, argv, &i, &outlier)) return 2;
            opt.outlier = strtod(outlier, &end);
            if (end == outlier || *end || !(opt.outlier > 0.0 && opt.outlier <= 1.0)) {
                fprintf(stderr, "kvbench report: --outlier '%s': expected a number in (0, 1]\n", outlier);
                return 2;
            }
        } else if (!strcmp(argv[i], "--min-n")) {
            if (count_option("report", argc, argv, &i, &opt.min_n)) return 2;
        } else if (!strcmp(argv[i], "--resamples")) {
            if (count_option("report", argc, argv, &i, &opt.resamples)) return 2;
        } else if (argv[i][0] != '-' && !config_path) {
            config_path = argv[i];
        } else {
            fprintf(stderr, "kvbench report: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        }
    }
    if (config_path && opt.db_path) {
        fprintf(stderr, "kvbench report: give CONFIG.json or --db, not both\n%s", USAGE);
        return 2;
    }
    KvErr err = {{0}};
    char db[1024], out[1100];
    if (config_path) {
        RunConfig cfg;
        if (config_load(&cfg, config_path, &err)) {
            fprintf(stderr, "kvbench report: %s\n", err.msg);
            return 1;
        }
        snprintf(db, sizeof db, "%s", cfg.db ? cfg.db : DEFAULT_DB);
        config_free(&cfg);
        opt.db_path = db;
    } else if (!opt.db_path) {
        if (default_report_db(db, sizeof db)) return 1;
        opt.db_path = db;
    }
    if (!opt.out_dir) {
        /* beside the database: results/cpu_demo.db -> results/cpu_demo_report */
        size_t len = strlen(opt.db_path);
        int strip = len > 3 && !strcmp(opt.db_path + len - 3, ".db") ? 3 : 0;
        snprintf(out, sizeof out, "%.*s_report", (int)(len - (size_t)strip), opt.db_path);
        opt.out_dir = out;
    }
    if (report_write(&opt, &err)) {
        fprintf(stderr, "kvbench report: %s\n", err.msg);
        return 1;
    }
    printf("kvbench report: %s -> %s/\n", opt.db_path, opt.out_dir);
    return 0;
}

/* The signal that interrupted a merge (0: none). A signal handler can only reach a variable of static storage;
 * this one is written by the handler and read through StoreMergeOptions.stop, nowhere else. */
static volatile sig_atomic_t merge_signal;

static void on_merge_signal(int sig) { merge_signal = sig; }

int cmd_merge_with(int argc, char **argv, const StoreMergeOptions *test_options) {
    if (argc < 2 || argv[0][0] == '-') {
        fprintf(stderr, "usage: kvbench merge OUT.db IN.db...   (rows already in OUT.db are kept, none duplicated; "
                        "inputs that disagree on identity are refused, all of them before anything is copied)\n");
        return 2;
    }
    /* Ctrl-C, kill or a closed terminal: the merge stops and cleans up (a new output's temporary file and its -wal /
     * -shm are removed), then the process ends by the same signal. */
    static const int SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction handler = {0}, was[3];
    handler.sa_handler = on_merge_signal;
    sigemptyset(&handler.sa_mask);
    merge_signal = 0;
    for (int i = 0; i < 3; i++) /* a signal ignored (nohup) stays ignored */
        if (!sigaction(SIGNALS[i], NULL, &was[i]) && was[i].sa_handler != SIG_IGN)
            sigaction(SIGNALS[i], &handler, NULL);
    StoreMergeOptions opt = {&merge_signal, test_options ? test_options->pause_ms : 0};
    KvErr err = {{0}};
    int rc = store_merge_into_with(argv[0], (const char *const *)argv + 1, argc - 1, &opt, &err);
    /* the forced-set shares (store/protected.h) live beside the store's schema and follow the merged rows */
    if (!rc && !merge_signal) rc = protected_merge(argv[0], (const char *const *)argv + 1, argc - 1, &err);
    for (int i = 0; i < 3; i++) sigaction(SIGNALS[i], &was[i], NULL);
    if (rc) fprintf(stderr, "kvbench merge: %s\n", err.msg);
    else fprintf(stderr, "kvbench merge: merged %d database%s into %s\n", argc - 1, argc > 2 ? "s" : "", argv[0]);
    if (merge_signal) {
        fflush(stderr);
        raise(merge_signal);
    }
    return rc ? 1 : 0;
}

int cmd_merge(int argc, char **argv) { return cmd_merge_with(argc, argv, NULL); }

/* test_hostile_names.c — no name reaches a generated script or document as code (report/escape.h,
 * cli/cmd_slurm.c).
 *
 * The hostile names hold quotes of both kinds, newlines, a carriage return, backslashes, `system "touch M"`,
 * `$(touch M)`, backticks, `\input{...}`, `|` and the LaTeX specials; each would create the marker file M if it
 * ran. They go into every source the report reads — model, setup, suite (the dataset), task, domain, policy,
 * aggregation, params, budget label, trace rows — and into the output directory; then the report (gnuplot runs on
 * every figure script: the report fails if any script fails) must create no marker, and its documents must be
 * well formed: every Markdown table row with the header's number of cells, LaTeX with balanced braces and no
 * special character or \input from a name, every CSV record with the header's number of fields. `kvbench slurm`
 * with a config path and a --dir full of shell syntax writes scripts that bash parses and whose command receives
 * exactly those paths as its arguments; a newline in either is refused with one line and nothing written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/err.h"
#include "../report/report.h"
#include "../cli/commands.h"
#include "../store/store.h"
#include "test.h"

static char dir[64];
static char marker[128];

enum { N_HOSTILE = 8 };
static char hostile[N_HOSTILE][300];

/* Each name would touch the marker if a gnuplot script, a shell or TeX ran it. */
static void make_names(void) {
    const char *forms[N_HOSTILE] = {
        "M\"\nsystem \"touch %s\"\n#",           "q'\nsystem 'touch %s'\n'",
        "$(touch %s)",                           "`touch %s`",
        "back\\\\slash\\\" \\%s",                "\\input{%s} \\immediate\\write18{touch %s}",
        "a|b|\r\nc | %s",                        "tex }{ %% # _ & $ ~ ^ %s",
    };
    for (int i = 0; i < N_HOSTILE; i++) snprintf(hostile[i], sizeof hostile[i], forms[i], marker, marker);
}

/* The marker, where an absolute name would make it, or one in any folder below (a relative one in the folder a
 * command ran in). */
static int marker_exists(void) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "find %s -name MARKER | grep -q .", dir);
    return access(marker, F_OK) == 0 || system(cmd) == 0;
}

static char *read_in(const char *d, const char *name) {
    char path[600];
    KvErr err;
    snprintf(path, sizeof path, "%s/%s", d, name);
    return kv_read_file(path, NULL, &err);
}

/* A database where every name is hostile: per section (model, setup, suite) two tasks in two domains, four
 * samples each, the full cache and two policies at two budgets, and trace rows for one policy. */
static void fill_db(const char *path) {
    KvErr err;
    Store *s;
    long long run;
    StoreRun info = {"t", "{}", "h", "rev", hostile[0], "m.gguf", "x", "m.gguf", "cpu", "host", NULL, 0};
    if (store_open(&s, path, 0, &err) || store_begin_run(s, &info, &run, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int sec = 0; sec < 2; sec++) {
        const char *model = hostile[sec], *setup = hostile[(sec + 1) % N_HOSTILE], *suite = hostile[(sec + 2) % N_HOSTILE];
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 4; i++) {
                char key[64];
                snprintf(key, sizeof key, "k:%d:%d", t, i);
                StoreSample m = {model, setup, key, suite, hostile[(t + 3) % N_HOSTILE], hostile[(t + 5) % N_HOSTILE],
                                 "qa_f1", i, t ? 50.0 * (i % 2) : -1, 100 * (1 + i % 2), 100, 10, "[]", NULL, "m",
                                 "d", 0};
                StoreResult r[5];
                const char *policy[] = {"full", hostile[4], hostile[4], "snapkv", "snapkv"};
                const char *agg[] = {"mean", hostile[6], hostile[6], "mean", hostile[7]};
                const char *budget[] = {"full", hostile[7], hostile[1], hostile[7], hostile[7]};
                for (int k = 0; k < 5; k++) {
                    memset(&r[k], 0, sizeof r[k]);
                    r[k].key = (StoreVariantKey){policy[k], agg[k], k ? hostile[5] : "", budget[k]};
                    r[k].keep_fraction = k == 0 ? 1 : k == 2 ? 0.4 : 0.2;
                    r[k].prediction = "p";
                    r[k].score = 0.1 * (k + 1) + 0.05 * (i % 3);
                }
                if (store_write_sample(s, run, &m, r, 5, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    exit(1);
                }
                if (sec || t) continue;
                /* traces: two aggregations of one hostile policy, two steps */
                float heads[4] = {0.9f, 0.4f, 0.8f, 0.7f};
                StoreTrace tr[4];
                StoreTraceSet set[2];
                for (int k = 0; k < 4; k++)
                    tr[k] = (StoreTrace){{hostile[2], hostile[k / 2 ? 3 : 6], hostile[5], hostile[7]}, 32, k % 2,
                                         0.7, 0.4, 2, 2, heads};
                for (int k = 0; k < 2; k++) set[k] = (StoreTraceSet){tr[2 * k].key, 10, -1};
                if (store_write_traces(s, run, &m, tr, 4, set, 2, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    exit(1);
                }
            }
    }
    store_close(s);
}

/* Markdown: in every table (a run of lines starting with '|') each row has as many cells as the header; no line
 * starts with a name's fragment. */
static void check_md(TestCounts *tc, const char *what, const char *md) {
    int cells_header = -1, rows = 0, bad = 0, stray = 0;
    for (const char *p = md; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (*p == '|') {
            int cells = 0;
            for (size_t k = 0; k < len; k++)
                if (p[k] == '\\') k++;
                else cells += p[k] == '|';
            if (cells_header < 0) cells_header = cells;
            else if (cells != cells_header) bad++, fprintf(stderr, "%s: row of %d cells, header %d: %.*s\n", what,
                                                            cells - 1, cells_header - 1, (int)len, p);
            rows++;
        } else {
            cells_header = -1;
        }
        if (!strncmp(p, "system", 6) || !strncmp(p, "c |", 3) || *p == '\'' || *p == '#' * (p[1] != ' ' && p[1] != '#'))
            stray++, fprintf(stderr, "%s: a line from a name: %.*s\n", what, (int)len, p);
        p += len + (p[len] == '\n');
    }
    CHECK(tc, rows > 0 && bad == 0 && stray == 0, "%s: %d table rows, %d malformed; %d lines from names", what, rows,
          bad, stray);
}

/* LaTeX outside comments: braces balance, and no name's \input, #, ~ or unescaped % remains. */
static void check_tex(TestCounts *tc, const char *tex) {
    int depth = 0, min_depth = 0, raw = 0;
    for (const char *p = tex; p && *p; p++) {
        if (*p == '\\' && p[1]) {
            if (!strncmp(p, "\\input{", 7) || !strncmp(p, "\\immediate", 10)) raw++;
            p++;
            continue;
        }
        if (*p == '%') { /* a comment: to the end of the line */
            while (p[1] && p[1] != '\n') p++;
            continue;
        }
        if (*p == '{') depth++;
        if (*p == '}' && --depth < min_depth) min_depth = depth;
        raw += *p == '#' || *p == '~' || *p == '\r';
    }
    CHECK(tc, depth == 0 && min_depth == 0, "report.tex braces: depth %d, lowest %d", depth, min_depth);
    CHECK(tc, raw == 0, "report.tex: %d specials or \\input from names", raw);
}

/* CSV (RFC 4180): every record has the header's number of fields. */
static void check_csv(TestCounts *tc, const char *name, const char *csv) {
    int fields = 1, header = -1, records = 0, bad = 0, quoted = 0;
    for (const char *p = csv; p && *p; p++) {
        if (quoted) {
            if (*p == '"' && p[1] == '"') p++;
            else if (*p == '"') quoted = 0;
        } else if (*p == '"') {
            quoted = 1;
        } else if (*p == ',') {
            fields++;
        } else if (*p == '\n') {
            if (header < 0) header = fields;
            else bad += fields != header;
            records++;
            fields = 1;
        }
    }
    CHECK(tc, csv && records > 1 && bad == 0 && !quoted, "%s: %d records, %d malformed", name, records, bad);
}

static void test_report(TestCounts *tc) {
    char db[128], out[400];
    snprintf(db, sizeof db, "%s/h.db", dir);
    /* the output folder is hostile too (a newline, quotes, $(...)); the report makes it */
    snprintf(out, sizeof out, "%s/o'u\"t $(touch MARKER)\n`x`", dir);
    fill_db(db);
    KvErr err = {{0}};
    ReportOptions opt = {db, out, NULL, NULL, 0, 2, 0};
    int rc = report_write(&opt, &err);
    CHECK(tc, rc == 0, "report (gnuplot ran every script): %s", err.msg);
    CHECK(tc, !marker_exists(), "a name ran a command: %s exists", marker);

    char *md = read_in(out, "report.md"), *tex = read_in(out, "report.tex"), *frag = read_in(out, "fragility.md");
    char *cost = read_in(out, "policy_cost.md");
    CHECK(tc, md && tex && frag && cost, "report.md, report.tex, fragility.md, policy_cost.md written");
    check_md(tc, "report.md", md);
    check_md(tc, "fragility.md", frag);
    check_md(tc, "policy_cost.md", cost);
    CHECK(tc, cost && strstr(cost, "a\\|b\\|  c \\| "), "names escaped in policy_cost.md");
    free(cost);
    check_tex(tc, tex);
    /* the names are there, as text */
    CHECK(tc, md && strstr(md, "a\\|b\\|  c \\| ") && strstr(md, "\\\\input{"), "names escaped in report.md");
    CHECK(tc, tex && strstr(tex, "\\textbackslash{}input\\{") && strstr(tex, "tex \\}\\{ \\% \\# \\_ \\& \\$ "
                                                                           "\\textasciitilde{} \\textasciicircum{}"),
          "names escaped in report.tex");
    const char *csvs[] = {"task_scores.csv", "domain_scores.csv", "ordering.csv", "fragility.csv", "policy_cost.csv"};
    for (int i = 0; i < 5; i++) {
        char *csv = read_in(out, csvs[i]);
        check_csv(tc, csvs[i], csv);
        free(csv);
    }
    free(md), free(tex), free(frag);

    /* every figure script: gnuplot reads it back without error (again, from its folder) and runs nothing */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd \"$KV_OUT\" && n=0 && for f in *.gp; do gnuplot \"$f\" || exit 1; n=$((n+1)); done "
                              "&& [ $n -ge 8 ] && ls *.gp | grep -q '^fragility_'");
    setenv("KV_OUT", out, 1);
    CHECK(tc, system(cmd) == 0, "gnuplot on every script (at least 8, fragility figures among them)");
    CHECK(tc, !marker_exists(), "a script ran a command: %s exists", marker);
    /* a title with a newline in a name is a literal joined by "\n", never a raw line break */
    snprintf(cmd, sizeof cmd, "cd \"$KV_OUT\" && ! grep -l '^system' *.gp");
    CHECK(tc, system(cmd) == 0, "no script line starts with a name's 'system'");
}

/* `kvbench slurm`: hostile paths are shell words; a newline is refused. */
static void test_slurm(TestCounts *tc) {
    char out[4096], errs[4096];
    char cfg[] = "c'$(touch MARKER)`touch MARKER`|x.json";
    /* (a quote or a space in --dir is refused: an #SBATCH line cannot carry it; see below) */
    char sdir[] = "s$(touch${IFS}MARKER)|`x`;&", abs_cfg[600], abs_dir[600];
    snprintf(abs_cfg, sizeof abs_cfg, "%s/%s", dir, cfg);
    snprintf(abs_dir, sizeof abs_dir, "%s/%s", dir, sdir);
    FILE *f = fopen(cfg, "w");
    if (f) {
        fputs("{\"name\": \"c\", \"models\": [{\"path\": \"synthetic:tiny\"}], \"datasets\": [{\"suite\": \"niah\", "
              "\"tasks\": [\"needle\"]}], \"policies\": [\"full\"], \"budgets\": [\"20%\"]}\n", f);
        fclose(f);
    }
    char *argv[] = {cfg, "--shards", "2", "--dir", sdir};
    int rc = test_run_command(cmd_slurm, 5, argv, out, errs, sizeof out);
    CHECK(tc, rc == 0, "slurm with a hostile config path and --dir: rc %d: %s", rc, errs);
    /* bash parses both scripts; the array task's command gets the config path and the database path as written */
    char cmd[2000];
    setenv("KV_DIR", abs_dir, 1);
    setenv("KV_CFG", abs_cfg, 1);
    snprintf(cmd, sizeof cmd,
             "cd \"$KV_DIR\" && bash -n array.sbatch && bash -n merge.sbatch && "
             "sed \"s|^exec '[^']*'|exec printf '%%s\\\\\\\\n'|\" array.sbatch > args.sh && "
             "SLURM_ARRAY_TASK_ID=1 bash args.sh > args.txt && "
             "printf 'run\\n%%s\\n--shard\\n1/2\\n--db\\n%%s/shard_1.db\\n' \"$KV_CFG\" \"$KV_DIR\" | cmp - args.txt");
    CHECK(tc, system(cmd) == 0, "array.sbatch passes the paths as single words (%s)", cmd);
    CHECK(tc, !marker_exists(), "the job script ran a command: %s exists", marker);

    /* a newline in the config path or in --dir: one line, nothing written */
    char nl_cfg[] = "n\nsystem.json", nl_dir[] = "d\n#SBATCH", spaced[] = "with space";
    f = fopen(nl_cfg, "w");
    if (f) {
        fputs("{}", f);
        fclose(f);
    }
    char *a1[] = {nl_cfg, "--shards", "2", "--dir", sdir};
    rc = test_run_command(cmd_slurm, 5, a1, out, errs, sizeof out);
    CHECK(tc, rc == 1 && strstr(errs, "holds a control character") && strstr(errs, "n?system.json") &&
                  strchr(errs, '\n') == errs + strlen(errs) - 1, "newline in the config path: rc %d: %s", rc, errs);
    char *a2[] = {cfg, "--shards", "2", "--dir", nl_dir};
    rc = test_run_command(cmd_slurm, 5, a2, out, errs, sizeof out);
    struct stat st;
    CHECK(tc, rc == 1 && strstr(errs, "--dir") && stat(nl_dir, &st) != 0, "newline in --dir: rc %d: %s", rc, errs);
    char *a3[] = {cfg, "--shards", "2", "--dir", spaced, "--partition", "p"};
    rc = test_run_command(cmd_slurm, 7, a3, out, errs, sizeof out);
    CHECK(tc, rc == 1 && strstr(errs, "#SBATCH") && stat(spaced, &st) != 0, "a space in --dir: rc %d: %s", rc, errs);
}

int main(void) {
    TestCounts tc = {"test_hostile_names", 0, 0, 0};
    snprintf(dir, sizeof dir, "/tmp/kvbench_hostile_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(marker, sizeof marker, "%s/MARKER", dir);
    make_names();
    /* the test runs in its folder: a command from a path would touch MARKER here */
    if (chdir(dir)) return 1;
    /* gnuplot is a dependency (scripts/setup.sh); without it the report fails, and so does this test */
    test_report(&tc);
    test_slurm(&tc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KVBENCH_KEEP_TMP")) fprintf(stderr, "kept %s\n", dir);
    else if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish(&tc);
}

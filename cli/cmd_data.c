/* cmd_data.c — `kvbench data`: list the benchmark tasks, or show one sample exactly as the runner will feed it
 * (context text, question text, answer prefix, answers, generation settings) and, given a model or tokenizer,
 * the token count of each part. Without one, lengths that must be fitted (RULER, NIAH, --target-tokens on
 * LongBench) are counted in whitespace words, and the output says so. `data check CONFIG.json` runs
 * runs/datacheck.c on a config (every input, every problem; exit 1 if any).
 * Usage errors exit 2, failures 1, each with one line on stderr. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/dataset.h"
#include "../engine/num.h"
#include "../engine/tokenizer.h"
#include "../runs/datacheck.h"
#include "../runs/util.h"
#include "commands.h"

#define USAGE                                                                                                   \
    "usage: kvbench data list\n"                                                                                \
    "       kvbench data show SUITE:TASK --index I [--data PATH] [--model M] [--target-tokens N]\n"             \
    "                         [--seed S] [--fraction F] [--first N] [--samples N] [--skip-bad-lines]\n"         \
    "       kvbench data check CONFIG.json [--quiet]\n"                                                         \
    "  check         every data path, task file, model and variable of a config, all problems listed (exit 1\n" \
    "                if any), and the modelled H200 time and memory; --quiet: problems and warnings only\n"     \
    "  --data PATH   LongBench: a directory of TASK.jsonl or data.zip; RULER qa_1/qa_2: SQuAD / HotpotQA file\n" \
    "  --model M     a .gguf, a Hugging Face directory or a tokenizer.json: count tokens with its tokenizer\n"

/* Token counting with a model's tokenizer, special-token strings parsed as the runner encodes prompts. */
static int count_with_tokenizer(void *user, const char *text, int *n_tokens, KvErr *err) {
    TokenIds ids = {0};
    if (tokenizer_encode(user, text, strlen(text), 1, &ids, err) != 0) {
        ids_free(&ids);
        return -1;
    }
    *n_tokens = ids.n;
    ids_free(&ids);
    return 0;
}

static void print_block(const char *title, const char *text) {
    printf("----- %s (%zu bytes) -----\n%s\n", title, strlen(text), text);
}

static int show(const char *spec, int index, const DatasetOptions *opt, const char *counted_in) {
    KvErr err = {{0}};
    Dataset *ds;
    Sample s;
    if (dataset_open(&ds, spec, opt, &err) != 0) {
        fprintf(stderr, "kvbench data: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    if (dataset_get(ds, index, &s, &err) != 0) {
        fprintf(stderr, "kvbench data: %s\n", err.msg);
        dataset_close(ds);
        return 1;
    }
    int n_ctx = 0, n_q = 0;
    if (opt->count_tokens && (opt->count_tokens(opt->count_user, s.context, &n_ctx, &err) != 0 ||
                              opt->count_tokens(opt->count_user, s.question, &n_q, &err) != 0)) {
        fprintf(stderr, "kvbench data: %s: %s\n", s.id, err.msg);
    } else {
        printf("id:             %s   (sample %d of %d)\n", s.id, index, dataset_count(ds));
        printf("metric:         %s   domain: %s\n", s.metric, s.domain);
        printf("generation:     max %d new tokens%s; %s; %s\n", s.max_new_tokens,
               s.stop_on_newline ? ", also stops at a newline" : "",
               s.use_chat ? "chat template" : "no chat template", s.add_bos ? "BOS" : "no BOS");
        if (s.target_tokens > 0) printf("target length:  %d tokens\n", s.target_tokens);
        if (s.depth_percent >= 0) printf("needle depth:   %g%%\n", s.depth_percent);
        if (dataset_skipped(ds) > 0) printf("skipped lines:  %d malformed\n", dataset_skipped(ds));
        if (s.note) printf("note:           %s\n", s.note);
        if (opt->count_tokens) printf("length:         context %d + question %d %s\n", n_ctx, n_q, counted_in);
        for (int a = 0; a < s.n_answers; a++) printf("answer[%d]:      %s\n", a, s.answers[a]);
        for (int c = 0; c < s.n_classes; c++) printf("class[%d]:       %s\n", c, s.all_classes[c]);
        print_block("context", s.context);
        print_block("question", s.question);
        print_block("answer prefix", s.answer_prefix);
        rc = 0;
    }
    sample_free(&s);
    dataset_close(ds);
    return rc;
}

/* `data check CONFIG.json [--quiet]`: exit 0 when the run may start, 1 on any problem. */
static int check(int argc, char **argv) {
    const char *config = NULL;
    int quiet = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (argv[i][0] == '-' || config) {
            fprintf(stderr, "kvbench data: check: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        } else {
            config = argv[i];
        }
    }
    if (!config) {
        fprintf(stderr, "kvbench data: check needs CONFIG.json\n%s", USAGE);
        return 2;
    }
    char assets[4096];
    KvErr err;
    if (util_assets_dir(assets, sizeof assets, &err)) {
        fprintf(stderr, "kvbench data: %s\n", err.msg);
        return 1;
    }
    DataCheckOptions opt = {stdout, !quiet, !quiet, NULL, 0, assets};
    DataCheckResult res;
    datacheck_config(config, &opt, &res);
    printf("%s: %d problem%s, %d warning%s\n", config, res.problems, res.problems == 1 ? "" : "s", res.warnings,
           res.warnings == 1 ? "" : "s");
    return res.problems ? 1 : 0;
}

int cmd_data(int argc, char **argv) {
    if (argc == 1 && !strcmp(argv[0], "list")) {
        dataset_print_list(stdout);
        return 0;
    }
    if (argc >= 1 && !strcmp(argv[0], "check")) return check(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[0], "show") != 0) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *spec = argv[1], *model = NULL;
    char assets[4096];
    KvErr assets_err;
    if (util_assets_dir(assets, sizeof assets, &assets_err)) {
        fprintf(stderr, "kvbench data: %s\n", assets_err.msg);
        return 1;
    }
    DatasetOptions opt = {.seed = 42, .assets_dir = assets};
    long long index = -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--skip-bad-lines")) {
            opt.skip_bad_lines = 1;
            continue;
        }
        static const char *const VALUED[] = {"--data", "--model", "--index", "--fraction", "--seed",
                                             "--target-tokens", "--first", "--samples"};
        int known = 0;
        for (size_t k = 0; k < sizeof VALUED / sizeof *VALUED; k++) known |= !strcmp(a, VALUED[k]);
        if (!known || i + 1 >= argc) {
            fprintf(stderr, "kvbench data: %s '%s'\n%s", known ? "a value is missing after" : "unknown option", a, USAGE);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--data")) {
            opt.data_path = v;
        } else if (!strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "--fraction")) {
            char *end;
            opt.fraction = strtod(v, &end);
            if (end == v || *end || !(opt.fraction >= 0 && opt.fraction <= 1)) {
                fprintf(stderr, "kvbench data: --fraction wants a number in [0, 1], not '%s'\n", v);
                return 2;
            }
        } else {
            long long n = 0, most = strcmp(a, "--seed") ? 1 << 30 : LLONG_MAX;
            NumCheck r = num_parse_integer(v, 0, most, &n);
            if (r == NUM_OUT_OF_RANGE && v[0] != '-') {
                fprintf(stderr, "kvbench data: %s '%s' is out of range [0, %lld]\n", a, v, most);
                return 2;
            }
            if (r) {
                fprintf(stderr, "kvbench data: %s wants a non-negative whole number, not '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--index")) index = n;
            else if (!strcmp(a, "--seed")) opt.seed = (unsigned long long)n;
            else if (!strcmp(a, "--target-tokens")) opt.target_tokens = (int)n;
            else if (!strcmp(a, "--first")) opt.first_n = (int)n;
            else opt.n_samples = (int)n;
        }
    }
    if (index < 0) {
        fprintf(stderr, "kvbench data: show needs --index I (0 = the first sample)\n");
        return 2;
    }
    KvErr err = {{0}};
    if (!dataset_task_known(spec, &err)) {
        fprintf(stderr, "kvbench data: %s\n", err.msg);
        return 1;
    }
    Tokenizer *tok = NULL;
    const char *counted_in = "whitespace words (pass --model to count tokens)";
    opt.count_tokens = dataset_count_words;
    if (model) {
        if (tokenizer_load(&tok, model, &err) != 0) {
            fprintf(stderr, "kvbench data: %s\n", err.msg);
            return 1;
        }
        opt.count_tokens = count_with_tokenizer;
        opt.count_user = tok;
        counted_in = "tokens";
    }
    int rc = show(spec, (int)index, &opt, counted_in);
    tokenizer_free(tok);
    return rc;
}

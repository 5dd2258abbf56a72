/* tables.c — the report's tables: report.md (Markdown), report.tex (LaTeX, booktabs; no resizing, one \label
 * per table, the best value per column in bold) and long-form CSV files with n, mean and the interval bounds.
 *
 * Per section in report.md: what is missing and why (failed rows counted by error, samples without a row); a
 * summary with every budget side by side (average, change against the full cache, difference against the best
 * baseline, each with its 95% interval); the paper's ordering; where a policy ran with several aggregations, the
 * ablation pivoted to rows = policy, columns = aggregation per budget, and as paired differences; per budget the
 * task scores and domain averages with their intervals and the per-task ratio to the full cache. report.tex holds
 * the paper's tables instead: the Table 1 layout (methods as rows in one block per budget, tasks as columns), the
 * summary by budget with its intervals, the ordering and the paired ablation, each cut to fit a 10 pt article's
 * text width and page height. Everything is computed from unrounded means. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "writers.h"

static const char *CHANGE_FORMULA =
    "change = 100 × (avg(method) / avg(full cache) − 1), negative when the method scores below the full cache "
    "(the paper's \"quality loss\", e.g. SnapKV −20.1%); avg is the unweighted mean of the task averages, "
    "over the samples both scored";

#define SUBSTITUTE_NOTE                                                                                          \
    "substituted task: RULER's qa_1 / qa_2 ran as the labelled substitute (essay passages with one templated "  \
    "fact) because no SQuAD / HotpotQA files were given; every average marked † includes it"

typedef enum { FMT_MD, FMT_TEX } Format;

/* The document being written: its format, and in LaTeX the tables placed since the last page break. A run of
 * floats with no text between them never fills a page, so LaTeX places none of them: past 18 it stops ("Too many
 * unprocessed floats") and past 50 its output routine gives up ("Output loop---100 consecutive dead cycles").
 * A \clearpage every TEX_FLOATS_PER_PAGE_BREAK tables places those waiting. */
typedef struct {
    Format fmt;
    int floats_waiting;
} Doc;
enum { TEX_FLOATS_PER_PAGE_BREAK = 16 };

/* ---------------------------------------------------------------- a table, rendered in either format */

enum { MAX_COLS = 512, MAX_ROWS = 256 };

typedef struct {
    double v, lo, hi;   /* NaN: no value; lo/hi NaN: no interval */
    int n;              /* values behind it; shown when short of the column's count (0: not shown) */
    int n_least;        /* a mean over domains: the values of its smallest domain, shown when few */
    int sig;            /* a paired interval that excludes the null value: marked * (stats_significant) */
    int few;            /* from fewer than min_n samples: the value with its n and "too few samples", no
                         * interval, never bold */
    const char *text;   /* printed instead of a number when set */
} TCell;

typedef struct {
    char label[256];
    int reference;      /* the full cache: not a candidate for bold */
    int header;         /* a block's heading (a budget), spanning the table; no cells */
    int block;          /* rows are compared (bold) within their block */
    TCell cells[MAX_COLS];
} TRow;

typedef struct {
    char caption[1024], label[300];
    int n_cols;
    char cols[MAX_COLS][208];
    const char *groups[MAX_COLS];  /* column groups (a budget, a domain) or NULL */
    int counts[MAX_COLS];          /* samples per column, shown as the row "n"; 0 for none */
    int has_counts;
    const char *unit;              /* "%" or "" */
    int no_bold;                   /* the columns are not scores: no best value to single out */
    int compact;                   /* LaTeX values only: a value from fewer than min_n samples printed plain (never
                                    * bold; its n is in the n row) */
    int n_blocks;                  /* table_block headings so far */
    int n_rows;
    TRow *rows[MAX_ROWS];          /* allocated as added: a row is 20 KB, and most tables have a few */
} Table;

/* Text from anywhere (names from the database included) through the format's one escaper (escape.h). */
static void put_text(FILE *f, Format fmt, const char *s) {
    if (fmt == FMT_MD) report_put_md(f, s);
    else report_put_tex(f, s);
}

static Table *table_new(const char *unit) {
    Table *t = calloc(1, sizeof *t);
    if (t) t->unit = unit;
    return t;
}

static void table_free(Table *t) {
    for (int r = 0; t && r < t->n_rows; r++) free(t->rows[r]);
    free(t);
}

static void table_col(Table *t, const char *name, const char *group, int count) {
    if (t->n_cols >= MAX_COLS) return;
    snprintf(t->cols[t->n_cols], sizeof t->cols[0], "%s", name);
    t->groups[t->n_cols] = group;
    t->counts[t->n_cols] = count;
    t->has_counts |= count > 0;
    t->n_cols++;
}

static TRow *table_row(Table *t, const char *label, int reference) {
    TRow *r = t->n_rows < MAX_ROWS ? malloc(sizeof *r) : NULL;
    if (!r) return NULL;
    t->rows[t->n_rows++] = r;
    snprintf(r->label, sizeof r->label, "%s", label);
    r->reference = reference;
    r->header = 0;
    r->block = t->n_blocks;
    for (int i = 0; i < MAX_COLS; i++) r->cells[i] = (TCell){NAN, NAN, NAN, 0, 0, 0, 0, NULL};
    return r;
}

/* A heading row that starts a block of rows (bold is per block): a budget in the paper's layout. */
static TRow *table_block(Table *t, const char *label) {
    t->n_blocks++;
    TRow *r = table_row(t, label, 1);
    if (r) r->header = 1;
    return r;
}

/* A value with its interval, which is left out below min_n samples (stats.h, STATS_MIN_N). */
static TCell cell_of(const StatsInterval *ci, int min_n) {
    int few = stats_too_few(ci, min_n);
    return (TCell){ci->value, few ? NAN : ci->lo, few ? NAN : ci->hi, ci->n, ci->n_least, 0, few, NULL};
}

/* A paired comparison: the same, marked * where the data support a difference from `null`. */
static TCell compared(const StatsInterval *ci, double null, int min_n) {
    TCell c = cell_of(ci, min_n);
    c.sig = stats_significant(ci, null, min_n);
    return c;
}

/* Why a value has no interval: "(n=3, too few samples)", or for a mean over domains whose smallest is short,
 * "(n=15, 3 in a domain: too few samples)". */
static void put_few(FILE *f, const TCell *c) {
    if (c->n_least > 0 && c->n_least < c->n) fprintf(f, "(n=%d, %d in a domain: too few samples)", c->n, c->n_least);
    else fprintf(f, "(n=%d, too few samples)", c->n);
}

/* A value to 2 decimals; in LaTeX a minus sign, not a hyphen. */
/* A value as printed, to 2 decimals, and never -0.00 (a difference of 1e-14 from summing in another order is 0). */
static double shown(double v) {
    double r = round(v * 100) / 100;
    return r == 0 ? 0 : r;
}

static void put_number(FILE *f, Format fmt, double v, const char *unit) {
    v = shown(v);
    if (isnan(v)) fputs(fmt == FMT_TEX ? "--" : "–", f);
    else if (fmt == FMT_TEX) fprintf(f, "%s%.2f%s", v < 0 ? "$-$" : "", fabs(v), !strcmp(unit, "%") ? "\\%" : unit);
    else fprintf(f, "%.2f%s", v, unit);
}

/* The best (largest) value of column i among the non-reference rows as printed, to print in bold (every cell
 * that prints it); NaN when fewer than two have a value or all of them print alike (nothing to single out). */
static double column_best(const Table *t, int i, int block) {
    if (t->no_bold) return NAN;
    double best = NAN, worst = NAN;
    int n = 0;
    for (int r = 0; r < t->n_rows; r++) {
        double v = shown(t->rows[r]->cells[i].v);
        if (t->rows[r]->reference || t->rows[r]->block != block || isnan(v) || t->rows[r]->cells[i].few) continue;
        n++;
        if (isnan(best) || v > best) best = v;
        if (isnan(worst) || v < worst) worst = v;
    }
    return n >= 2 && best > worst ? best : NAN;
}

static void put_label(FILE *f, const char *label) {
    for (const char *p = label; *p; p++)
        fputc((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == ':' ||
                      *p == '-' ? *p : '-', f);
}

static void emit_md(FILE *f, const Table *t) {
    fputs("\n**", f);
    put_text(f, FMT_MD, t->caption);
    fputs("**\n\n| Method |", f);
    for (int i = 0; i < t->n_cols; i++) {
        fputc(' ', f);
        if (t->groups[i]) {
            put_text(f, FMT_MD, t->groups[i]);
            fputs(": ", f);
        }
        put_text(f, FMT_MD, t->cols[i]);
        fputs(" |", f);
    }
    fputs("\n|---|", f);
    for (int i = 0; i < t->n_cols; i++) fputs("---:|", f);
    fputc('\n', f);
    if (t->has_counts) {
        fputs("| n |", f);
        for (int i = 0; i < t->n_cols; i++) t->counts[i] ? fprintf(f, " %d |", t->counts[i]) : fputs(" |", f);
        fputc('\n', f);
    }
    for (int r = 0; r < t->n_rows; r++) {
        const TRow *row = t->rows[r];
        fputs("| ", f);
        if (row->header) {
            fputs("*", f);
            put_text(f, FMT_MD, row->label);
            fputs("*", f);
            for (int i = 0; i < t->n_cols; i++) fputs(" |", f);
            fputc('\n', f);
            continue;
        }
        put_text(f, FMT_MD, row->label);
        for (int i = 0; i < t->n_cols; i++) {
            const TCell *c = &row->cells[i];
            double best = column_best(t, i, row->block);
            int bold = !row->reference && !isnan(c->v) && !c->few && shown(c->v) == best;
            fputs(" | ", f);
            if (c->text) {
                put_text(f, FMT_MD, c->text);
                continue;
            }
            if (bold) fputs("**", f);
            put_number(f, FMT_MD, c->v, t->unit);
            if (bold) fputs("**", f);
            if (c->few) {
                fputc(' ', f);
                put_few(f, c);
                continue;
            }
            if (c->sig) fputs("\\*", f); /* escaped: a bare * after bold reads as emphasis */
            if (!isnan(c->lo)) fprintf(f, " [%.2f, %.2f]", shown(c->lo), shown(c->hi));
            if (c->n && t->counts[i] && c->n != t->counts[i]) fprintf(f, " (n=%d)", c->n);
        }
        fputs(" |\n", f);
    }
}

/* ---- LaTeX: a table split into parts that each fit a 10 pt article's text width */

/* Widths in pt, estimated from the text (Computer Modern, \small: about 4.5 pt a character, \scriptsize 3.5),
 * on the safe side; the test compiles the result and fails on any overfull box. */
enum { TEX_TEXT_WIDTH = 345, TEX_TEXT_HEIGHT = 490, TEX_COL_SEP = 12, TEX_LABEL_MAX = 95, TEX_TEXT_MAX = 80,
       TEX_HEAD_MAX = 50 };

static double tex_chars(const char *s) {
    double n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}

static double tex_small(const char *s) { return 4.5 * tex_chars(s) + 2; }

/* Text wrapped at most to max pt where report_put_tex_break lets a line break (at a space, or after a '_' or a
 * ','): the width it needs, no narrower than its longest word, and in *lines the lines it then takes, filled
 * greedily as \raggedright does. */
static double tex_wrap(const char *s, double max, int *lines) {
    double w = tex_small(s);
    *lines = 1;
    if (w <= max) return w;
    char word[256];
    for (int pass = 0; pass < 2; pass++) {
        double line = 0;
        for (const char *p = s; *p;) {
            size_t len = strcspn(p, " _,");
            len += p[len] == '_' || p[len] == ',';
            snprintf(word, sizeof word, "%.*s", (int)(len < 255 ? len : 255), p);
            int spaced = p > s && p[-1] == ' ';
            p += len + (p[len] == ' ');
            if (pass == 0) {
                max = fmax(max, tex_small(word));
                continue;
            }
            double add = 4.5 * tex_chars(word) + (spaced && line > 0 ? 4.5 : 0);
            if (line > 0 && line + add > max - 2) (*lines)++, line = 4.5 * tex_chars(word);
            else line += add;
        }
    }
    return max;
}

static double tex_wrap_width(const char *s, double max) {
    int lines;
    return tex_wrap(s, max, &lines);
}

/* The height in pt of text wrapped at most to max pt: a row of one line 10 (a compiled table measured 9.3), each
 * further line 11 (\small's baseline skip). */
static double tex_wrap_height(const char *s, double max) {
    int lines;
    tex_wrap(s, max, &lines);
    return 10 + 11 * (lines - 1);
}

/* The estimated width of cell c of column i. */
static double tex_cell_width(const Table *t, int i, const TCell *c) {
    char buf[64];
    if (c->text) return tex_wrap_width(c->text, TEX_TEXT_MAX);
    double w = 4.5 * 7 + (c->sig ? 5 : 0) + (strcmp(t->unit, "%") ? 0 : 7);
    if (c->few && !t->compact) {
        FILE *m = fmemopen(buf, sizeof buf, "w");
        if (m) put_few(m, c), fclose(m);
        w = fmax(w, 3.5 * tex_chars(buf) + 2);
    }
    else if (c->n && t->counts[i] && c->n != t->counts[i]) w += 18;
    if (!isnan(c->lo)) {
        snprintf(buf, sizeof buf, "[%.2f, %.2f]", shown(c->lo), shown(c->hi));
        w = fmax(w, 3.5 * tex_chars(buf) + 2);
    }
    return w;
}

/* Text that may be wider than its column's share: wrapped in a paragraph box of at most max pt, in a table whose
 * font is `scale` times \\small (the widths are in \\small's). */
static void tex_wrapped(FILE *f, const char *text, double max, int right, double scale) {
    if (tex_small(text) <= max) {
        report_put_tex(f, text);
        return;
    }
    fprintf(f, "\\parbox[t]{%.0fpt}{%s", ceil(max * scale), right ? "\\raggedleft " : "\\raggedright ");
    report_put_tex_break(f, text);
    fputs("}", f);
}

/* The end of the column group that starts at column i (columns sharing a group name), at most `to`. */
static int group_end(const Table *t, int i, int to) {
    int j = i + 1;
    while (j < to && t->groups[i] && t->groups[j] && !strcmp(t->groups[j], t->groups[i])) j++;
    return j;
}

/* The width of columns [i, j) with the gaps between them. */
static double span_width(const double *width, int i, int j, double sep) {
    double w = width[i];
    for (int k = i + 1; k < j; k++) w += width[k] + sep;
    return w;
}

/* Columns [from, to) of rows [r0, r1) of t as one tabular (part `part` of n_parts). */
static void emit_tex_part(FILE *f, const Table *t, int from, int to, int r0, int r1, int part, int n_parts,
                          const double *width, double label_w, double scale) {
    fputs("\n\\begin{table}[htbp]\n\\centering\\small\n\\caption{", f);
    if (part == 0) report_put_tex(f, t->caption);
    else {
        char head[300];
        snprintf(head, sizeof head, "(continued, part %d of %d) ", part + 1, n_parts);
        report_put_tex(f, head);
        report_put_tex(f, t->caption);
    }
    fputs("}\n\\label{", f);
    put_label(f, t->label);
    if (part) fprintf(f, ":part%d", part + 1);
    /* a compact table in \\scriptsize with half the column gap, so a suite's tasks fit beside each other */
    fputs(t->compact ? "}\n\\scriptsize\\setlength{\\tabcolsep}{3pt}\n\\begin{tabular}{l" : "}\n\\begin{tabular}{l", f);
    for (int i = from; i < to; i++) fputc('r', f);
    fputs("}\n\\toprule\n", f);
    int any_group = 0;
    for (int i = from; i < to; i++) any_group |= t->groups[i] != NULL;
    if (any_group) {
        int start[MAX_COLS], end[MAX_COLS], n_spans = 0;
        for (int i = from; i < to;) {
            int j = group_end(t, i, to);
            double w = span_width(width, i, j, t->compact ? 6 / scale : TEX_COL_SEP);
            fputs(" & ", f);
            if (t->groups[i]) {
                fprintf(f, "\\multicolumn{%d}{c}{", j - i);
                if (tex_small(t->groups[i]) > w) {
                    fprintf(f, "\\parbox[b]{%.0fpt}{\\centering ", ceil(tex_wrap_width(t->groups[i], w) * scale));
                    report_put_tex(f, t->groups[i]);
                    fputs("}", f);
                } else report_put_tex(f, t->groups[i]);
                fputs("}", f);
                start[n_spans] = i - from + 2, end[n_spans++] = j - from + 1;
            }
            i = j;
        }
        fputs(" \\\\\n", f);
        for (int k = 0; k < n_spans; k++) fprintf(f, "\\cmidrule(lr){%d-%d}", start[k], end[k]);
        if (n_spans) fputc('\n', f);
    }
    fputs("Method", f);
    for (int i = from; i < to; i++) {
        fputs(" & ", f);
        tex_wrapped(f, t->cols[i], width[i], 1, scale);
    }
    fputs(" \\\\\n", f);
    if (t->has_counts) {
        fputs("$n$", f);
        for (int i = from; i < to; i++) t->counts[i] ? fprintf(f, " & %d", t->counts[i]) : fputs(" &", f);
        fputs(" \\\\\n", f);
    }
    fputs("\\midrule\n", f);
    for (int r = r0; r < r1; r++) {
        const TRow *row = t->rows[r];
        int any_ci = 0;
        if (row->header) {
            if (r > r0) fputs("\\midrule\n", f);
            fprintf(f, "\\multicolumn{%d}{l}{\\textit{", to - from + 1);
            report_put_tex(f, row->label);
            fputs("}} \\\\\n", f);
            continue;
        }
        tex_wrapped(f, row->label, label_w, 0, scale);
        for (int i = from; i < to; i++) {
            const TCell *c = &row->cells[i];
            double best = column_best(t, i, row->block);
            int bold = !row->reference && !isnan(c->v) && !c->few && shown(c->v) == best;
            fputs(" & ", f);
            if (c->text) {
                tex_wrapped(f, c->text, width[i], 0, scale);
                continue;
            }
            if (c->few && t->compact) {
                put_number(f, FMT_TEX, c->v, t->unit);
                continue;
            }
            if (c->few) {
                /* the value over its n, so the cell is as narrow as the note */
                fputs("\\shortstack[r]{", f);
                put_number(f, FMT_TEX, c->v, t->unit);
                fputs("\\\\{\\scriptsize ", f);
                put_few(f, c);
                fputs("}}", f);
                continue;
            }
            if (bold) fputs("\\textbf{", f);
            put_number(f, FMT_TEX, c->v, t->unit);
            if (bold) fputs("}", f);
            if (c->sig) fputs("$^{*}$", f);
            if (c->n && t->counts[i] && c->n != t->counts[i]) fprintf(f, "$_{n=%d}$", c->n);
            any_ci |= !isnan(c->lo);
        }
        fputs(" \\\\\n", f);
        if (!any_ci) continue;
        /* the intervals on a second line, small */
        for (int i = from; i < to; i++) {
            const TCell *c = &row->cells[i];
            fputs(" & ", f);
            if (isnan(c->lo)) continue;
            fputs("{\\scriptsize[", f);
            put_number(f, FMT_TEX, c->lo, "");
            fputs(", ", f);
            put_number(f, FMT_TEX, c->hi, "");
            fputs("]}", f);
        }
        fputs(" \\\\\n", f);
    }
    fputs("\\bottomrule\n\\end{tabular}\n\\end{table}\n", f);
}

/* The table in as few parts as fit the text width, each part whole column groups where a group fits (a budget's
 * columns stay together), the method column repeated in each. */
static void emit_tex(FILE *f, Doc *doc, const Table *t) {
    /* widths in \\small's pt; a compact table is set in \\scriptsize (7 of 9 pt, whose letters measured 0.84 as
     * wide as the estimate's) with a 6 pt column gap */
    double scale = t->compact ? 0.84 : 1.0, sep = t->compact ? 6 / scale : TEX_COL_SEP;
    double width[MAX_COLS], label_w = tex_small("Method");
    for (int r = 0; r < t->n_rows; r++) label_w = fmax(label_w, tex_wrap_width(t->rows[r]->label, TEX_LABEL_MAX));
    for (int i = 0; i < t->n_cols; i++) {
        width[i] = tex_wrap_width(t->cols[i], t->compact ? 1 : TEX_HEAD_MAX);
        for (int r = 0; r < t->n_rows; r++) width[i] = fmax(width[i], tex_cell_width(t, i, &t->rows[r]->cells[i]));
    }
    /* a group's heading wraps at most to its longest word (a model's name has no break): the group's last column
     * takes what its columns lack */
    for (int i = 0, j; i < t->n_cols; i = j) {
        j = group_end(t, i, t->n_cols);
        double w = span_width(width, i, j, sep);
        if (t->groups[i]) width[j - 1] += fmax(0, tex_wrap_width(t->groups[i], w) - w);
    }
    double room = TEX_TEXT_WIDTH / scale - label_w - 2 * sep;
    int cut[MAX_COLS + 1], n_parts = 0;
    cut[0] = 0;
    for (int i = 0; i < t->n_cols;) {
        /* the next group (columns sharing a group name), added whole when it fits, else column by column */
        int j = group_end(t, i, t->n_cols);
        double w = span_width(width, i, j, sep) + sep;
        double used = 0;
        for (int k = cut[n_parts]; k < i; k++) used += width[k] + sep;
        if (used > 0 && used + w > room) {
            cut[++n_parts] = i;
            used = 0;
        }
        if (used + w <= room) {
            i = j;
            continue;
        }
        for (; i < j; i++) { /* a group wider than a part: split it */
            used = 0;
            for (int k = cut[n_parts]; k < i; k++) used += width[k] + sep;
            if (used > 0 && used + width[i] + sep > room) cut[++n_parts] = i;
        }
    }
    cut[++n_parts] = t->n_cols;
    /* and in as few parts as fit the page's height, cut before a block heading where one is near (else anywhere):
     * heights in pt, estimated on the safe side (a \\small row 10, its interval line 9, a caption line 12; a
     * compiled table measured 9.3 a row) */
    int rcut[MAX_ROWS + 1], n_rparts = 0;
    rcut[0] = 0;
    double head = 10, groups = 0;
    for (int i = 0; i < t->n_cols; i++) head = fmax(head, tex_wrap_height(t->cols[i], width[i]));
    for (int i = 0, j; i < t->n_cols; i = j) {
        j = group_end(t, i, t->n_cols);
        if (t->groups[i]) groups = fmax(groups, tex_wrap_height(t->groups[i], span_width(width, i, j, sep)) + 4); /* and its rule */
    }
    double fixed = 12 * (tex_chars(t->caption) / 60 + 2) + 40 + head + groups + (t->has_counts ? 11 : 0), used = fixed;
    for (int r = 0; r < t->n_rows; r++) {
        const TRow *row = t->rows[r];
        double h = row->header ? 16 : tex_wrap_height(row->label, label_w);
        int any_ci = 0;
        for (int i = 0; i < t->n_cols && !row->header; i++) {
            const TCell *c = &row->cells[i];
            if (c->few && !t->compact) h = fmax(h, 19); /* the value over its note */
            if (c->text) h = fmax(h, tex_wrap_height(c->text, width[i]));
            any_ci |= !isnan(c->lo);
        }
        h += any_ci ? 9 : 0; /* the intervals' line */
        if (used + h > TEX_TEXT_HEIGHT && r > rcut[n_rparts]) {
            int at = r; /* back to the block's heading when it is in this part's second half */
            for (int k = r; k > rcut[n_rparts] + (r - rcut[n_rparts]) / 2; k--)
                if (t->rows[k]->header) {
                    at = k;
                    break;
                }
            rcut[++n_rparts] = at;
            r = at - 1;
            used = fixed;
            continue;
        }
        used += h;
    }
    rcut[++n_rparts] = t->n_rows;
    int part = 0, total = n_parts * n_rparts;
    for (int q = 0; q < n_rparts; q++)
        for (int p = 0; p < n_parts; p++) {
            if (doc->floats_waiting == TEX_FLOATS_PER_PAGE_BREAK) {
                fputs("\n\\clearpage\n", f);
                doc->floats_waiting = 0;
            }
            emit_tex_part(f, t, cut[p], cut[p + 1], rcut[q], rcut[q + 1], part++, total, width, label_w, scale);
            doc->floats_waiting++;
        }
}

static void emit(FILE *f, Doc *doc, const Table *t) {
    if (doc->fmt == FMT_MD) emit_md(f, t);
    else emit_tex(f, doc, t);
}

/* ---------------------------------------------------------------- a section */

/* A paragraph of Markdown, a comment in LaTeX. */
static void note(FILE *f, Format fmt, const char *text) {
    fputc('\n', f);
    if (fmt == FMT_TEX) {
        report_put_tex_comment(f, text);
        return;
    }
    report_put_md(f, text);
    fputc('\n', f);
}

static const char *task_name(const ReportSection *s, int t, char *buf, size_t n) {
    snprintf(buf, n, "%s%s", s->tasks[t], s->task_substitute[t] ? "†" : "");
    return buf;
}

/* A Markdown line: escaped, then a newline. */
static void put_line(FILE *f, const char *text) {
    report_put_md(f, text);
    fputc('\n', f);
}

/* What is missing and why: failed rows counted by message, samples without a row, cells not run. */
static void coverage(FILE *f, Format fmt, const ReportSection *s) {
    char line[2048];
    int missing = 0;
    for (int c = -1; c < s->n_methods * s->n_budgets; c++) {
        const ReportCell *x = c < 0 ? &s->full : &s->cells[c];
        for (int t = 0; x->ran && t < s->n_tasks; t++) missing += x->n_missing[t];
    }
    int fewest = 0, at = -1;
    for (int t = 0; t < s->n_tasks; t++)
        if (at < 0 || s->task_samples[t] < fewest) fewest = s->task_samples[t], at = t;
    int k = snprintf(line, sizeof line, "%d samples in %d tasks; %d result rows, %d failed (excluded from every mean), "
                     "%d (sample, method, budget) rows missing.", s->n_samples, s->n_tasks, s->n_rows,
                     s->n_failed_rows, missing);
    if (s->n_tasks > 1 && fewest < STATS_MIN_STRATUM)
        snprintf(line + k, sizeof line - (size_t)k, " Intervals over several tasks are pooled (task %s holds %d "
                 "sample%s, fewer than %d).", s->tasks[at], fewest, fewest == 1 ? "" : "s", STATS_MIN_STRATUM);
    else if (s->n_tasks > 1)
        snprintf(line + k, sizeof line - (size_t)k, " Intervals over several tasks are stratified by task (where a "
                 "failed row leaves a task fewer than %d samples, that interval is pooled).", STATS_MIN_STRATUM);
    note(f, fmt, line);
    if (fmt == FMT_TEX) return;
    for (int i = 0; i < s->n_failures; i++) {
        const ReportFailure *x = &s->failures[i];
        char line[2048];
        snprintf(line, sizeof line, "- failed: %s at %s, %d row%s: %s",
                 x->method < 0 ? "full" : s->methods[x->method].label,
                 x->budget < 0 ? "full" : s->budgets[x->budget].label, x->count, x->count == 1 ? "" : "s", x->error);
        put_line(f, line);
    }
    for (int c = -1; c < s->n_methods * s->n_budgets; c++) {
        const ReportCell *x = c < 0 ? &s->full : &s->cells[c];
        const char *who = c < 0 ? "full" : s->methods[c / s->n_budgets].label;
        const char *at = c < 0 ? "full" : s->budgets[c % s->n_budgets].label;
        char line[1024];
        if (!x->ran) {
            if (c >= 0) snprintf(line, sizeof line, "- not run: %s at %s", who, at);
            else snprintf(line, sizeof line, "- not run: the full cache (no change or ratio without it)");
            if (c >= 0 || s->n_methods) put_line(f, line);
            continue;
        }
        int n = 0;
        for (int t = 0; t < s->n_tasks; t++) n += x->n_missing[t];
        snprintf(line, sizeof line, "- missing: %s at %s, %d sample%s without a row (run interrupted or limited)",
                 who, at, n, n == 1 ? "" : "s");
        if (n) put_line(f, line);
    }
}

static void set_labels(Table *t, const ReportSection *s, const char *kind, const char *budget) {
    snprintf(t->label, sizeof t->label, "tab:%s:%s%s%s", s->stem, kind, budget ? ":" : "", budget ? budget : "");
}

/* Whether method m is one of the paper-layout rows in LaTeX: a policy at its default aggregation, or a policy
 * that did not run at its default (then every aggregation it ran). The other variants are in the ablation. */
static int in_main(const ReportSection *s, int m) {
    if (report_is_published(&s->methods[m])) return 1;
    for (int o = 0; o < s->n_methods; o++)
        if (!strcmp(s->methods[o].policy, s->methods[m].policy) && !strcmp(s->methods[o].params, s->methods[m].params) &&
            report_is_published(&s->methods[o]))
            return 0;
    return 1;
}

/* The summary cells of method m (-1: the full cache) at budget b from column `at`: avg, change %, Δ best. */
static void summary_cells(const ReportSection *s, int m, int b, TRow *r, int at) {
    if (m < 0) {
        r->cells[at] = cell_of(&s->full.domain[s->n_domains], s->min_n);
        return;
    }
    const ReportCell *c = report_cell(s, m, b);
    if (!c->ran) return;
    r->cells[at] = cell_of(&c->domain[s->n_domains], s->min_n);
    TCell *ch = &r->cells[at + 1];
    *ch = compared(&c->ratio, 100, s->min_n);
    ch->v -= 100, ch->lo -= 100, ch->hi -= 100;
    if (c->diff_best.n) r->cells[at + 2] = compared(&c->diff_best, 0, s->min_n);
}

/* Average, change and Δ best baseline with their intervals: in Markdown the budgets side by side (every method),
 * in LaTeX one block of rows per budget (the paper-layout methods: in_main), three columns wide. */
static void summary_table(FILE *f, Doc *doc, const ReportSection *s) {
    Table *t = table_new("");
    if (!t) return;
    const char *avg = report_has_substitute(s, -1) ? "avg†" : "avg";
    int blocks = doc->fmt == FMT_TEX, n_groups = blocks ? 1 : s->n_budgets;
    for (int b = 0; b < n_groups; b++) {
        const char *group = blocks ? NULL : s->budgets[b].label;
        table_col(t, avg, group, s->n_samples);
        table_col(t, "change %", group, 0);
        table_col(t, "Δ best baseline", group, 0);
    }
    snprintf(t->caption, sizeof t->caption,
             "%s, %s: average score %s with 95%% bootstrap intervals (%d samples, %d tasks); change = "
             "100 × (avg / avg(full) − 1); Δ best baseline = avg − avg of the best baseline at that budget, in "
             "points (none for an ablation variant: a policy at another than its default aggregation is compared "
             "with its own policy only, in the ablation table); * marks a paired interval that excludes 0 (see "
             "the method: from at least %d samples, never a zero-width one)", s->model, s->suite,
             blocks ? "per budget (each policy at its default aggregation)" : "per budget", s->n_samples, s->n_tasks,
             s->min_n);
    set_labels(t, s, "summary", NULL);
    if (s->full.ran) {
        TRow *r = table_row(t, "full", 1);
        for (int b = 0; r && b < n_groups; b++) summary_cells(s, -1, b, r, 3 * b);
    }
    char head[120];
    for (int b = 0; b < (blocks ? s->n_budgets : 1); b++) {
        if (blocks) {
            snprintf(head, sizeof head, "budget %s", s->budgets[b].label);
            table_block(t, head);
        }
        for (int m = 0; m < s->n_methods; m++) {
            int any = 0;
            for (int k = 0; k < s->n_budgets; k++) any |= report_cell(s, m, k)->ran && (!blocks || k == b);
            if (!any || (blocks && !in_main(s, m))) continue;
            TRow *r = table_row(t, s->methods[m].label, 0);
            for (int k = 0; r && k < n_groups; k++) summary_cells(s, m, blocks ? b : k, r, 3 * k);
        }
    }
    emit(f, doc, t);
    char line[600];
    int k = snprintf(line, sizeof line, "Best baseline per budget:");
    for (int b = 0; b < s->n_budgets && k < (int)sizeof line - 100; b++)
        k += snprintf(line + k, sizeof line - (size_t)k, " %s %s;", s->budgets[b].label,
                      s->best_baseline[b] >= 0 ? s->methods[s->best_baseline[b]].label : "none");
    note(f, doc->fmt, line);
    table_free(t);
}

/* The paper's Table 1 layout (LaTeX): methods as rows in one block per budget under the full cache, tasks as
 * columns grouped by domain, then the average; values only (the intervals are in the summary table and in
 * report.md), n per column, bold the best per budget and column from at least min_n samples. */
static void paper_table(FILE *f, Doc *doc, const ReportSection *s) {
    Table *t = table_new("");
    if (!t) return;
    t->compact = 1;
    char buf[200];
    for (int u = 0; u < s->n_tasks; u++) {
        int own = !strcmp(s->domains[s->task_domain[u]], s->tasks[u]); /* the needle: its own domain */
        table_col(t, task_name(s, u, buf, sizeof buf), own ? NULL : s->domains[s->task_domain[u]], s->task_samples[u]);
    }
    table_col(t, report_has_substitute(s, -1) ? "Avg†" : "Avg", NULL, s->n_samples);
    snprintf(t->caption, sizeof t->caption,
             "%s, %s: task scores (0-100) per budget, each policy at its default aggregation; Avg = unweighted mean "
             "of the task scores; n = samples per column; bold = the best per budget and column (none from fewer "
             "than %d samples). Intervals: the summary table and report.md", s->model, s->suite, s->min_n);
    set_labels(t, s, "main", NULL);
    int n = t->n_cols - 1;
    if (s->full.ran) {
        TRow *r = table_row(t, "full", 1);
        for (int i = 0; r && i <= n; i++)
            r->cells[i] = cell_of(i == n ? &s->full.domain[s->n_domains] : &s->full.task[i], s->min_n);
    }
    for (int b = 0; b < s->n_budgets; b++) {
        snprintf(buf, sizeof buf, "budget %s", s->budgets[b].label);
        table_block(t, buf);
        for (int m = 0; m < s->n_methods; m++) {
            const ReportCell *c = report_cell(s, m, b);
            /* at its default aggregation a row needs no "(max+prior)": every row is at its own default */
            const ReportMethod *x = &s->methods[m];
            const char *params = strchr(x->label, '[');
            if (report_is_published(x)) snprintf(buf, sizeof buf, "%s%s%s", x->policy, params ? " " : "",
                                                           params ? params : "");
            else snprintf(buf, sizeof buf, "%s", x->label);
            TRow *r = c->ran && in_main(s, m) ? table_row(t, buf, 0) : NULL;
            for (int i = 0; r && i <= n; i++)
                r->cells[i] = cell_of(i == n ? &c->domain[s->n_domains] : &c->task[i], s->min_n);
            for (int i = 0; r && i <= n; i++) r->cells[i].lo = r->cells[i].hi = NAN, r->cells[i].sig = 0;
        }
    }
    for (int i = 0; s->full.ran && i <= n; i++) t->rows[0]->cells[i].lo = t->rows[0]->cells[i].hi = NAN;
    emit_tex(f, doc, t);
    table_free(t);
}

/* Task scores (kind 0), domain averages (1) or ratios to the full cache (2) at budget b (-1: full cache only). */
static void budget_table(FILE *f, Doc *doc, const ReportSection *s, int b, int kind) {
    Table *t = table_new("");
    if (!t) return;
    char buf[200];
    const char *budget = b < 0 ? "full cache" : s->budgets[b].label;
    const char *avg = report_has_substitute(s, -1) ? "Avg†" : "Avg";
    if (kind == 1) {
        for (int k = 0; k < s->n_domains; k++) {
            int n = 0;
            for (int u = 0; u < s->n_tasks; u++) n += s->task_domain[u] == k ? s->task_samples[u] : 0;
            snprintf(buf, sizeof buf, "%s%s", s->domains[k], report_has_substitute(s, k) ? "†" : "");
            table_col(t, buf, NULL, n);
        }
    } else {
        for (int u = 0; u < s->n_tasks; u++)
            table_col(t, task_name(s, u, buf, sizeof buf), s->domains[s->task_domain[u]], s->task_samples[u]);
    }
    table_col(t, kind == 2 ? "Mean" : avg, NULL, kind == 2 ? 0 : s->n_samples);
    static const char *what[] = {"task scores", "domain averages (mean of task averages)",
                                 "score as % of the full cache per task (100 × task avg / full-cache task avg)"};
    snprintf(t->caption, sizeof t->caption, "%s, %s, budget %s: %s%s", s->model, s->suite, budget, what[kind],
             kind == 2 ? "" : ", with 95% bootstrap intervals");
    static const char *kinds[] = {"tasks", "domains", "ratio"};
    set_labels(t, s, kinds[kind], b < 0 ? NULL : s->budgets[b].label);
    int n = t->n_cols - 1;
    if (s->full.ran && kind != 2) {
        TRow *r = table_row(t, "full", 1);
        for (int i = 0; r && i <= n; i++)
            r->cells[i] = cell_of(i == n ? &s->full.domain[s->n_domains] : kind == 0 ? &s->full.task[i] : &s->full.domain[i],
                                  s->min_n);
    }
    for (int m = 0; b >= 0 && m < s->n_methods; m++) {
        const ReportCell *c = report_cell(s, m, b);
        if (!c->ran) continue;
        TRow *r = table_row(t, s->methods[m].label, 0);
        if (!r) break;
        if (kind < 2) {
            for (int i = 0; i <= n; i++)
                r->cells[i] = cell_of(i == n ? &c->domain[s->n_domains] : kind == 0 ? &c->task[i] : &c->domain[i],
                                      s->min_n);
            continue;
        }
        /* a ratio rests on the fewer of its two task averages' samples; the mean on its shortest task */
        double sum = 0;
        int cnt = 0, fewest = 0;
        for (int u = 0; u < n; u++) {
            double full = s->full.task[u].value, v = c->task[u].value;
            TCell *x = &r->cells[u];
            x->v = full > 0 ? 100.0 * v / full : NAN;
            x->n = c->task[u].n < s->full.task[u].n ? c->task[u].n : s->full.task[u].n;
            x->few = !isnan(x->v) && x->n < s->min_n;
            if (isnan(x->v)) continue;
            sum += x->v, cnt++;
            if (!fewest || x->n < fewest) fewest = x->n;
        }
        r->cells[n] = (TCell){cnt ? sum / cnt : NAN, NAN, NAN, fewest, fewest, 0, cnt && fewest < s->min_n, NULL};
    }
    emit(f, doc, t);
    table_free(t);
}

/* The ablation: rows = policy (and params), columns = aggregation per budget, each the overall average. */
/* Whether method m's policy (with its params) ran with another aggregation too: a row of the ablation. */
static int in_ablation(const ReportSection *s, int m) {
    for (int o = 0; o < s->n_methods; o++)
        if (!strcmp(s->methods[o].policy, s->methods[m].policy) && !strcmp(s->methods[o].params, s->methods[m].params) &&
            strcmp(s->methods[o].aggregation, s->methods[m].aggregation))
            return 1;
    return 0;
}

/* The ablation: rows = policy (and params), columns = aggregation (mean, max, max+prior, others) per budget where
 * an ablation row ran with several, each the overall average with its interval. */
static void ablation_table(FILE *f, Doc *doc, const ReportSection *s) {
    const char *aggs[16];
    int n_aggs = 0;
    for (int m = 0; m < s->n_methods; m++) {
        if (!in_ablation(s, m)) continue;
        int k;
        for (k = 0; k < n_aggs && strcmp(aggs[k], s->methods[m].aggregation); k++) {}
        if (k == n_aggs && n_aggs < 16) aggs[n_aggs++] = s->methods[m].aggregation;
    }
    if (!n_aggs) return;
    for (int i = 1; i < n_aggs; i++) /* canonical order */
        for (int j = i; j > 0 && report_agg_rank(aggs[j - 1]) > report_agg_rank(aggs[j]); j--) {
            const char *x = aggs[j];
            aggs[j] = aggs[j - 1];
            aggs[j - 1] = x;
        }
    int budgets[256], n_budgets = 0;
    for (int b = 0; b < s->n_budgets && n_budgets < 256; b++) {
        /* where some policy ran with two aggregations or more */
        int compared = 0;
        for (int m = 0; m < s->n_methods && !compared; m++)
            for (int o = m + 1; o < s->n_methods && !compared; o++)
                compared = !strcmp(s->methods[o].policy, s->methods[m].policy) &&
                           !strcmp(s->methods[o].params, s->methods[m].params) && report_cell(s, m, b)->ran &&
                           report_cell(s, o, b)->ran;
        if (compared) budgets[n_budgets++] = b;
    }
    if (!n_budgets) return;
    Table *t = table_new("");
    if (!t) return;
    for (int i = 0; i < n_budgets; i++)
        for (int k = 0; k < n_aggs; k++) table_col(t, aggs[k], s->budgets[budgets[i]].label, 0);
    snprintf(t->caption, sizeof t->caption, "%s, %s: aggregation ablation, average score%s per aggregation and "
             "budget with 95%% bootstrap intervals", s->model, s->suite, report_has_substitute(s, -1) ? "†" : "");
    set_labels(t, s, "ablation", NULL);
    for (int m = 0; m < s->n_methods; m++) {
        int first = 1;
        for (int o = 0; o < m; o++)
            first &= strcmp(s->methods[o].policy, s->methods[m].policy) || strcmp(s->methods[o].params, s->methods[m].params);
        if (!first || !in_ablation(s, m)) continue;
        char label[200];
        int several = 0;
        for (int o = 0; o < s->n_methods; o++)
            several |= !strcmp(s->methods[o].policy, s->methods[m].policy) &&
                       strcmp(s->methods[o].params, s->methods[m].params);
        snprintf(label, sizeof label, "%s%s%s%s", s->methods[m].policy, several ? " [" : "",
                 several ? s->methods[m].params : "", several ? "]" : "");
        TRow *r = table_row(t, label, 0);
        for (int o = 0; r && o < s->n_methods; o++) {
            if (strcmp(s->methods[o].policy, s->methods[m].policy) || strcmp(s->methods[o].params, s->methods[m].params))
                continue;
            int k;
            for (k = 0; k < n_aggs && strcmp(aggs[k], s->methods[o].aggregation); k++) {}
            for (int i = 0; k < n_aggs && i < n_budgets; i++)
                if (report_cell(s, o, budgets[i])->ran)
                    r->cells[i * n_aggs + k] = cell_of(&report_cell(s, o, budgets[i])->domain[s->n_domains], s->min_n);
        }
    }
    emit(f, doc, t);
    table_free(t);
}

/* The row label of a pair: "defensivekv: max+prior − mean" (with the params where the policy ran with several);
 * a ladder step: "forced mass − topk, from criticalkv (max+prior) [w=32,k=5]" (the right method's label). */
static void pair_label(const ReportSection *s, const AblationPair *p, char *out, size_t n) {
    const ReportMethod *l = &s->methods[p->left], *r = &s->methods[p->right];
    if (p->step[0]) {
        snprintf(out, n, "%s, from %s", p->step, r->label);
        return;
    }
    int several = 0;
    for (int o = 0; o < s->n_methods; o++)
        several |= !strcmp(s->methods[o].policy, l->policy) && strcmp(s->methods[o].params, l->params);
    snprintf(out, n, "%s%s%s%s: %s − %s", l->policy, several ? " [" : "", several ? l->params : "", several ? "]" : "",
             l->aggregation, r->aggregation);
}

/* The ablation as paired differences (ordering.c, report_ablation_pairs): rows = policy and pair of aggregations,
 * columns = Δ points and verdict per budget. */
static void ablation_pairs_table(FILE *f, Doc *doc, const ReportSection *s) {
    if (!s->n_pairs) return;
    Table *t = table_new("");
    if (!t) return;
    t->no_bold = 1;
    int col_of[256], n_budgets = 0;
    for (int b = 0; b < s->n_budgets && b < 256; b++) {
        col_of[b] = -1;
        for (int i = 0; i < s->n_pairs && col_of[b] < 0; i++)
            if (s->pairs[i].budget == b) col_of[b] = 2 * n_budgets++;
        if (col_of[b] < 0) continue;
        table_col(t, "Δ points", s->budgets[b].label, 0);
        table_col(t, "verdict", s->budgets[b].label, 0);
    }
    snprintf(t->caption, sizeof t->caption,
             "%s, %s: the ablations as paired differences: a policy at two aggregations, then each step of "
             "DefensiveKV's ladder that ran (two variants one step apart, docs/ladder.md; the value farther from "
             "Ada-CriticalKV on the left). Δ = avg(left) − avg(right)%s in points over the samples both scored, "
             "with its 95%% paired bootstrap interval (* excludes 0); higher / lower where the interval excludes 0; no "
             "verdict from fewer than %d pairs (too few samples) or from a zero-width interval",
             s->model, s->suite, report_has_substitute(s, -1) ? "†" : "", s->min_n);
    set_labels(t, s, "ablation-paired", NULL);
    char label[256];
    for (int i = 0; i < s->n_pairs; i++) {
        const AblationPair *p = &s->pairs[i];
        pair_label(s, p, label, sizeof label);
        TRow *r = NULL;
        for (int k = 0; k < t->n_rows && !r; k++)
            if (!strcmp(t->rows[k]->label, label)) r = t->rows[k];
        if (!r && !(r = table_row(t, label, 0))) break;
        if (p->budget >= 256) continue;
        r->cells[col_of[p->budget]] = compared(&p->diff, 0, s->min_n);
        r->cells[col_of[p->budget] + 1].text = p->verdict;
    }
    emit(f, doc, t);
    table_free(t);
}

static const char *order_label(const ReportSection *s, int m, const char *policy) {
    return m >= 0 ? s->methods[m].label : policy;
}

/* The paper's ordering link by link (ordering.c), per budget: the paired difference and what it says. */
static void ordering_table(FILE *f, Doc *doc, const ReportSection *s) {
    int any = 0;
    for (int i = 0; i < s->n_budgets * REPORT_N_ORDER; i++) any |= s->order[i].diff.n > 0;
    if (!any) return;
    Table *t = table_new("");
    if (!t) return;
    t->no_bold = 1;
    for (int b = 0; b < s->n_budgets; b++) {
        table_col(t, "Δ points", s->budgets[b].label, 0);
        table_col(t, "verdict", s->budgets[b].label, 0);
    }
    snprintf(t->caption, sizeof t->caption,
             "%s, %s: the paper's ordering at 20%% (Layer-DefensiveKV ≥ DefensiveKV > CriticalKV > AdaKV ≈ CAKE > "
             "SnapKV > StreamingLLM), link by link, each policy as published (its default aggregation and ladder "
             "steps): Δ = avg(left) − avg(right)%s in points with its 95%% paired bootstrap interval (* excludes 0); a > holds when the "
             "interval lies above 0, a ≥ fails only when it lies below 0, a ≈ holds while it includes 0; no verdict "
             "from fewer than %d pairs (too few samples) or from a zero-width interval",
             s->model, s->suite, report_has_substitute(s, -1) ? "†" : "", s->min_n);
    set_labels(t, s, "ordering", NULL);
    for (int i = 0; i < REPORT_N_ORDER; i++) {
        const OrderRelation *o = &s->order[i];
        char label[200];
        snprintf(label, sizeof label, "%.90s %s %.90s", order_label(s, o->method_a, o->a), report_order_symbol(o->kind),
                 order_label(s, o->method_b, o->b));
        TRow *r = table_row(t, label, 0);
        for (int b = 0; r && b < s->n_budgets; b++) {
            const OrderRelation *x = &s->order[(size_t)b * REPORT_N_ORDER + i];
            if (x->diff.n) {
                r->cells[2 * b] = compared(&x->diff, 0, s->min_n);
            }
            r->cells[2 * b + 1].text = x->verdict;
        }
    }
    emit(f, doc, t);
    table_free(t);
}

static void render_section(FILE *f, Doc *doc, const ReportSection *s) {
    char head[1200];
    if (doc->fmt == FMT_MD) {
        snprintf(head, sizeof head, "## %s — %s (%s)", s->model, s->suite, s->setup);
        fputc('\n', f);
        put_line(f, head);
    } else {
        snprintf(head, sizeof head, "---- %s / %s / %s", s->model, s->suite, s->setup);
        fputc('\n', f);
        report_put_tex_comment(f, head);
    }
    coverage(f, doc->fmt, s);
    if (report_has_substitute(s, -1)) note(f, doc->fmt, "† " SUBSTITUTE_NOTE ".");
    int any_score = report_has_scores(s, &s->full);
    for (int c = 0; c < s->n_methods * s->n_budgets; c++) any_score |= report_has_scores(s, &s->cells[c]);
    if (!any_score) {
        note(f, doc->fmt, "No scores in this section: every row failed (the errors are counted above).");
        return;
    }
    if (doc->fmt == FMT_TEX) {
        /* the paper's tables: scores, then n and intervals, the ordering and the ablation, paired; the per-budget
         * tables with every interval are in report.md and the CSV files. LaTeX holds at most 18 floats in
         * waiting: they are flushed after each section */
        if (s->n_budgets && s->n_methods) {
            paper_table(f, doc, s);
            summary_table(f, doc, s);
            ordering_table(f, doc, s);
        } else {
            budget_table(f, doc, s, -1, 0);
        }
        ablation_pairs_table(f, doc, s);
        fputs("\\clearpage\n", f);
        return;
    }
    if (s->n_budgets && s->n_methods) summary_table(f, doc, s);
    if (s->n_budgets && s->n_methods) ordering_table(f, doc, s);
    ablation_table(f, doc, s);
    ablation_pairs_table(f, doc, s);
    if (s->n_budgets == 0) {
        budget_table(f, doc, s, -1, 0);
        budget_table(f, doc, s, -1, 1);
    }
    for (int b = 0; b < s->n_budgets; b++) {
        budget_table(f, doc, s, b, 0);
        budget_table(f, doc, s, b, 1);
        if (s->full.ran) budget_table(f, doc, s, b, 2);
    }
}

/* The cross-domain change of each model at the budget nearest 20% (the paper's Figure 2 style). */
static int crossdomain_tables(FILE *f, Doc *doc, const ReportData *d, KvErr *err) {
    for (int i = 0; i < d->n_sections; i++) {
        if (!report_first_of_model(d, i)) continue;
        CrossDomain x;
        Table *t = NULL;
        if (report_crossdomain(d, i, REPORT_FIG2_KEEP, 0, &x, err)) goto fail;
        if (!x.n_methods) {
            report_crossdomain_free(&x);
            continue;
        }
        if (!(t = table_new("%"))) {
            kv_fail(err, "out of memory");
            goto fail;
        }
        char buf[200], head[1200];
        for (int k = 0; k < x.n_domains; k++) {
            snprintf(buf, sizeof buf, "%s%s", x.domains[k], x.domain_substitute[k] ? "†" : "");
            table_col(t, buf, NULL, 0);
        }
        table_col(t, "mean over domains", NULL, 0);
        snprintf(t->caption, sizeof t->caption,
                 "%s: relative change vs the full cache at %s per domain and its unweighted mean over the %d "
                 "domain%s, with 95%% paired bootstrap intervals (* excludes 0); change = 100 × (domain avg / "
                 "full-cache domain avg − 1), domain avg = mean of its task averages over the samples both scored. "
                 "Domains: " REPORT_CROSSDOMAIN_GROUPING, x.model, x.budget, x.n_domains, x.n_domains == 1 ? "" : "s");
        snprintf(t->label, sizeof t->label, "tab:%s:crossdomain:%s", x.model, x.budget);
        for (int m = 0; m < x.n_methods; m++) {
            TRow *r = table_row(t, x.methods[m].label, 0);
            for (int k = 0; r && k < x.n_domains; k++) {
                r->cells[k] = compared(&x.change[(size_t)m * x.n_domains + k], 0, x.min_n);
            }
            if (r) {
                r->cells[x.n_domains] = compared(&x.mean[m], 0, x.min_n);
            }
        }
        if (doc->fmt == FMT_MD) {
            snprintf(head, sizeof head, "## %s — cross-domain change at %s", x.model, x.budget);
            fputc('\n', f);
            put_line(f, head);
            fputc('\n', f);
            snprintf(head, sizeof head, "Suites and setups: %s.", x.setup);
            put_line(f, head);
        }
        emit(f, doc, t);
        table_free(t);
        report_crossdomain_free(&x);
        continue;
    fail:
        table_free(t);
        report_crossdomain_free(&x);
        return -1;
    }
    return 0;
}

/* Every model side by side at each budget: a method's score as % of its own model's full cache. */
static int crossmodel_tables(FILE *f, Doc *doc, const ReportData *d, KvErr *err) {
    for (int j = 0; j < d->n_crossmodels; j++) {
        const CrossModel *c = &d->crossmodels[j];
        if (!c->n_methods) continue;
        Table *t = table_new("%");
        if (!t) return kv_fail(err, "out of memory");
        char buf[208], head[400];
        for (int i = 0; i < c->n_models; i++) {
            snprintf(buf, sizeof buf, "%s (%d domain%s)", c->models[i], c->n_domains[i], c->n_domains[i] == 1 ? "" : "s");
            table_col(t, buf, NULL, 0);
        }
        snprintf(t->caption, sizeof t->caption,
                 "Models side by side at %s: each method's score as %% of its own model's full cache, 100 + the "
                 "unweighted mean over the model's domains of 100 × (domain avg / full-cache domain avg − 1) (the "
                 "cross-domain tables), with 95%% paired bootstrap intervals (* excludes 100). Each column is one "
                 "model against its own full cache; no value is averaged across models. Domains: "
                 REPORT_CROSSDOMAIN_GROUPING, c->budget);
        snprintf(t->label, sizeof t->label, "tab:crossmodel:%s", c->budget);
        for (int m = 0; m < c->n_methods; m++) {
            TRow *r = table_row(t, c->methods[m].label, 0);
            for (int i = 0; r && i < c->n_models; i++)
                r->cells[i] = compared(&c->pct[(size_t)m * c->n_models + i], 100, c->min_n);
        }
        if (doc->fmt == FMT_MD) {
            snprintf(head, sizeof head, "## Models side by side at %s", c->budget);
            fputc('\n', f);
            put_line(f, head);
        }
        emit(f, doc, t);
        table_free(t);
    }
    return 0;
}

/* The paper's ordering and the ablations model beside model (sizes.c): per link each model's Δ over the samples
 * all of them scored, the change from each model to the next, and whether the sign changes. */
static int sizes_tables(FILE *f, Doc *doc, const ReportData *d, KvErr *err) {
    for (int j = 0; j < d->n_sizes; j++) {
        const ReportSizes *x = &d->sizes[j];
        const ReportSection *s0 = &d->sections[x->section[0]];
        Table *t = table_new("");
        char (*arrow)[420] = calloc((size_t)x->n_models, sizeof *arrow);
        char (*n_text)[24] = calloc((size_t)x->n_links + 1, sizeof *n_text);
        if (!t || !arrow || !n_text) {
            table_free(t), free(arrow), free(n_text);
            return kv_fail(err, "out of memory");
        }
        t->no_bold = 1;
        table_col(t, "n", NULL, 0);
        for (int i = 0; i < x->n_models; i++) table_col(t, "Δ points", d->sections[x->section[i]].model, 0);
        for (int i = 0; i + 1 < x->n_models; i++) {
            snprintf(arrow[i], sizeof arrow[i], "%.200s → %.200s", d->sections[x->section[i]].model,
                     d->sections[x->section[i + 1]].model);
            table_col(t, "change", arrow[i], 0);
        }
        table_col(t, "sign", NULL, 0);
        const char *label_budget = s0->budgets[x->budget].label;
        snprintf(t->caption, sizeof t->caption,
                 "%s at %s, model beside model: each link of the paper's ordering (each policy as published) and each "
                 "ablation pair, Δ = avg(left) − avg(right)%s in points per model, over the n samples every model "
                 "scored on both sides (matched by sample key: the same generated task instance), with its 95%% "
                 "paired bootstrap interval (* excludes 0); change = Δ(later model) − Δ(earlier), paired by sample; "
                 "sign: \"changes sign\" where two models each exclude 0 on opposite sides. Models in the order the "
                 "database first holds them; no interval or verdict from fewer than %d samples",
                 s0->suite, label_budget, report_has_substitute(s0, -1) ? "†" : "", x->min_n);
        snprintf(t->label, sizeof t->label, "tab:sizes:%s:%s", s0->stem, label_budget);
        for (int k = 0; k < x->n_links; k++) {
            const SizeLink *l = &x->links[k];
            char label[256];
            if (l->order >= 0) {
                const OrderRelation *o = &s0->order[(size_t)x->budget * REPORT_N_ORDER + l->order];
                snprintf(label, sizeof label, "%.100s %s %.100s", order_label(s0, o->method_a, o->a),
                         report_order_symbol(o->kind), order_label(s0, o->method_b, o->b));
            } else {
                const ReportSection *owner = &d->sections[x->section[l->pair_model]];
                pair_label(owner, &owner->pairs[l->pair], label, sizeof label);
            }
            TRow *r = table_row(t, label, 0);
            if (!r) break;
            snprintf(n_text[k], sizeof n_text[k], "%d", l->diff[0].n);
            r->cells[0].text = n_text[k];
            for (int i = 0; i < x->n_models; i++)
                if (l->diff[i].n) r->cells[1 + i] = compared(&l->diff[i], 0, x->min_n);
            for (int i = 0; i + 1 < x->n_models; i++)
                if (l->change[i].n) r->cells[1 + x->n_models + i] = compared(&l->change[i], 0, x->min_n);
            r->cells[2 * x->n_models].text = l->sign;
        }
        if (doc->fmt == FMT_MD) {
            char head[400];
            snprintf(head, sizeof head, "## The links model beside model: %s at %s", s0->suite, label_budget);
            fputc('\n', f);
            put_line(f, head);
        }
        emit(f, doc, t);
        table_free(t);
        free(arrow);
        free(n_text);
    }
    return 0;
}

/* ---------------------------------------------------------------- CSV */

static void put_csv_number(FILE *f, double v) {
    fputc(',', f);
    if (!isnan(v)) fprintf(f, "%.10g", v);
}

/* ",value,lo,hi" with every number shifted by `shift`; the bounds empty from fewer than min_n samples. */
static void put_csv_bounds(FILE *f, const StatsInterval *ci, double shift, int min_n) {
    int few = ci->n < min_n || ci->n_least < min_n;
    put_csv_number(f, ci->value + shift);
    put_csv_number(f, few ? NAN : ci->lo + shift);
    put_csv_number(f, few ? NAN : ci->hi + shift);
}

static void put_csv_ci(FILE *f, const StatsInterval *ci, int min_n) {
    fprintf(f, ",%d", ci->n);
    put_csv_bounds(f, ci, 0, min_n);
}

/* The last column of a row: why its interval is missing, if it is. */
static void put_csv_note(FILE *f, const StatsInterval *ci, int min_n) {
    fputs(stats_too_few(ci, min_n) ? ",\"too few samples\"\n" : ",\n", f);
}

static void put_csv_keys(FILE *f, const ReportSection *s, int m, int b, const char *domain, const char *task) {
    const char *fields[] = {s->model, s->setup, s->suite, domain, task, m < 0 ? "full" : s->methods[m].policy,
                            m < 0 ? "none" : s->methods[m].aggregation, m < 0 ? "" : s->methods[m].params,
                            m < 0 ? "full" : s->budgets[b].label};
    for (int k = 0; k < 9; k++) {
        if (k) fputc(',', f);
        report_put_csv(f, fields[k]);
    }
    fprintf(f, ",%.6g", m < 0 ? 1.0 : s->budgets[b].keep_fraction);
}

static const char *CSV_KEYS = "model,setup,suite,domain,task,policy,aggregation,params,budget,keep_fraction";

static void write_csv_tasks(FILE *f, const ReportData *d) {
    fprintf(f, "%s,substitute,n,mean,lo,hi,n_failed,n_missing,full_mean,ratio,note\n", CSV_KEYS);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int m = -1; m < s->n_methods; m++)
            for (int b = 0; b < (m < 0 ? 1 : s->n_budgets); b++) {
                const ReportCell *c = m < 0 ? &s->full : report_cell(s, m, b);
                for (int t = 0; c->ran && t < s->n_tasks; t++) {
                    put_csv_keys(f, s, m, b, s->domains[s->task_domain[t]], s->tasks[t]);
                    fprintf(f, ",%d", s->task_substitute[t]);
                    put_csv_ci(f, &c->task[t], s->min_n);
                    fprintf(f, ",%d,%d", c->n_failed[t], c->n_missing[t]);
                    double full = s->full.task[t].value;
                    put_csv_number(f, full);
                    put_csv_number(f, full > 0 ? c->task[t].value / full : NAN);
                    put_csv_note(f, &c->task[t], s->min_n);
                }
            }
    }
}

static void write_csv_summary(FILE *f, const ReportData *d) {
    fprintf(f, "%s,substitute,n,mean,lo,hi,full_mean,change_pct,change_lo,change_hi,diff_full,diff_full_lo,"
               "diff_full_hi,best_baseline,diff_best,diff_best_lo,diff_best_hi,note\n", CSV_KEYS);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int m = -1; m < s->n_methods; m++)
            for (int b = 0; b < (m < 0 ? 1 : s->n_budgets); b++) {
                const ReportCell *c = m < 0 ? &s->full : report_cell(s, m, b);
                for (int k = -1; c->ran && k < s->n_domains; k++) {
                    int dk = k < 0 ? s->n_domains : k;
                    put_csv_keys(f, s, m, b, k < 0 ? "(all)" : s->domains[k], "");
                    fprintf(f, ",%d", report_has_substitute(s, k));
                    put_csv_ci(f, &c->domain[dk], s->min_n);
                    put_csv_number(f, s->full.domain[dk].value);
                    if (k >= 0 || m < 0) {
                        /* changes are computed for the overall average only */
                        fputs(",,,,,,,,,,", f);
                    } else {
                        put_csv_bounds(f, &c->ratio, -100, s->min_n);
                        put_csv_bounds(f, &c->diff_full, 0, s->min_n);
                        fputc(',', f);
                        if (s->best_baseline[b] >= 0) report_put_csv(f, s->methods[s->best_baseline[b]].label);
                        put_csv_bounds(f, &c->diff_best, 0, s->min_n);
                    }
                    put_csv_note(f, &c->domain[dk], s->min_n);
                }
            }
    }
}

/* ---------------------------------------------------------------- files */

/* The paper's ordering, one row per (section, budget, link). */
static void write_csv_crossmodel(FILE *f, const ReportData *d) {
    const CrossModel *x = d->crossmodels;
    int n = d->n_crossmodels;
    fputs("budget,keep_fraction,model,n_domains,policy,aggregation,params,n,pct_of_own_full,lo,hi,note\n", f);
    for (int j = 0; j < n; j++)
        for (int m = 0; m < x[j].n_methods; m++)
            for (int i = 0; i < x[j].n_models; i++) {
                const StatsInterval *ci = &x[j].pct[(size_t)m * x[j].n_models + i];
                if (isnan(ci->value)) continue;
                report_put_csv(f, x[j].budget);
                fprintf(f, ",%g,", x[j].keep_fraction);
                report_put_csv(f, x[j].models[i]);
                fprintf(f, ",%d", x[j].n_domains[i]);
                const char *fields[] = {x[j].methods[m].policy, x[j].methods[m].aggregation, x[j].methods[m].params};
                for (int k = 0; k < 3; k++) {
                    fputc(',', f);
                    report_put_csv(f, fields[k]);
                }
                put_csv_ci(f, ci, x[j].min_n);
                put_csv_note(f, ci, x[j].min_n);
            }
}

/* The ablations as paired differences, one row per (section, budget, pair): step "aggregation max+prior − mean"
 * for a policy at two aggregations, the ladder's step otherwise. */
static void write_csv_ablation(FILE *f, const ReportData *d) {
    fputs("model,setup,suite,budget,keep_fraction,step,left_policy,left_aggregation,left_params,right_policy,"
          "right_aggregation,right_params,n,diff,lo,hi,verdict\n", f);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int k = 0; k < s->n_pairs; k++) {
            const AblationPair *p = &s->pairs[k];
            const ReportMethod *l = &s->methods[p->left], *r = &s->methods[p->right];
            char step[160];
            if (p->step[0]) snprintf(step, sizeof step, "%s", p->step);
            else snprintf(step, sizeof step, "aggregation %s − %s", l->aggregation, r->aggregation);
            const char *fields[] = {s->model, s->setup, s->suite, s->budgets[p->budget].label};
            for (int c = 0; c < 4; c++) {
                if (c) fputc(',', f);
                report_put_csv(f, fields[c]);
            }
            fprintf(f, ",%.6g", s->budgets[p->budget].keep_fraction);
            const char *more[] = {step, l->policy, l->aggregation, l->params, r->policy, r->aggregation, r->params};
            for (int c = 0; c < 7; c++) {
                fputc(',', f);
                report_put_csv(f, more[c]);
            }
            put_csv_ci(f, &p->diff, s->min_n);
            fputc(',', f);
            report_put_csv(f, p->verdict);
            fputc('\n', f);
        }
    }
}

/* The links model beside model (sizes.c): one row per (group, budget, link, model), the change from the
 * model before it on the same row (empty for the first). */
static void write_csv_sizes(FILE *f, const ReportData *d) {
    fputs("suite,budget,keep_fraction,link,left_policy,left_aggregation,left_params,right_policy,right_aggregation,"
          "right_params,model,n,diff,lo,hi,change,change_lo,change_hi,change_verdict,sign\n", f);
    for (int j = 0; j < d->n_sizes; j++) {
        const ReportSizes *x = &d->sizes[j];
        const ReportSection *s0 = &d->sections[x->section[0]];
        for (int k = 0; k < x->n_links; k++) {
            const SizeLink *l = &x->links[k];
            char link[256];
            int left, right;
            const ReportSection *owner = s0;
            if (l->order >= 0) {
                const OrderRelation *o = &s0->order[(size_t)x->budget * REPORT_N_ORDER + l->order];
                snprintf(link, sizeof link, "%s %s %s", o->a, o->kind == ORDER_GE ? ">=" : o->kind == ORDER_GT ? ">" : "~",
                         o->b);
                left = o->method_a, right = o->method_b;
            } else {
                owner = &d->sections[x->section[l->pair_model]];
                const AblationPair *p = &owner->pairs[l->pair];
                if (p->step[0]) snprintf(link, sizeof link, "%s", p->step);
                else snprintf(link, sizeof link, "aggregation %s − %s", owner->methods[p->left].aggregation,
                              owner->methods[p->right].aggregation);
                left = p->left, right = p->right;
            }
            const ReportMethod *ml = left >= 0 ? &owner->methods[left] : NULL,
                               *mr = right >= 0 ? &owner->methods[right] : NULL;
            for (int i = 0; i < x->n_models; i++) {
                const char *fields[] = {s0->suite, s0->budgets[x->budget].label};
                for (int c = 0; c < 2; c++) {
                    if (c) fputc(',', f);
                    report_put_csv(f, fields[c]);
                }
                fprintf(f, ",%.6g", s0->budgets[x->budget].keep_fraction);
                const char *more[] = {link, ml ? ml->policy : "", ml ? ml->aggregation : "", ml ? ml->params : "",
                                      mr ? mr->policy : "", mr ? mr->aggregation : "", mr ? mr->params : "",
                                      d->sections[x->section[i]].model};
                for (int c = 0; c < 8; c++) {
                    fputc(',', f);
                    report_put_csv(f, more[c]);
                }
                put_csv_ci(f, &l->diff[i], x->min_n);
                if (i > 0) put_csv_bounds(f, &l->change[i - 1], 0, x->min_n);
                else fputs(",,,", f);
                fputc(',', f);
                if (i > 0 && l->change_verdict[i - 1]) report_put_csv(f, l->change_verdict[i - 1]);
                fputc(',', f);
                report_put_csv(f, l->sign);
                fputc('\n', f);
            }
        }
    }
}

static void write_csv_ordering(FILE *f, const ReportData *d) {
    fputs("model,setup,suite,budget,relation,left,left_aggregation,right,right_aggregation,n,diff,lo,hi,verdict\n", f);
    for (int i = 0; i < d->n_sections; i++) {
        const ReportSection *s = &d->sections[i];
        for (int b = 0; s->order && b < s->n_budgets; b++)
            for (int k = 0; k < REPORT_N_ORDER; k++) {
                const OrderRelation *o = &s->order[(size_t)b * REPORT_N_ORDER + k];
                char rel[8];
                snprintf(rel, sizeof rel, "%s", o->kind == ORDER_GE ? ">=" : o->kind == ORDER_GT ? ">" : "~");
                const char *fields[] = {s->model, s->setup, s->suite, s->budgets[b].label, rel, o->a,
                                        o->method_a >= 0 ? s->methods[o->method_a].aggregation : "", o->b,
                                        o->method_b >= 0 ? s->methods[o->method_b].aggregation : ""};
                for (size_t c = 0; c < sizeof fields / sizeof fields[0]; c++) {
                    if (c) fputc(',', f);
                    report_put_csv(f, fields[c]);
                }
                put_csv_ci(f, &o->diff, s->min_n);
                fputc(',', f);
                report_put_csv(f, o->verdict);
                fputc('\n', f);
            }
    }
}

static void method_text(FILE *f, Format fmt, int min_n, int resamples) {
    char text[4000];
    snprintf(text, sizeof text,
             "Scores are on the 0-100 scale: a task's score is the mean over its samples, failed rows excluded "
             "and counted; domain and overall averages are unweighted means of the task scores; all are computed "
             "from unrounded values and printed to 2 decimals. Intervals are 95%% percentile-bootstrap intervals "
             "(%d resamples; random stream splitmix64 from the fixed seed 0x%llx, restarted for each interval, so "
             "the report is deterministic). An interval over several tasks is stratified by task (each resample "
             "redraws every task's samples with replacement) when every task behind it holds at least %d samples; "
             "otherwise it is pooled (each resample draws as many samples as there are from all of them, within "
             "each domain for a cross-domain change), because a task of n samples redrawn within itself varies "
             "only (n − 1) / n as much as it should (one sample: never). Which scheme ran is stated with each "
             "section. n is the number of samples behind a value. Every policy scores the same samples, so "
             "differences against the full cache and against the best baseline (the highest-scoring of the paper's "
             "baselines, i.e. every policy but defensivekv / layer-defensivekv, each at its own default "
             "aggregation, at that budget) are paired: the same resampled samples on both sides, over the samples "
             "both scored (a sample one side failed or lacks is left out of that comparison). * marks a difference "
             "whose interval excludes 0 (for the change, 100 %% of the full cache). No interval, *, bold or "
             "ordering verdict comes from fewer than %d samples (`kvbench report --min-n N`): a bootstrap from so "
             "few only reshuffles the handful of values there are and is too unstable to act on; such a value is "
             "shown with its n and \"too few samples\". A zero-width interval (the resamples never varied) is "
             "never marked. %s.",
             resamples, (unsigned long long)STATS_SEED, STATS_MIN_STRATUM, min_n, CHANGE_FORMULA);
    note(f, fmt, text);
}

/* report.md or report.tex: the same sections, in one format. */
static int write_document(const ReportData *d, Format fmt, const char *out_dir, FILE *log, KvErr *err) {
    char path[1200];
    FILE *f = report_open_out(out_dir, fmt == FMT_TEX ? "report.tex" : "report.md", path, sizeof path, err);
    if (!f) return -1;
    fputs(fmt == FMT_TEX
              ? "% kvbench report: tables for \\input{report.tex}; needs \\usepackage{booktabs} in the preamble.\n"
              : "# kvbench report\n\n",
          f);
    report_put_provenance(f, &d->prov, fmt == FMT_TEX);
    if (fmt == FMT_MD && d->n_rows == d->n_failed_rows)
        fprintf(f, "\n**No scores: all %d result rows failed.** The errors are counted per section below.\n",
                d->n_rows);
    method_text(f, fmt, d->min_n, d->resamples);
    Doc doc = {.fmt = fmt};
    for (int i = 0; i < d->n_sections; i++) render_section(f, &doc, &d->sections[i]);
    if (crossdomain_tables(f, &doc, d, err) || crossmodel_tables(f, &doc, d, err) || sizes_tables(f, &doc, d, err)) {
        fclose(f);
        return -1;
    }
    return report_close_out(f, path, log, err);
}

int report_tables(const ReportData *d, const char *out_dir, FILE *log, KvErr *err) {
    static const struct {
        const char *file;
        void (*write)(FILE *f, const ReportData *d);
    } CSV_FILES[] = {{"task_scores.csv", write_csv_tasks},    {"domain_scores.csv", write_csv_summary},
                     {"ordering.csv", write_csv_ordering},    {"ablation.csv", write_csv_ablation},
                     {"cross_model.csv", write_csv_crossmodel}, {"sizes.csv", write_csv_sizes}};
    if (write_document(d, FMT_MD, out_dir, log, err) || write_document(d, FMT_TEX, out_dir, log, err)) return -1;
    for (size_t i = 0; i < sizeof CSV_FILES / sizeof CSV_FILES[0]; i++) {
        char path[1200];
        /* cross_model.csv and sizes.csv only where there are models to compare */
        if ((CSV_FILES[i].write == write_csv_crossmodel && d->n_crossmodels == 0) ||
            (CSV_FILES[i].write == write_csv_sizes && d->n_sizes == 0))
            continue;
        FILE *f = report_open_out(out_dir, CSV_FILES[i].file, path, sizeof path, err);
        if (!f) return -1;
        CSV_FILES[i].write(f, d);
        if (report_close_out(f, path, log, err)) return -1;
    }
    return 0;
}

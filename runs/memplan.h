/* memplan.h — the memory planner of a sample's decode (runs/sweep.c) and of its model (runs/estimate.c).
 *
 * After a sample's prefill, each pending variant needs memory of its own while it decodes: a view of the
 * prefill's cache (indices of its kept rows and its own rows for the question and answer) or a gathered copy,
 * plus its share of a decode step's buffers (Backend.variant_bytes). The prefill's cache stays for the whole
 * sample (the full variant decodes on it, the others read or gather from it), so the variants share what is
 * left: the device's free memory less a reserve (Backend.memory_free), or an optional memory limit less the
 * prefill's cache (`--memory-limit`, config "memory_limit"). The planner splits them into as few decode batches
 * as fit that budget; a variant that does not fit alone is not run (its row records why).
 *
 * Views or copies: a copy needs the kept rows themselves, a view 4 bytes per kept row, so views never need more
 * batches. Copies are chosen only where they need no more batches than views and the backend does not decode
 * views at least as fast (Backend.views_fast); the rows are the same either way (same kernel arithmetic on the
 * same rows). */
#ifndef KVBENCH_RUNS_MEMPLAN_H
#define KVBENCH_RUNS_MEMPLAN_H

#include "../engine/err.h"

/* Splits n variants needing need[i] bytes into batches within budget bytes, first fit over the variants in
 * decreasing need (ties in order): batch_of[i] is variant i's batch (0 .. *n_batches-1, numbered in the order they
 * were opened, so batch 0 holds the largest), or -1 when need[i] > budget. First fit decreasing uses at most
 * 11/9 of the fewest batches + 1 (the fewest whenever the variants fit in one or every need is above a third of
 * the budget). Returns the batches, -1 when out of memory. */
int memplan_split(const double *need, int n, double budget, int *batch_of, KvErr *err);

/* The plan of one sample: the views' split, or the copies' where memplan's rule above picks them. need_view may
 * be NULL (a backend without views: copies). Fills batch_of[n] and returns the batches (-1: out of memory);
 * *use_views says which. */
int memplan_choose(const double *need_view, const double *need_copy, int n, double budget, int views_fast,
                   int *batch_of, int *use_views, KvErr *err);

/* Bytes from text: a number with an optional unit B, K, M, G, T (powers of 1024; KiB, MiB, GiB, TiB and KB, MB,
 * GB, TB, the latter powers of 1000). `what` names it in the error. */
int memplan_parse_bytes(const char *text, const char *what, double *bytes, KvErr *err);

#endif

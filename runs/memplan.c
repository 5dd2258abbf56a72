/* memplan.c — decode batches within a memory budget (memplan.h). */
#include "memplan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int memplan_split(const double *need, int n, double budget, int *batch_of, KvErr *err) {
    /* n is a sample's variants (tens): a quadratic first fit costs nothing next to a decode */
    double *room = kv_malloc((size_t)(n > 0 ? n : 1) * sizeof *room, err);
    int *order = kv_malloc((size_t)(n > 0 ? n : 1) * sizeof *order, err);
    int n_batches = 0;
    if (!room || !order) {
        free(room);
        free(order);
        return -1;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, decreasing need */
        int v = order[i], j = i;
        for (; j > 0 && need[order[j - 1]] < need[v]; j--) order[j] = order[j - 1];
        order[j] = v;
    }
    for (int k = 0; k < n; k++) {
        int i = order[k], b = 0;
        if (!(need[i] <= budget)) { /* NaN too */
            batch_of[i] = -1;
            continue;
        }
        while (b < n_batches && need[i] > room[b]) b++;
        if (b == n_batches) room[n_batches++] = budget;
        room[b] -= need[i];
        batch_of[i] = b;
    }
    free(room);
    free(order);
    return n_batches;
}

int memplan_choose(const double *need_view, const double *need_copy, int n, double budget, int views_fast,
                   int *batch_of, int *use_views, KvErr *err) {
    if (!need_view) {
        *use_views = 0;
        return memplan_split(need_copy, n, budget, batch_of, err);
    }
    int nb_view = memplan_split(need_view, n, budget, batch_of, err);
    *use_views = 1;
    if (nb_view < 0 || views_fast || n == 0) return nb_view;
    int *copy_of = kv_malloc((size_t)n * sizeof *copy_of, err);
    if (!copy_of) return -1;
    int nb_copy = memplan_split(need_copy, n, budget, copy_of, err), same_fit = 1;
    if (nb_copy < 0) {
        free(copy_of);
        return -1;
    }
    for (int i = 0; i < n; i++) same_fit &= (copy_of[i] < 0) == (batch_of[i] < 0);
    if (same_fit && nb_copy <= nb_view) {
        memcpy(batch_of, copy_of, (size_t)n * sizeof *batch_of);
        *use_views = 0;
        nb_view = nb_copy;
    }
    free(copy_of);
    return nb_view;
}

int memplan_parse_bytes(const char *text, const char *what, double *bytes, KvErr *err) {
    static const struct {
        const char *unit;
        double scale;
    } UNITS[] = {{"", 1},          {"B", 1},       {"K", 1024.0},  {"KiB", 1024.0}, {"KB", 1e3},
                 {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6}, {"G", 1073741824.0}, {"GiB", 1073741824.0},
                 {"GB", 1e9},      {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}};
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    /* strtod also reads C's hexadecimal numbers (0x10, 0x1p4): a size is decimal */
    if (end == text || errno || !isfinite(v) || v <= 0 || isspace((unsigned char)text[0]) || strpbrk(text, "xX"))
        return kv_fail(err, "%s '%s': expected a positive size such as 512MiB, 8GiB or 2000000000", what, text);
    while (*end == ' ') end++;
    for (size_t u = 0; u < sizeof UNITS / sizeof UNITS[0]; u++)
        if (!strcmp(end, UNITS[u].unit)) {
            *bytes = floor(v * UNITS[u].scale);
            if (*bytes < 1) break;
            return 0;
        }
    return kv_fail(err, "%s '%s': expected a positive size such as 512MiB, 8GiB or 2000000000 (units B, K/KiB, "
                        "M/MiB, G/GiB, T/TiB in powers of 1024; KB, MB, GB, TB in powers of 1000)", what, text);
}

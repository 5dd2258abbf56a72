/* unicode_tables.h — the shapes of the generated Unicode tables (engine/unicode_tables.c, written by
 * scripts/gen_unicode_tables.py). Only engine/unicode.c reads them; everyone else uses engine/unicode.h. */
#ifndef KVBENCH_UNICODE_TABLES_H
#define KVBENCH_UNICODE_TABLES_H

#include <stdint.h>

/* A run of code points [lo, hi] sharing one value; tables are sorted by lo and do not overlap. */
typedef struct {
    uint32_t lo, hi;
    uint16_t value;
} UnicodeRange;

/* Full canonical decomposition of cp: unicode_decomp_pool[offset .. offset+len). Sorted by cp. */
typedef struct {
    uint32_t cp;
    uint32_t offset;
    uint32_t len;
} UnicodeDecomp;

/* Primary composite: first + second -> composite. Sorted by (first, second). */
typedef struct {
    uint32_t first, second, composite;
} UnicodeComposition;

extern const UnicodeRange unicode_category_ranges[];   /* value: UnicodeCategory; unassigned omitted */
extern const int unicode_category_ranges_n;
extern const UnicodeRange unicode_white_space_ranges[];
extern const int unicode_white_space_ranges_n;
extern const UnicodeRange unicode_py_space_ranges[];
extern const int unicode_py_space_ranges_n;
extern const UnicodeRange unicode_ccc_ranges[];        /* value: canonical combining class; 0 omitted */
extern const int unicode_ccc_ranges_n;
extern const uint32_t unicode_decomp_pool[];
extern const UnicodeDecomp unicode_decomps[];
extern const int unicode_decomps_n;
extern const UnicodeComposition unicode_compositions[];
extern const int unicode_compositions_n;

#endif

/* unicode.c — UTF-8, category lookups and NFC over the generated tables (engine/unicode_tables.c).
 *
 * Lookups are binary searches over sorted code point ranges, with ASCII answered from a small switch-free
 * path because almost all text the benchmarks feed is ASCII. NFC follows UAX #15: full canonical
 * decomposition (Hangul algorithmically), canonical ordering by combining class, then canonical composition
 * of unblocked pairs; ASCII-only input is returned unchanged without running it. */
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

#include "unicode_tables.h"

/* ---------------------------------------------------------------- range tables */

static int range_value(const UnicodeRange *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid - 1;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return r[mid].value;
    }
    return 0;
}

UnicodeCategory unicode_category(uint32_t cp) {
    return (UnicodeCategory)range_value(unicode_category_ranges, unicode_category_ranges_n, cp);
}

int unicode_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    UnicodeCategory c = unicode_category(cp);
    return c >= UC_Lu && c <= UC_Lo;
}

int unicode_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    UnicodeCategory c = unicode_category(cp);
    return c >= UC_Nd && c <= UC_No;
}

int unicode_is_white_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return range_value(unicode_white_space_ranges, unicode_white_space_ranges_n, cp);
}

int unicode_is_py_space(uint32_t cp) {
    return range_value(unicode_py_space_ranges, unicode_py_space_ranges_n, cp);
}

static int combining_class(uint32_t cp) {
    if (cp < 0x300) return 0;
    return range_value(unicode_ccc_ranges, unicode_ccc_ranges_n, cp);
}

/* ---------------------------------------------------------------- UTF-8 */

int32_t utf8_decode(const char *str, size_t len, size_t *pos) {
    const unsigned char *s = (const unsigned char *)str + *pos;
    size_t left = len - *pos;
    if (left == 0) return -1;
    uint32_t c = s[0];
    if (c < 0x80) {
        *pos += 1;
        return (int32_t)c;
    }
    int n;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; c &= 0x07; }
    else return -1;
    if (left < (size_t)n) return -1;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    *pos += (size_t)n;
    return (int32_t)c;
}

int utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_first_invalid(const char *s, size_t len) {
    size_t pos = 0;
    while (pos < len) {
        if ((unsigned char)s[pos] < 0x80) { pos++; continue; }
        if (utf8_decode(s, len, &pos) < 0) return pos;
    }
    return len;
}

size_t utf8_count(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* ---------------------------------------------------------------- NFC */

enum { HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
       HANGUL_LN = 19, HANGUL_VN = 21, HANGUL_TN = 28, HANGUL_NN = HANGUL_VN * HANGUL_TN,
       HANGUL_SN = HANGUL_LN * HANGUL_NN };

static const UnicodeDecomp *find_decomp(uint32_t cp) {
    int lo = 0, hi = unicode_decomps_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_decomps[mid].cp) hi = mid - 1;
        else if (cp > unicode_decomps[mid].cp) lo = mid + 1;
        else return &unicode_decomps[mid];
    }
    return NULL;
}

/* The primary composite of a + b, or 0 when they do not compose. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 && b > HANGUL_T &&
        b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    int lo = 0, hi = unicode_compositions_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const UnicodeComposition *c = &unicode_compositions[mid];
        if (a < c->first || (a == c->first && b < c->second)) hi = mid - 1;
        else if (a > c->first || b > c->second) lo = mid + 1;
        else return c->composite;
    }
    return 0;
}

int unicode_nfc(const char *s, size_t len, char **out, size_t *out_len, KvErr *err) {
    size_t i = 0;
    while (i < len && (unsigned char)s[i] < 0x80) i++;
    if (i == len) { /* ASCII is already NFC */
        char *copy = kv_malloc(len + 1, err);
        if (!copy) return -1;
        memcpy(copy, s, len);
        copy[len] = '\0';
        *out = copy;
        *out_len = len;
        return 0;
    }
    /* Decomposition yields at most 1.5 code points per input byte (3 from a 2-byte character). */
    uint32_t *cps = kv_malloc((len * 2 + 1) * sizeof *cps, err);
    if (!cps) return -1;
    size_t n = 0, pos = 0;
    while (pos < len) {
        int32_t c = utf8_decode(s, len, &pos);
        if (c < 0) {
            free(cps);
            return kv_fail(err, "NFC: invalid UTF-8 at byte %zu", pos);
        }
        uint32_t cp = (uint32_t)c;
        if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
            uint32_t si = cp - HANGUL_S;
            cps[n++] = HANGUL_L + si / HANGUL_NN;
            cps[n++] = HANGUL_V + (si % HANGUL_NN) / HANGUL_TN;
            if (si % HANGUL_TN) cps[n++] = HANGUL_T + si % HANGUL_TN;
            continue;
        }
        const UnicodeDecomp *d = cp < 0xC0 ? NULL : find_decomp(cp);
        if (d) {
            memcpy(cps + n, unicode_decomp_pool + d->offset, d->len * sizeof *cps);
            n += d->len;
        } else {
            cps[n++] = cp;
        }
    }
    /* Canonical ordering: a stable insertion sort by combining class inside each run of non-starters. */
    for (size_t k = 1; k < n; k++) {
        int cc = combining_class(cps[k]);
        if (cc == 0) continue;
        uint32_t c = cps[k];
        size_t j = k;
        while (j > 0) {
            int prev = combining_class(cps[j - 1]);
            if (prev == 0 || prev <= cc) break;
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = c;
    }
    /* Canonical composition: c joins the last starter unless a character in between blocks it. */
    size_t m = 0;
    long starter = -1;
    int last_cc = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t c = cps[k];
        int cc = combining_class(c);
        if (starter >= 0) {
            int adjacent = (size_t)starter == m - 1;
            if (adjacent || (last_cc != 0 && last_cc < cc)) {
                uint32_t comp = compose_pair(cps[starter], c);
                if (comp) {
                    cps[starter] = comp;
                    continue;
                }
            }
        }
        if (cc == 0) starter = (long)m;
        last_cc = cc;
        cps[m++] = c;
    }
    char *buf = kv_malloc(m * 4 + 1, err);
    if (!buf) {
        free(cps);
        return -1;
    }
    size_t b = 0;
    for (size_t k = 0; k < m; k++) b += (size_t)utf8_encode(cps[k], buf + b);
    buf[b] = '\0';
    free(cps);
    *out = buf;
    *out_len = b;
    return 0;
}

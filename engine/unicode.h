/* unicode.h — the Unicode facts the tokenizers and chat templates need: UTF-8 decoding and validation,
 * general categories (regex \p{L}, \p{N}), White_Space (regex \s), Python's str.isspace (Jinja `trim`),
 * and NFC normalisation (Qwen2's normalizer). Tables are generated from Python's unicodedata by
 * scripts/gen_unicode_tables.py into engine/unicode_tables.c. */
#ifndef KVBENCH_UNICODE_H
#define KVBENCH_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* General categories; Cn (unassigned) is 0. The order matches the generator's CATEGORIES list. */
typedef enum {
    UC_Cn = 0, UC_Lu, UC_Ll, UC_Lt, UC_Lm, UC_Lo, UC_Mn, UC_Mc, UC_Me, UC_Nd, UC_Nl, UC_No,
    UC_Pc, UC_Pd, UC_Ps, UC_Pe, UC_Pi, UC_Pf, UC_Po, UC_Sm, UC_Sc, UC_Sk, UC_So,
    UC_Zs, UC_Zl, UC_Zp, UC_Cc, UC_Cf, UC_Cs, UC_Co
} UnicodeCategory;

UnicodeCategory unicode_category(uint32_t cp);
int unicode_is_letter(uint32_t cp);      /* \p{L}: Lu Ll Lt Lm Lo */
int unicode_is_number(uint32_t cp);      /* \p{N}: Nd Nl No */
int unicode_is_white_space(uint32_t cp); /* regex \s (the White_Space property, as Oniguruma and Rust use) */
int unicode_is_py_space(uint32_t cp);    /* Python str.isspace (what Jinja's trim strips) */

/* Decodes one strict UTF-8 sequence at s[*pos] (no overlongs, surrogates or code points above U+10FFFF),
 * advancing *pos. Returns the code point, or -1 without moving *pos when the bytes there are invalid. */
int32_t utf8_decode(const char *s, size_t len, size_t *pos);
/* Writes cp as UTF-8 into out (4 bytes room); returns the byte count. */
int utf8_encode(uint32_t cp, char *out);
/* Byte offset of the first invalid UTF-8 sequence in s[0..len), or len when all of it is valid. */
size_t utf8_first_invalid(const char *s, size_t len);
/* Number of code points in valid UTF-8 (Python's len() of the string). */
size_t utf8_count(const char *s, size_t len);

/* NFC of valid UTF-8 s[0..len) into a malloc'd NUL-terminated string (*out_len bytes). */
int unicode_nfc(const char *s, size_t len, char **out, size_t *out_len, KvErr *err);

#endif

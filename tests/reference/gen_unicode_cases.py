#!/usr/bin/env python3
"""gen_unicode_cases.py — expected values for tests/test_tokenizer.c's Unicode checks, from CPython's
unicodedata (an implementation independent of engine/unicode.c; the tables share only their source data).
Writes tests/data/unicode_cases.json:
  nfc:      [[input, unicodedata.normalize("NFC", input)], ...]   hand-picked hard cases + random strings
  category: [[code point, general category], ...]                  a deterministic sample over all planes
  isspace:  [code points where str.isspace() is true]
Run from the project root:  python3 tests/reference/gen_unicode_cases.py
"""
import json
import random
import unicodedata

HARD = [
    "café", "cafe\u0301", "e\u0301\u0327", "e\u0327\u0301", "A\u030A", "\u212B", "\u2126", "Å\u0301",
    "\u1E9B\u0323", "q\u0307\u0323", "\u0044\u0323\u0307", "\u1100\u1161\u11A8", "\uAC00\u11A8", "한국어",
    "\u0F73", "\u0958", "\u2ADC", "\u0344", "\u0301abc", "a\u0301\u0301", "\u00C7\u0301", "ﬁ ligature",
    "Ǖ\u0300", "\u0041\u0300\u0316", "\u1FB7", "\u1F82", "I\u0307", "\U0001D15E", "x\u0308\u0301y",
    "Äpfel", "naïve résumé", "中文", "😀👍🏽", "\u0915\u093C", "\u09C7\u09BE", "\u0B47\u0B3E\u0B56",
]


def main():
    rng = random.Random(20260101)
    pool = [chr(c) for c in range(0x20, 0x250)] + [chr(c) for c in range(0x300, 0x370)] + \
        [chr(c) for c in range(0x1E00, 0x1F00)] + [chr(c) for c in range(0xAC00, 0xAC40)] + \
        [chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)] + \
        [chr(c) for c in range(0x11A8, 0x11C3)] + ["\u0F71", "\u0F72", "\u0F74", "\u0F80", "\u0345"]
    rand = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    nfc = [[s, unicodedata.normalize("NFC", s)] for s in HARD + rand]
    sample = sorted(set([rng.randrange(0, 0x110000) for _ in range(3000)] + list(range(0, 0x300))))
    category = [[cp, unicodedata.category(chr(cp))] for cp in sample if not 0xD800 <= cp <= 0xDFFF]
    isspace = [cp for cp in range(0x110000) if chr(cp).isspace()]
    with open("tests/data/unicode_cases.json", "w", encoding="utf-8") as f:
        json.dump({"unidata_version": unicodedata.unidata_version, "nfc": nfc, "category": category,
                   "isspace": isspace}, f, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()

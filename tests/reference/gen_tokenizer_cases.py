#!/usr/bin/env python3
"""gen_tokenizer_cases.py — expected ids from Hugging Face `tokenizers` (the Rust library) for the
tokenizer.json folders in tests/data/tokenizers/, written as expected_ids_hf.json beside each
(same format as expected_ids.json: {"source", "cases": [{"text", "ids"}]}; add_special_tokens=False).
Also llama2-spm/variants_hf.json: the same vocabulary with its Prepend+Replace normaliser swapped for
Metaspace pre-tokenizers (newer SentencePiece-style tokenizer.json files): {"variants": [{"name",
"replace": {key: value for the top level of tokenizer.json}, "cases": [...]}]}.

The texts stress the pre-tokenizer scanners and normalisers: whitespace runs mixing \\r \\n \\t, NBSP and other
Unicode spaces, contractions in any case, digit runs, non-ASCII numbers, combining marks (NFC), Hangul,
emoji sequences, code, special-token strings, and random strings over those characters (seeded).
Run from the project root:  pip install -r tests/reference/requirements.txt
                            python3 tests/reference/gen_tokenizer_cases.py
"""
import json
import random

import tokenizers
from tokenizers import Tokenizer

FOLDERS = ["llama3.1", "qwen3", "llama2-spm"]
FIXED = [
    "a\r\n\r\nb", " \n \n x", "x \n", "\t\t\n  \n\tend", "tail spaces   ", "  \u00a0\u00a0 nb\u00a0sp",
    "ideographic\u3000space\u2003em", "zero\u200bwidth", "HE'S WE'LL THEY'RE I'D YOU'VE IT'S 'S'T",
    "don't can't 'tis rock'n'roll ''s", "1 12 123 1234 12345 123456 1234567", "\u00bd \u00b2 \u2166 \u0663\u0664\u0665 \u4e09",
    "e\u0301 a\u0308 o\u0302\u0323 \u212b \u1e9b\u0323", "\ud55c\uad6d\uc5b4 \u1100\u1161\u11a8", "\U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7",
    "for (int i = 0; i < n; ++i) {\n\tx[i] += y[i] * 2;\n}\n", "<|begin_of_text|><|eot_id|>plain<|im_start|>x<|im_end|>",
    "<s>[INST] hi [/INST]</s>", "!!!???...,,,;;;", " ( [ { < > } ] ) ", "\u2581already\u2581metaspace", "\x7f\x01\x1c\x1f ctrl",
    "caf\u00e9\u0301 \u0915\u093c", "\u00ff\u0100\u0143\u0120\u010a", "x" * 300, "ab " * 200,
]
POOL = (list("abcXYZ019 '\n\r\t.,!?-_#<>|") + ["\u00a0", "\u3000", "\u0301", "\u0308", "\u00e9", "\u00bd",
        "\u4e2d", "\u6587", "\ud55c", "\U0001F600", "\u200b", "'s", "'LL", "<|eot_id|>", "<s>", "  ", "\n\n", "12345"])


def main():
    rng = random.Random(1234)
    rand = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 30))) for _ in range(200)]
    texts = FIXED + rand
    for name in FOLDERS:
        tk = Tokenizer.from_file(f"tests/data/tokenizers/{name}/tokenizer.json")
        cases = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in texts]
        with open(f"tests/data/tokenizers/{name}/expected_ids_hf.json", "w", encoding="utf-8") as f:
            json.dump({"source": f"Hugging Face tokenizers {tokenizers.__version__} (Rust), "
                       "encode(text, add_special_tokens=False)", "cases": cases}, f, ensure_ascii=True)
            f.write("\n")
    metaspace_variants(texts[:120])


METASPACE_VARIANTS = [
    ("metaspace_first_nosplit", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                 "split": False}),
    ("metaspace_always_split", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                "split": True}),
    ("metaspace_never_split", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never",
                               "split": True}),
]


def metaspace_variants(texts):
    path = "tests/data/tokenizers/llama2-spm/tokenizer.json"
    base = json.load(open(path, encoding="utf-8"))
    out = {"source": f"Hugging Face tokenizers {tokenizers.__version__}", "variants": []}
    for name, pre in METASPACE_VARIANTS:
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}] + ([] if pre["prepend_scheme"] == "never" else
                                 [{"type": "Strip", "content": " ", "start": 1, "stop": 0}])}
        replace = {"normalizer": None, "pre_tokenizer": pre, "decoder": decoder}
        tk = Tokenizer.from_str(json.dumps(dict(base, **replace)))
        cases = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in texts]
        out["variants"].append({"name": name, "replace": replace, "cases": cases})
    with open("tests/data/tokenizers/llama2-spm/variants_hf.json", "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""gen_decode_cases.py — answer text as transformers decodes it, for tests/test_tokenizer.c (decode_cases).

kvpress's pipeline decodes an answer with tokenizer.decode(ids, skip_special_tokens=True) (pipeline.py:281), and
transformers ends decode with clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...) when the tokenizer's
clean_up_tokenization_spaces is set: from tokenizer_config.json for a Hugging Face folder, and for a GGUF as its
converter decides (integrations/ggml.py: only the llama converter, for a byte-level vocabulary). For every
tokenizer below this records the flag transformers settled on, and for a set of id sequences (texts full of " ."
" ," " n't" " 's" ..., encoded by the same tokenizer, plus single ids such as SmolLM2's 4563 " ...") the text of
decode(ids, skip_special_tokens=s) and of the same decode without the clean-up ("raw"). The bare SentencePiece
model of Mistral v3 gets its flag only: transformers has no one way to open a lone tokenizer.model.v3 (its Llama
classes built from it keep or drop a leading space differently from sentencepiece, whose decode kvbench follows;
Mistral's own folders ship a tokenizer.json). Mistral's rule is covered by the SentencePiece GGUF and Llama-2 folder.

Writes (run from the project root; PyPI transformers==4.57.0, tokenizers, gguf, sentencepiece, protobuf; no torch):
  tests/data/tokenizers/gguf-cleanup/llama-bpe.gguf  vocabulary-only GGUFs, architecture llama / qwen2, a toy
  tests/data/tokenizers/gguf-cleanup/qwen2-bpe.gguf  byte-level vocabulary (bytes, words, three control tokens)
  tests/data/tokenizers/decode_cases.json  {"source", "tokenizers": [{"path", "loaded_as", "clean_up",
                                            "cases": [{"ids", "skip_special", "text", "raw"}]}]}
transformers refuses to read a GGUF without torch installed, though it reads only metadata here: the generator
lifts that check (is_torch_available) in transformers' GGUF module and nothing else.
"""
import json
import os

import gguf
import tokenizers
import transformers
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer, LlamaTokenizerFast

gguf_utils.is_torch_available = lambda: True

OUT = "tests/data/tokenizers"
SMOLLM2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello , world . Is it ? Yes ! I don 't know , he 's here .",
    "I 'm sure we 've seen it ; they 're gone . ' quoted ' and 'so ' on",
    " ... and then ... the end ...",
    "a  . b  , c ?? d !!  ' ' x n't n'tn 't 'm 're 've 's",
    "Numbers 1 , 2 , 3 . Done.",
    "tab\t. newline\n. nbsp\u00a0. caf\u00e9 . \u4e2d\u6587 , \U0001F600 !",
    " .leading and trailing ,",
    "it ' s  ' ' ' end",
    "  .  ,  ?  !",
]

WORDS = ["Hello", "world", "Ġ.", "Ġ,", "Ġ?", "Ġ!", "Ġ'", "Ġn't", "Ġ'm", "Ġ's", "Ġ've", "Ġ're", "Ġ...", "Ġdon",
         "ĠI", "Ġhe", "Ġis", "n't", "'s"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_alphabet():
    """GPT-2's byte -> character map, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def write_toy_gguf(path, arch, pre):
    """A vocabulary-only GGUF: the 256 byte tokens, WORDS with the left-to-right merges that build them (every
    prefix a token too), and SPECIAL as control tokens."""
    tokens = byte_alphabet()
    merges = []
    for w in WORDS:
        for i in range(2, len(w) + 1):
            if w[:i] not in tokens:
                merges.append(f"{w[:i - 1]} {w[i - 1]}")
                tokens.append(w[:i])
    types = [1] * len(tokens) + [3] * len(SPECIAL)
    tokens += SPECIAL
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"toy-{arch}-bpe")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cases(tk, extra):
    """Each text encoded (no special tokens added), decoded alone and with a chat end-of-turn appended where the
    vocabulary has one; then single ids."""
    seqs = []
    end = [i for i in (tk.convert_tokens_to_ids(s) for s in ("<|im_end|>", "<|eot_id|>", "</s>"))
           if isinstance(i, int) and i != tk.unk_token_id][:1]
    for t in TEXTS:
        ids = tk.encode(t, add_special_tokens=False)
        seqs += [ids, ids + end]
    seqs += [[i] for i in extra]
    out = []
    for ids in seqs:
        for skip in (True, False):
            out.append({"ids": ids, "skip_special": int(skip), "text": tk.decode(ids, skip_special_tokens=skip),
                        "raw": tk.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)})
    return out


def gguf_tokenizer(path):
    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def main():
    os.makedirs(f"{OUT}/gguf-cleanup", exist_ok=True)
    write_toy_gguf(f"{OUT}/gguf-cleanup/llama-bpe.gguf", "llama", "smollm")
    write_toy_gguf(f"{OUT}/gguf-cleanup/qwen2-bpe.gguf", "qwen2", "qwen2")
    # (path as kvbench opens it, how transformers loads it, loader, single ids decoded alone)
    sources = [
        (SMOLLM2, "AutoTokenizer gguf_file", lambda p: gguf_tokenizer(p), [4563, 30, 28, 0, 2, 1]),
        (f"{OUT}/gguf-cleanup/llama-bpe.gguf", "AutoTokenizer gguf_file", gguf_tokenizer, []),
        (f"{OUT}/gguf-cleanup/qwen2-bpe.gguf", "AutoTokenizer gguf_file", gguf_tokenizer, []),
        (f"{OUT}/llamacpp-vectors/ggml-vocab-llama-spm.gguf", "AutoTokenizer gguf_file", gguf_tokenizer, [29889]),
        (f"{OUT}/llamacpp-vectors/ggml-vocab-gpt-2.gguf", "AutoTokenizer gguf_file", gguf_tokenizer, []),
        (f"{OUT}/llama3.1", "AutoTokenizer", AutoTokenizer.from_pretrained, [128009]),
        (f"{OUT}/qwen3", "AutoTokenizer", AutoTokenizer.from_pretrained, [151645]),
        (f"{OUT}/llama2-spm", "AutoTokenizer", AutoTokenizer.from_pretrained, []),
        ("tests/data/hf_fixtures/llama", "AutoTokenizer", AutoTokenizer.from_pretrained, []),
        (f"{OUT}/mistral-v3/tokenizer.model.v3", "LlamaTokenizerFast(vocab_file)",
         lambda p: LlamaTokenizerFast(vocab_file=p), None),
    ]
    out = []
    for path, how, load, extra in sources:
        if not os.path.exists(path):
            raise SystemExit(f"{path}: missing (make model fetches SmolLM2)")
        tk = load(path)
        out.append({"path": path, "loaded_as": f"{how}: {type(tk).__name__}",
                    "clean_up": bool(tk.clean_up_tokenization_spaces),
                    "cases": [] if extra is None else cases(tk, extra)})
        changed = sum(c["text"] != c["raw"] for c in out[-1]["cases"])
        print(f"{path}: {type(tk).__name__} clean_up={tk.clean_up_tokenization_spaces}, "
              f"{len(out[-1]['cases'])} cases, {changed} changed by the clean-up")
    with open(f"{OUT}/decode_cases.json", "w", encoding="utf-8") as f:
        json.dump({"source": f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}: "
                   "tokenizer.decode(ids, skip_special_tokens=s); raw: the same with "
                   "clean_up_tokenization_spaces=False", "tokenizers": out}, f, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()

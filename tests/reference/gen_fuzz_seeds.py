"""Writes the seeds and crafted inputs of the tokenizer, database and zip fuzz targets (tests/fuzz/fuzz_inputs.h)
into tests/data/fuzz/<target>/; test_model_input replays them all (seed_* must load, the others load or are
refused in one line). Run from the project root; standard library only.

gguf_tokenizer: small byte-level (gpt2) and SentencePiece (llama) vocabularies, and split_char.gguf: a byte-level
  vocabulary whose user-defined token is a lone UTF-8 continuation byte (0xA9), which cut "café" inside its "é"
  and made encode_segment write past its offsets (heap overflow, exit 139 before the fix).
tokenizer_json: a byte-level BPE and a Metaspace BPE tokenizer.json.
spm_model: a SentencePiece ModelProto (BPE, byte fallback).
results_db: generator inputs (fuzz_results_db): the base database untouched, and a text score in a non-STRICT copy.
zip: a valid data.zip holding data/trec.jsonl, and the same archive whose member claims 3.9 GB (211 bytes on disk).
"""
import io
import json
import os
import struct
import zipfile

OUT = "tests/data/fuzz"


def put(target, name, data):
    os.makedirs(f"{OUT}/{target}", exist_ok=True)
    with open(f"{OUT}/{target}/{name}", "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- GGUF (v3, vocabulary only)

def gs(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return gs(k) + struct.pack("<I", 8) + gs(v)


def kv_bool(k, v):
    return gs(k) + struct.pack("<IB", 7, v)


def kv_u32(k, v):
    return gs(k) + struct.pack("<II", 4, v)


def kv_arr(k, etype, fmt, vs):
    body = b"".join(gs(v) for v in vs) if etype == 8 else b"".join(struct.pack(fmt, v) for v in vs)
    return gs(k) + struct.pack("<II", 9, etype) + struct.pack("<Q", len(vs)) + body


def gguf(kvs):
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)


def gpt2_alphabet():
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    cps, n = {}, 256
    for b in range(256):
        if b in keep:
            cps[b] = b
        else:
            cps[b] = n
            n += 1
    return [chr(cps[b]) for b in range(256)]


def byte_level_gguf(pre, extra_types):
    alpha = gpt2_alphabet()
    toks = list(alpha)
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w"), ("\u0120w", "o"), ("c", "a"),
              ("ca", "f"), ("\u00c3", "\u00a9")]
    for a, b in merges:
        toks.append(a + b)
    types = [1] * len(toks)
    for text, ty in extra_types:
        toks.append(text)
        types.append(ty)
    return gguf([kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", pre),
                 kv_arr("tokenizer.ggml.tokens", 8, None, toks), kv_arr("tokenizer.ggml.token_type", 5, "<i", types),
                 kv_arr("tokenizer.ggml.merges", 8, None, [a + " " + b for a, b in merges]),
                 kv_u32("tokenizer.ggml.bos_token_id", len(toks) - 2), kv_u32("tokenizer.ggml.eos_token_id", len(toks) - 1)])


SP = "\u2581"


def spm_vocab():
    toks = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    toks += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    for i, p in enumerate([SP, "c", "a", "f", "h", "e", "l", SP + "c", "af", "\u00e9", SP + "caf", "he", "ll", "o", SP + "h", "[", "]", "INST",
                           SP + SP, "x"]):
        toks.append((p, -float(i), 1))
    return toks


def spm_gguf():
    toks = spm_vocab()
    return gguf([kv_str("tokenizer.ggml.model", "llama"), kv_arr("tokenizer.ggml.tokens", 8, None, [t for t, _, _ in toks]),
                 kv_arr("tokenizer.ggml.scores", 6, "<f", [s for _, s, _ in toks]),
                 kv_arr("tokenizer.ggml.token_type", 5, "<i", [ty for _, _, ty in toks]),
                 kv_bool("tokenizer.ggml.add_space_prefix", 1), kv_u32("tokenizer.ggml.bos_token_id", 1),
                 kv_u32("tokenizer.ggml.eos_token_id", 2), kv_u32("tokenizer.ggml.unknown_token_id", 0)])


put("gguf_tokenizer", "seed_gpt2.gguf", byte_level_gguf("gpt-2", [("<|im_start|>", 3), ("<|im_end|>", 3)]))
put("gguf_tokenizer", "seed_qwen2_nfc.gguf", byte_level_gguf("qwen2", [("<|im_start|>", 3), ("<|im_end|>", 4)]))
put("gguf_tokenizer", "seed_spm.gguf", spm_gguf())
put("gguf_tokenizer", "split_char.gguf", byte_level_gguf("gpt-2", [(b"\xa9", 4), ("<s>", 3), ("</s>", 3)]))

# ---------------------------------------------------------------- tokenizer.json

alpha = gpt2_alphabet()
vocab = {c: i for i, c in enumerate(alpha)}
for m in ["he", "ll", "hell", "hello", "\u0120w"]:
    vocab[m] = len(vocab)
byte_level = {
    "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "special": True, "lstrip": False, "rstrip": False},
                     {"id": len(vocab) + 1, "content": "<tool>", "special": False, "lstrip": True, "rstrip": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": dict(vocab, **{"<|endoftext|>": len(vocab), "<tool>": len(vocab) + 1}),
              "merges": ["h e", "l l", "he ll", "hell o", "\u0120 w"]},
}
put("tokenizer_json", "seed_bytelevel.json", json.dumps(byte_level).encode())
sv = {t: i for i, (t, _, _) in enumerate(spm_vocab())}
metaspace = {
    "added_tokens": [{"id": 1, "content": "<s>", "special": True}, {"id": 2, "content": "</s>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SP}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"},
                                                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": sv,
              "merges": [SP + " c", "a f", SP + "c af", "h e", "l l", SP + " " + SP]},
}
put("tokenizer_json", "seed_metaspace.json", json.dumps(metaspace).encode())

# ---------------------------------------------------------------- SentencePiece ModelProto


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def piece(text, score, ty):
    return field(1, 2, field(1, 2, text.encode()) + field(2, 5, struct.pack("<f", score)) + field(3, 0, varint(ty)))


model = b"".join(piece(t, s, {2: 2, 3: 3, 6: 6}.get(ty, 1)) for t, s, ty in spm_vocab())
model += field(2, 2, field(3, 0, varint(2)) + field(35, 0, varint(1)))  # trainer_spec: BPE, byte_fallback
model += field(3, 2, field(1, 2, b"identity") + field(3, 0, varint(1)) + field(4, 0, varint(0)))
put("spm_model", "seed_bpe.model", model)

# ---------------------------------------------------------------- results_db generator inputs

put("results_db", "seed_base", b"\x00")
put("results_db", "seed_strict_edit", bytes([0, 0, 2, 9, 1, 2, 3, 0, 0]))  # STRICT kept: the edit is refused by SQLite
put("results_db", "text_score", bytes([1, 0, 2, 10, 1, 3, 0, 0, 0]))  # non-STRICT: results.score = 'abc'
put("results_db", "null_model_id", bytes([1, 0, 1, 16, 1, 0, 0, 0, 0]))  # samples.model_id = NULL
put("results_db", "heads_wrap", bytes([1, 0, 4, 7, 1, 1, 5, 0, 0, 0, 4, 8, 1, 1, 6, 0, 0]))

# ---------------------------------------------------------------- LongBench data.zip

ROW = b'{"input": "q", "context": "c", "answers": ["a"], "all_classes": ["a"], "length": 1, "_id": "x"}\n'


def archive():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("data/trec.jsonl", ROW * 8)
    return bytearray(buf.getvalue())


def claim(data, size):
    struct.pack_into("<I", data, data.index(b"PK\x03\x04") + 22, size)
    struct.pack_into("<I", data, data.index(b"PK\x01\x02") + 24, size)
    return data


put("zip", "seed_trec.zip", archive())
put("zip", "claims_3_9gb.zip", claim(archive(), 3_900_000_000))

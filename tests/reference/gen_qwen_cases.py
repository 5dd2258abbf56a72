#!/usr/bin/env python3
"""gen_qwen_cases.py — what transformers 4.57.0 does with a Qwen2.5 GGUF, for tests/test_qwen.c.

Loads MODEL.gguf the way a transformers user does, AutoTokenizer / AutoModelForCausalLM.from_pretrained(dir,
gguf_file=..., torch_dtype=torch.float32) (the weights dequantised by gguf-py, the forward in float32 by torch), and
records in OUT.json:
  - "model": the GGUF's path (test_qwen runs the file only where that model is present) and its "vocab";
  - "chat": user messages rendered by tokenizer.apply_chat_template(add_generation_prompt=True), i.e. the GGUF's own
    tokenizer.chat_template (tools-less branch, the default system prompt when there is none), as text and as ids;
  - "stop_ids": generation_config.eos_token_id, the stop set transformers' generate (and the reference pipeline's
    generate_answer) uses; "tokenizer_eos" the tokenizer's eos_token_id, which generate does not use;
  - "cases": 4 chat prompts (3 short ones and a needle in a 1,600-token haystack of the project's Paul Graham essays)
    with their ids, the logits at a few positions and 32 greedy tokens (generate, do_sample=False, stopping at
    stop_ids as generate does) with the answer text (decode, skip_special_tokens=True) and the smallest top-1 /
    top-2 logit gap along the greedy path (the margin the greedy comparison has).
A full logits row is 151,936 floats (600 KB), so each recorded position keeps the logits of the reference's
top 64 ids and of 256 fixed ids spread over the vocabulary (seeded), with the row's argmax and max |logit|, so the
test can hold kvbench's row to a tolerance relative to the row's scale.
Usage (from the project root; needs torch, transformers==4.57.0, gguf), one run per model:
  python3 tests/reference/gen_qwen_cases.py models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf \
      tests/data/reference/qwen2.5-coder-0.5b.json            (make model-qwen)
  python3 tests/reference/gen_qwen_cases.py models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf \
      tests/data/reference/qwen2.5-coder-1.5b.json            (make model-qwen15)
"""
import json
import os
import sys

import numpy as np

N_GREEDY = 32
TOP = 64
N_FIXED = 256

CHAT_MESSAGES = [
    "Hello",
    "",
    "  Leading and trailing spaces, a tab\tand\nnewlines\n\n",
    "Caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600 <|im_end|> as text",
]

NEEDLE = "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
NEEDLE_QUESTION = "\n\nWhat is the best thing to do in San Francisco? Answer in one sentence."


def haystack(n_words):
    """The first n_words words of the essays in datasets/assets/niah (sorted by name), the needle at half depth."""
    d = "datasets/assets/niah"
    words = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".txt"):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                words += f.read().split()
    words = words[:n_words]
    half = n_words // 2
    return " ".join(words[:half]) + NEEDLE + " ".join(words[half:])


PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in two sentences why the sky is blue.",
    haystack(1250) + NEEDLE_QUESTION,
]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gen_qwen_cases.py MODEL.gguf OUT.json")
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not os.path.exists(gguf_path):
        sys.exit(f"{gguf_path} not found (make model-qwen, make model-qwen15)")
    assert transformers.__version__ == "4.57.0", transformers.__version__
    torch.manual_seed(0)
    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32).eval()
    stop = model.generation_config.eos_token_id
    stop = [stop] if isinstance(stop, int) else list(stop)

    out = {"model": gguf_path, "transformers": transformers.__version__, "torch": torch.__version__,
           "vocab": model.config.vocab_size, "stop_ids": stop, "tokenizer_eos": tok.eos_token_id,
           "n_greedy": N_GREEDY, "chat": [], "cases": []}
    for msg in CHAT_MESSAGES:
        conv = [{"role": "user", "content": msg}]
        text = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
        out["chat"].append({"message": msg, "text": text, "ids": list(map(int, ids))})

    V = model.config.vocab_size
    fixed = np.sort(np.random.default_rng(24).choice(V, N_FIXED, replace=False))
    for prompt in PROMPTS:
        conv = [{"role": "user", "content": prompt}]
        text = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
        n = len(ids)
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].numpy()                      # [n, V] float32
            gen = model.generate(x, max_new_tokens=N_GREEDY, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True)
        greedy = gen.sequences[0, n:].tolist()
        gap = min(float(np.diff(np.sort(s[0].numpy())[-2:])[0]) for s in gen.scores)
        positions = sorted({n // 2, n - 2, n - 1} | ({255, 511, 512, 1023} if n > 1100 else set()))
        rows = []
        for p in positions:
            row = logits[p]
            keep = np.union1d(np.argsort(row)[-TOP:], fixed)
            rows.append({"position": p, "argmax": int(np.argmax(row)), "max_abs": float(np.abs(row).max()),
                         "ids": keep.tolist(), "logits": [float(v) for v in row[keep]]})
        answer = tok.decode(greedy, skip_special_tokens=True)
        out["cases"].append({"message": prompt, "text": text, "ids": list(map(int, ids)), "positions": rows,
                             "greedy": greedy, "answer": answer, "min_top2_gap": gap})
        print(f"{n} ids -> {answer!r} (min top-2 gap {gap:.3g})")
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as fo:
        json.dump(out, fo, ensure_ascii=True, separators=(",", ":"))
        fo.write("\n")
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")


if __name__ == "__main__":
    main()

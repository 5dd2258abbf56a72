#!/usr/bin/env python3
"""gen_chat_cases.py — expected chat renderings, context|question splits and their ids for tests/test_chat.c.

Independent of engine/chat.c: the templates below are the families' Jinja chat templates reduced to their
no-tools branches (Meta's Llama-3.1 template with its always-present system block and `| trim`, Mistral v0.3,
Qwen2.5, SmolLM2; spec models.md §3.5), rendered by jinja2 the way transformers does (trim_blocks,
lstrip_blocks); the split is kvpress/pipeline.py's `preprocess` (spec policies.md §4.3), a ValueError
recorded as "error"; ids come from Hugging Face `tokenizers` with add_special_tokens=False for the families
whose tokenizer.json is in tests/data/tokenizers (Llama-3.1; Qwen2.5 = the qwen3 folder's vocabulary).
Run from the project root:  python3 tests/reference/gen_chat_cases.py   (writes tests/data/chat_cases.json)
"""
import json

import jinja2
from tokenizers import Tokenizer

LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL = """{{- bos_token }}
{%- for message in messages %}
    {%- if message["role"] == "user" %}
        {{- "[INST] " + message["content"] + "[/INST]" }}
    {%- endif %}
{%- endfor %}
"""

QWEN25 = """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

SMOLLM2 = """{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}"""

FAMILIES = {
    "llama3": (LLAMA31, {"bos_token": "<|begin_of_text|>"}, "llama3.1"),
    "mistral": (MISTRAL, {"bos_token": "<s>"}, None),
    "qwen2": (QWEN25, {}, "qwen3"),
    "smollm2": (SMOLLM2, {}, None),
}

CASES = [
    ("The passkey is 71432. Remember it.", "What is the passkey?", "Answer:"),
    ("\n\n  Leading whitespace, trailing spaces   ", " Question with spaces? ", ""),
    ("Caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600\n", "Translate.", " "),
    ("## Heading\n### Sub\n#", "Which heading?", "A: "),
    ("\u00a0\u3000 unicode spaces lead", "Q", ""),
    ("line one\r\nline two\r\n", "\nHow many lines?\n", "Answer: "),
    ("   \n ", "whitespace-only context", ""),
    ("", "empty context", ""),
]


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    out = {"renders": {}, "splits": []}
    for fam, (src, extra, tok_dir) in FAMILIES.items():
        tmpl = env.from_string(src)

        def render(content):
            return tmpl.render(messages=[{"role": "user", "content": content}], add_generation_prompt=True, **extra)

        out["renders"][fam] = render("Hello")
        tk = Tokenizer.from_file(f"tests/data/tokenizers/{tok_dir}/tokenizer.json") if tok_dir else None
        for context, question, answer_prefix in CASES:
            case = {"family": fam, "context": context, "question": question, "answer_prefix": answer_prefix}
            sep = "\n" + "#" * len(context)
            try:
                context_text, question_suffix = render(context + sep).split(sep)
            except ValueError:
                case["error"] = True
                out["splits"].append(case)
                continue
            question_text = question + question_suffix + answer_prefix
            full = render(context + question)
            case.update({"context_text": context_text, "question_text": question_text, "full": full,
                         "parts_equal_full_plus_prefix": context_text + question_text == full + answer_prefix})
            if tk:
                case["context_ids"] = tk.encode(context_text, add_special_tokens=False).ids
                case["question_ids"] = tk.encode(question_text, add_special_tokens=False).ids
            out["splits"].append(case)
    with open("tests/data/chat_cases.json", "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

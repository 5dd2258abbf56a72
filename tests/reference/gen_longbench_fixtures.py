#!/usr/bin/env python3
"""gen_longbench_fixtures.py — small LongBench v1 fixtures in the official schema, and the expected prompt
texts the C reader must produce, computed here independently with Python's str.format on DefensiveKV's split
templates (as its create_huggingface_dataset.py does).

Run by hand from the project root:  python3 tests/reference/gen_longbench_fixtures.py
Writes tests/data/longbench/fixtures/{trec,samsum,qasper,bad_json,bad_utf8,no_answers}.jsonl (the bad_* files are
named by the task they pretend to be through the directory layout below), tests/data/longbench/data.zip
(members data/trec.jsonl, data/samsum.jsonl, data/qasper.jsonl; no other task), and
tests/data/longbench/expected_prompts.json. Inputs: tests/data/longbench/{multi_news,lcc}.jsonl (real LongBench
records) and datasets/assets/longbench/defensivekv_split_prompts.json."""
import json
import os
import zipfile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DATA = os.path.join(ROOT, "tests", "data", "longbench")
FIX = os.path.join(DATA, "fixtures")


def rec(task, context, inp, answers, all_classes=None, idx=0):
    words = len((context + " " + inp).split())
    return {"input": inp, "context": context, "answers": answers, "length": words, "dataset": task,
            "language": "en", "all_classes": all_classes, "_id": "%048x" % (0xC0FFEE + idx)}


TREC_CLASSES = ["Abbreviation", "Entity", "Description and abstract concept", "Human being", "Location",
                "Numeric value"]
FIXTURES = {
    "trec": [rec("trec", "Question: What is the capital of France?\nType: Location\nQuestion: Who wrote Hamlet?\n"
                 "Type: Human being", "Question: How far is the moon?\nType:", ["Numeric value"], TREC_CLASSES, i)
             for i in range(3)],
    "samsum": [rec("samsum", "Dialogue: Ann: hi {there}\nBob: hello\nSummary: Ann greets Bob.",
                   "Dialogue: Cy: see you at {5}?\nDee: ok\nSummary:", ["Cy and Dee meet at 5."], None, i)
               for i in range(2)],
    "qasper": [rec("qasper", "We train on {context} and {input} braces — naïve café.", "What is trained?",
                   ["braces", "unanswerable"], None, 0)],
}


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    os.makedirs(FIX, exist_ok=True)
    for task, records in FIXTURES.items():
        write_jsonl(os.path.join(FIX, task + ".jsonl"), records)
    # bad inputs, each a trec file in its own directory (the reader looks for DIR/trec.jsonl)
    good = [json.dumps(r) for r in FIXTURES["trec"]]
    bad = {
        "bad_json": [good[0], good[1], '{"input": "cut off', good[2]],          # line 3 is not JSON
        "no_answers": [good[0], json.dumps({k: v for k, v in FIXTURES["trec"][1].items() if k != "answers"})],
    }
    for name, lines in bad.items():
        os.makedirs(os.path.join(FIX, name), exist_ok=True)
        with open(os.path.join(FIX, name, "trec.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
    os.makedirs(os.path.join(FIX, "bad_utf8"), exist_ok=True)
    with open(os.path.join(FIX, "bad_utf8", "trec.jsonl"), "wb") as f:
        f.write((good[0] + "\n").encode())
        f.write(good[1].encode().replace(b"capital", b"capit\xe9l") + b"\n")   # line 2: a Latin-1 byte
    with zipfile.ZipFile(os.path.join(DATA, "data.zip"), "w", zipfile.ZIP_DEFLATED) as z:
        for task in ["trec", "samsum", "qasper"]:
            z.write(os.path.join(FIX, task + ".jsonl"), "data/%s.jsonl" % task)

    split = json.load(open(os.path.join(ROOT, "datasets", "assets", "longbench", "defensivekv_split_prompts.json")))
    expected = []
    sources = [("multi_news", os.path.join(DATA, "multi_news.jsonl"), [0, 17, 199]),
               ("lcc", os.path.join(DATA, "lcc.jsonl"), [0, 3, 99])]
    sources += [(t, os.path.join(FIX, t + ".jsonl"), list(range(len(r)))) for t, r in FIXTURES.items()]
    for task, path, rows in sources:
        lines = open(path, encoding="utf-8").read().splitlines()
        for row in rows:
            r = json.loads(lines[row])
            expected.append({"task": task, "row": row,
                             "context": split["context_prompt"][task].format(context=r["context"]),
                             "question": split["question_prompt"][task].format(input=r["input"]),
                             "answers": r["answers"], "all_classes": r["all_classes"]})
    # LongBench-style middle truncation with a whitespace-word counter, by brute force over character positions:
    # the longest prefix and the shortest suffix of context+question with at most limit//2 words each.
    r = json.loads(open(os.path.join(DATA, "multi_news.jsonl")).read().splitlines()[0])
    ctx = split["context_prompt"]["multi_news"].format(context=r["context"])
    q = split["question_prompt"]["multi_news"].format(input=r["input"])
    full, limit = ctx + q, 600
    half = limit // 2
    p = max(i for i in range(len(ctx) + 1) if len(full[:i].split()) <= half)
    s = min(i for i in range(p, len(ctx) + 1) if len(full[i:].split()) <= half)
    truncation = {"task": "multi_news", "row": 0, "limit": limit, "words_before": len(full.split()),
                  "context": full[:p] + full[s:len(ctx)]}
    json.dump({"prompts": expected, "truncation": truncation}, open(os.path.join(DATA, "expected_prompts.json"), "w"),
              ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()

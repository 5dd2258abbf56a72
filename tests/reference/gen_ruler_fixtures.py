#!/usr/bin/env python3
"""gen_ruler_fixtures.py — RULER test fixtures: the first records of the real RULER-4096 niah_multikey_3 file
(for the generator's structure and length check) and tiny SQuAD-v2 / HotpotQA-distractor files in the official
schemas (for qa_1 / qa_2 reading a user's data path).

Run by hand from the project root (needs ../shared/data, present only in the development checkout):
    python3 tests/reference/gen_ruler_fixtures.py"""
import json
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OUT = os.path.join(ROOT, "tests", "data", "ruler")
SHARED = os.path.join(ROOT, "..", "shared", "data", "ruler_samples", "niah_multikey_3_4096.jsonl")


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(SHARED) as f, open(os.path.join(OUT, "niah_multikey_3_4096_head.jsonl"), "w") as out:
        for _ in range(4):
            out.write(f.readline())
    # SQuAD v2 dev schema: data[].paragraphs[].{context, qas[].{question, answers[].text, is_impossible}}
    articles = []
    for a in range(6):
        paras = []
        for p in range(4):
            city = "City%d%d" % (a, p)
            paras.append({"context": "Paragraph %d of article %d. The museum of %s opened in %d." % (p, a, city, 1900 + 10 * a + p),
                          "qas": [{"id": "q%d%d" % (a, p), "question": "When did the museum of %s open?" % city,
                                   "answers": [{"text": str(1900 + 10 * a + p), "answer_start": 0},
                                               {"text": "in %d" % (1900 + 10 * a + p), "answer_start": 0}],
                                   "is_impossible": False},
                                  {"id": "x%d%d" % (a, p), "question": "Who closed it?", "answers": [],
                                   "plausible_answers": [], "is_impossible": True}]})
        articles.append({"title": "Article %d" % a, "paragraphs": paras})
    json.dump({"version": "v2.0", "data": articles}, open(os.path.join(OUT, "squad_tiny.json"), "w"), indent=0)
    # HotpotQA dev distractor schema: [{question, answer, context: [[title, [sentences]]]}]
    hotpot = []
    for q in range(5):
        ctx = [["Title %d-%d" % (q, k), ["Sentence one about %d-%d. " % (q, k), "Sentence two."]] for k in range(10)]
        ctx[3][1].append(" The river of place %d is the Blue%d." % (q, q))
        hotpot.append({"_id": "h%d" % q, "question": "Which river flows through place %d?" % q, "answer": "Blue%d" % q,
                       "context": ctx, "supporting_facts": [["Title %d-3" % q, 2]], "type": "bridge", "level": "easy"})
    json.dump(hotpot, open(os.path.join(OUT, "hotpotqa_tiny.json"), "w"), indent=0)


if __name__ == "__main__":
    main()

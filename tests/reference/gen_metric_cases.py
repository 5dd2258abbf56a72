#!/usr/bin/env python3
"""gen_metric_cases.py — writes tests/data/metrics/<metric>.jsonl, the recorded cases test_metrics.c checks.

Each line: {"metric", "task", "prediction", "answers", "all_classes", "expected"}; expected is the per-sample
score (0..1) the reference Python computes: LongBench's eval.py scorer for one sample (the first-line rule for
trec / triviaqa / samsum / lsht, the max over answers) with the metrics of LongBench's metrics.py re-typed
below from docs/spec/datasets.md §1.6, the `rouge` package 1.0.1 for Rouge-L and fuzzywuzzy 0.18 over difflib
(python-Levenshtein is blocked: LongBench's environment does not install it); RULER's per-sample
string_match_all / string_match_part after its prediction clean-up (§2.6); the needle word recall (§3).

Run by hand from the project root (needs `pip install -r tests/reference/requirements.txt`):
    python3 tests/reference/gen_metric_cases.py [--longbench DIR]
DIR holds multi_news.jsonl and lcc.jsonl of LongBench v1 (default ../shared/data/longbench_v1); their answers
serve as realistic references. Output is deterministic (seeded).
"""
import argparse
import json
import os
import random
import re
import string
import sys
import unicodedata
from collections import Counter

sys.modules["Levenshtein"] = None  # fuzzywuzzy falls back to difflib, as in LongBench's environment
import difflib  # noqa: E402
from fuzzywuzzy import fuzz  # noqa: E402
from rouge import Rouge  # noqa: E402

assert fuzz.SequenceMatcher is difflib.SequenceMatcher

# ---- LongBench metrics.py (re-typed from the spec) -------------------------------------------------------


def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def f1_score(prediction, ground_truth):
    common = Counter(prediction) & Counter(ground_truth)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction)
    recall = 1.0 * num_same / len(ground_truth)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction, ground_truth, **kwargs):
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def rouge_score(prediction, ground_truth, **kwargs):
    try:
        scores = Rouge().get_scores([prediction], [ground_truth], avg=True)
    except Exception:
        return 0.0
    return scores["rouge-l"]["f"]


def classification_score(prediction, ground_truth, **kwargs):
    em_match_list = []
    for class_name in kwargs["all_classes"]:
        if class_name in prediction:
            em_match_list.append(class_name)
    for match_term in em_match_list:
        if match_term in ground_truth and match_term != ground_truth:
            em_match_list.remove(match_term)
    if ground_truth in em_match_list:
        return 1.0 / len(em_match_list)
    return 0.0


def retrieval_score(prediction, ground_truth, **kwargs):
    ground_truth_id = re.findall(r"Paragraph (\d+)", ground_truth)[0]
    numbers = re.findall(r"\d+", prediction)
    right_num = sum(1 for number in numbers if str(number) == str(ground_truth_id))
    return float(0.0 if not len(numbers) else right_num / len(numbers))


def count_score(prediction, ground_truth, **kwargs):
    numbers = re.findall(r"\d+", prediction)
    right_num = sum(1 for number in numbers if str(number) == str(ground_truth))
    return float(0.0 if not len(numbers) else right_num / len(numbers))


def code_sim_score(prediction, ground_truth, **kwargs):
    all_lines = prediction.lstrip("\n").split("\n")
    prediction = ""
    for line in all_lines:
        if ("`" not in line) and ("#" not in line) and ("//" not in line):
            prediction = line
            break
    return fuzz.ratio(prediction, ground_truth) / 100


LONGBENCH = {"qa_f1": qa_f1_score, "rouge_l": rouge_score, "classification": classification_score,
             "retrieval": retrieval_score, "count": count_score, "code_sim": code_sim_score}


def longbench_sample(metric, task, prediction, answers, all_classes):
    """eval.py's scorer body for one sample. Called at eval.py's stack depth (see main), because Rouge-L's
    recursive LCS walk fails by RecursionError past a depth that depends on the frames below it."""
    score = 0.0
    if task in ["trec", "triviaqa", "samsum", "lsht"]:
        prediction = prediction.lstrip("\n").split("\n")[0]
    for ground_truth in answers:
        score = max(score, LONGBENCH[metric](prediction, ground_truth, all_classes=all_classes))
    return score


# ---- RULER (calculate_metrics.py) and the needle -------------------------------------------------------


def ruler_postprocess(pred):
    return re.sub(r"[\x00-\x1f]", "", pred.strip()).strip()


def ruler_sample(metric, prediction, refs):
    pred = ruler_postprocess(prediction)
    hits = [1.0 if r.lower() in pred.lower() else 0.0 for r in refs]
    return sum(hits) / len(refs) if metric == "string_match_all" else max(hits)


def needle_sample(response, answers):
    words = set(response.lower().split())
    best = 0.0
    for answer in answers:
        expected = set(answer.lower().split())
        best = max(best, len(words & expected) / len(expected))
    return best


def expected_score(case):
    m = case["metric"]
    if m in LONGBENCH:
        return at_eval_depth(longbench_sample, m, case["task"], case["prediction"], case["answers"],
                             case["all_classes"])
    if m.startswith("string_match"):
        return ruler_sample(m, case["prediction"], case["answers"])
    return needle_sample(case["prediction"], case["answers"])


# ---- case material ---------------------------------------------------------------------------------------

WORDS = ("the a an The A AN cat dog Paris tower Eiffel apple day sat on mat it was happy rose percent fell "
         "river bank north south model cache budget token layer head query key value summary report court "
         "judge vote bill tax city council police park").split()
UNICODE_WORDS = ["Théâtre", "théâtre", "café", "CAFÉ", "naïve", "Straße", "STRASSE", "ΣΟΦΟΣ", "σοφος", "Σ",
                 "ὈΔΥΣΣΕΎΣ", "ΑΣ.", "İstanbul", "istanbul", "ǅemal", "ǄEMAL", "Привет", "МОСКВА", "москва",
                 "東京", "٣", "١٢", "x²", "½", "—the", "’s", "“quoted”", "e-mail", "U.S.", "3.5", "don't",
                 "_under_score", "😀", "e\u0301", "ÅNGSTRÖM", "ﬁ", "Ⅻ", "Ǳ", "ß", "ΣΑΣ", "AΣ'Σ", "ʼΣ", "ÀÉÎÕÜ"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "\u2003", "\x1c", "\x85", "\r\n", "\u200b"]
PUNCT = list(string.punctuation) + ["—", "’", "…", "«", "»", "¿", "。"]


def rand_text(rng, n_words, unicode_rate=0.15, punct_rate=0.15, period_rate=0.0):
    out = []
    for _ in range(n_words):
        w = rng.choice(UNICODE_WORDS) if rng.random() < unicode_rate else rng.choice(WORDS)
        if rng.random() < punct_rate:
            w = w + rng.choice(PUNCT) if rng.random() < 0.7 else rng.choice(PUNCT) + w
        if rng.random() < period_rate:
            w += "."
        out.append(w)
        out.append(rng.choice(SPACES))
    return "".join(out[:-1]) if out else ""


def perturb(rng, text, rate=0.2):
    """Word-level edits of a reference: drops, duplicates, case changes, inserted words."""
    words = text.split(" ")
    out = []
    for w in words:
        r = rng.random()
        if r < rate / 4:
            continue
        if r < rate / 2:
            out.append(w)
        elif r < 3 * rate / 4:
            w = w.upper() if rng.random() < 0.5 else w.lower()
        elif r < rate:
            out.append(rng.choice(WORDS + UNICODE_WORDS))
        out.append(w)
    return " ".join(out)


def char_edit(rng, s, n_edits):
    s = list(s)
    for _ in range(n_edits):
        op = rng.randrange(3)
        pos = rng.randrange(len(s) + 1)
        ch = rng.choice("abcdefxyz_()=.;: 0123456789é")
        if op == 0 or not s:
            s.insert(pos, ch)
        elif op == 1 and pos < len(s):
            del s[pos]
        elif pos < len(s):
            s[pos] = ch
    return "".join(s)


def load_answers(path):
    if not os.path.exists(path):
        sys.exit(f"gen_metric_cases.py: {path}: missing (pass --longbench DIR with multi_news.jsonl and lcc.jsonl)")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["answers"][0] for line in f]


# ---- per-metric cases -------------------------------------------------------------------------------------

QA_TASKS = ["qasper", "narrativeqa", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "triviaqa"]


def qa_f1_cases(rng):
    fixed = [("The Eiffel Tower, in Paris.", ["Eiffel Tower"]), ("an apple a day", ["The apple"]),
             ("Théâtre—the", ["théâtre"]), ("", ["yes"]), ("yes", [""]), ("", [""]), ("!!!...", ["..."]),
             ("a an the", ["the"]), ("ΟΔΥΣΣΕΥΣ", ["οδυσσευς"]), ("ΟΔΥΣΣΕΥΣ", ["οδυσσευσ"]),
             ("İstanbul", ["istanbul"]), ("i̇stanbul", ["İSTANBUL"]), ("the_cat", ["the cat"]),
             ("x\u00a0the\u3000y", ["x y"]), ("Théâtre", ["THÉÂTRE"]), ("a.b.c", ["abc"]),
             ("e-mail the-end", ["email theend"]), ("\n\nfirst line\nsecond", ["first line"]),
             ("second\nfirst", ["first"]), ("an an an", ["an"]), ("The the", ["the"]),
             ("Dolores Park", ["dolores park", "Park", "Golden Gate"]), ("the’s", ["’s"]),
             ("1,000,000", ["1000000"]), ("ǅemal", ["ǆemal"]), ("éthe an", ["é"]), ("½a x²the", ["½ x²"]),
             ("the—an", ["—"]), ("ΣΑΣ the", ["σας"])]
    cases = [(rng.choice(QA_TASKS), p, a) for p, a in fixed]
    cases += [("triviaqa", p, a) for p, a in fixed[:8]]
    while len(cases) < 240:
        task = rng.choice(QA_TASKS)
        answers = [rand_text(rng, rng.randint(1, 4)) for _ in range(rng.choice([1, 1, 2, 3]))]
        kind = rng.random()
        if kind < 0.4:
            pred = perturb(rng, rng.choice(answers), 0.5)
            if rng.random() < 0.3:
                pred = rand_text(rng, rng.randint(1, 6)) + " " + pred
        elif kind < 0.6:
            pred = rand_text(rng, rng.randint(0, 30))
        elif kind < 0.8:
            pred = "\n" * rng.randint(0, 2) + rand_text(rng, 4) + "\n" + rng.choice(answers)
        elif kind < 0.9:
            pred = "".join(rng.choice(PUNCT) for _ in range(rng.randint(0, 6)))
        else:
            pred = rand_text(rng, rng.randint(500, 900))  # long
        cases.append((task, pred, answers))
    return [{"metric": "qa_f1", "task": t, "prediction": p, "answers": a, "all_classes": None} for t, p, a in cases]


def rouge_l_cases(rng, multi_news, depth_calls):
    fixed = [("The cat sat on the mat. It was happy.", ["A cat sat on a mat. The cat was happy."]),
             ("the the the", ["the cat"]), ("no period here at all", ["no period here"]),
             ("It rose 3.5 percent. Then fell.", ["It rose 3.5 percent"]), ("", ["anything"]),
             ("anything", [""]), ("...", ["a"]), ("a", ["..."]), (" . . ", ["x"]), ("   ", ["   "]),
             (".x", ["x."]), ("a  b\tc\u00a0d", ["a b c d"]), ("ΣΟΦΟΣ. σοφος", ["ΣΟΦΟΣ"]),
             ("x\x1cy", ["x y"]), ("one. two. three", ["three. two. one"]),
             ("line one\nline two", ["line one"]), ("\n\nfirst\nsecond", ["second"])]
    cases = [(rng.choice(["gov_report", "qmsum", "multi_news"]), p, a) for p, a in fixed]
    cases += [("samsum", p, a) for p, a in fixed[-4:]]
    # Rouge-L's recursive LCS walk: identical sentences of k distinct words take k + 1 calls.
    for k in (depth_calls - 3, depth_calls - 2, depth_calls - 1, depth_calls, depth_calls + 5):
        words = " ".join(f"w{i}" for i in range(k))
        cases.append(("gov_report", words, [words]))
        cases.append(("gov_report", "Short one. " + words, ["Short one. " + words]))
    while len(cases) < 240:
        task = rng.choice(["gov_report", "qmsum", "multi_news", "samsum"])
        kind = rng.random()
        if kind < 0.45:
            ref = rng.choice(multi_news)
            ref = ref[:rng.randint(50, len(ref))]
            pred = perturb(rng, ref, rng.choice([0.1, 0.3, 0.6]))
            if rng.random() < 0.3:
                pred = ". ".join(rng.sample(pred.split(". "), len(pred.split(". "))))
            answers = [ref]
        else:
            answers = [rand_text(rng, rng.randint(0, 40), period_rate=0.15)
                       for _ in range(rng.choice([1, 1, 2]))]
            if kind < 0.75:
                pred = perturb(rng, answers[0], 0.4)
            elif kind < 0.9:
                pred = rand_text(rng, rng.randint(0, 60), period_rate=0.1)
            else:
                pred = "\n".join(rand_text(rng, 8, period_rate=0.2) for _ in range(3))
        cases.append((task, pred, answers))
    return [{"metric": "rouge_l", "task": t, "prediction": p, "answers": a, "all_classes": None} for t, p, a in cases]


TREC_CLASSES = ["Abbreviation", "Expression abbreviated", "Animal", "Organ of body", "Color",
                "Invention, book and other creative piece", "Currency name", "Disease and medicine", "Event",
                "Food", "Musical instrument", "Language", "Letter like a-z", "Other entity", "Plant", "Product",
                "Religion", "Sport", "Element and substance", "Symbols and sign", "Techniques and method",
                "Equivalent term", "Vehicle", "Word with a special property", "Definition of something",
                "Description of something", "Manner of an action", "Reason", "Group or organization of persons",
                "Individual", "Title of a person", "Description of a person", "City", "Country", "Mountain",
                "Other location", "State", "Postcode or other code", "Number of something", "Date",
                "Distance, linear measure", "Price", "Order, rank", "Other number", "Lasting time of somethin",
                "Percent, fraction", "Speed", "Temperature", "Size, area and volume", "Weight"]
LSHT_CLASSES = ["农业、农村", "军事", "文学、艺术", "体育", "传媒业", "电子信息产业", "文化、休闲娱乐", "经济管理"]


def classification_cases(rng):
    fixed = [("Location, City, Entity", "City", ["Entity", "Location", "Other location", "City", "Description"]),
             ("Number of something", "Number of something", ["Num", "Number", "Number of something"]),
             ("", "City", TREC_CLASSES), ("City", "City", ["City", "City"]),
             ("Other location", "Other location", ["Other", "Other location", "location"]),
             ("Description of a person", "Description of a person", TREC_CLASSES),
             ("city", "City", TREC_CLASSES), ("Country\nCity", "City", TREC_CLASSES),
             ("\n\nCity\nCountry", "City", TREC_CLASSES), ("Anything", "", ["", "Any"]),
             ("State Date Speed", "Date", TREC_CLASSES), ("ab", "ab", ["a", "b", "a", "ab"])]
    cases = [("trec", p, [a], c) for p, a, c in fixed]
    while len(cases) < 240:
        lsht = rng.random() < 0.15
        classes = LSHT_CLASSES if lsht else TREC_CLASSES
        if rng.random() < 0.2:
            classes = rng.sample(classes, rng.randint(2, 8))
            classes += rng.sample(classes, rng.randint(0, 2))  # duplicates: list.remove takes the first
        gt = rng.choice(classes)
        picked = rng.sample(classes, rng.randint(0, 3))
        if rng.random() < 0.5:
            picked.append(gt)
        rng.shuffle(picked)
        sep = rng.choice([", ", " ", "\n", " or ", "; "])
        pred = sep.join(picked)
        if rng.random() < 0.3:
            pred = rng.choice(["Type: ", "Answer: ", "\n", ""]) + pred + rng.choice(["", ".", "\nCity"])
        cases.append(("lsht" if lsht else "trec", pred, [gt], classes))
    return [{"metric": "classification", "task": t, "prediction": p, "answers": a, "all_classes": c}
            for t, p, a, c in cases]


def number_text(rng, target):
    parts = []
    for _ in range(rng.randint(0, 5)):
        r = rng.random()
        if r < 0.3:
            parts.append(f"Paragraph {target}")
        elif r < 0.5:
            parts.append(str(target))
        elif r < 0.7:
            parts.append(str(rng.randint(0, 40)))
        elif r < 0.8:
            parts.append(rng.choice(["٣", "١٢", "x²", "½", "3.5", "007", "12a34", "Ⅻ", "𝟙𝟚"]))
        else:
            parts.append(rand_text(rng, rng.randint(1, 4), unicode_rate=0.05))
    return rng.choice([" ", ", ", " and ", "\n"]).join(parts)


def retrieval_cases(rng):
    fixed = [("Paragraph 7 or Paragraph 17", "Paragraph 7"), ("Paragraph 7", "Paragraph 7"), ("", "Paragraph 3"),
             ("The answer is paragraph 3.", "Paragraph 3"), ("no numbers", "Paragraph 1"),
             ("Paragraph 12", "Paragraph 12 and Paragraph 3"), ("Paragraph ٣", "Paragraph 3"),
             ("Paragraph 03", "Paragraph 3"), ("Paragraph 3\nParagraph 4", "Paragraph 3")]
    cases = [(p, [a]) for p, a in fixed]
    while len(cases) < 220:
        target = rng.randint(1, 30)
        cases.append((number_text(rng, target), [f"Paragraph {target}"]))
    return [{"metric": "retrieval", "task": "passage_retrieval_en", "prediction": p, "answers": a,
             "all_classes": None} for p, a in cases]


def count_cases(rng):
    fixed = [("There are 12 unique paragraphs, not 13.", "12"), ("", "3"), ("12", "12"), ("١٢", "12"),
             ("012", "12"), ("12 12 12", "12"), ("1 2", "12"), ("x12y", "12")]
    cases = [(p, [a]) for p, a in fixed]
    while len(cases) < 220:
        target = rng.randint(1, 30)
        cases.append((number_text(rng, target).replace("Paragraph ", "count "), [str(target)]))
    return [{"metric": "count", "task": "passage_count", "prediction": p, "answers": a, "all_classes": None}
            for p, a in cases]


def code_sim_cases(rng, lcc):
    fixed = [("\n# comment\n    return x + 1\nfoo()", "    return x + 2"), ("```python\nprint(a)", "print(a)"),
             ("self.assertEqual(result, expected)", "self.assertEqual(res, expected)"), ("", ""), ("a", ""),
             ("", "a"), ("abc", "abd"), ("# only\n// comments\n```", "x = 1"), ("url = 'http://x'", "url = 1"),
             ("\n\n\nx = 1", "x = 1"), ("é = 1", "e = 1"), ("x = ½", "x = 1/2")]
    cases = [(rng.choice(["lcc", "repobench-p"]), p, [a]) for p, a in fixed]
    # difflib's autojunk starts at 200 characters of the reference: lines on both sides of it.
    for n in (198, 199, 200, 201, 260, 600):
        gt = ("    result = compute(alpha, beta) + other_value * 2; " * 20)[:n]
        cases.append(("lcc", char_edit(rng, gt, 5), [gt]))
        cases.append(("lcc", gt[: n // 2] + "zzz" + gt[n // 2:], [gt]))
    for _ in range(24):  # long real code lines: popular characters (spaces, brackets) stop anchoring matches
        gt = " ".join(line.strip() for line in rng.sample(lcc, rng.randint(4, 12)))
        pred = char_edit(rng, gt, rng.randint(1, 30)) if rng.random() < 0.7 else " ".join(gt.split(" ")[::-1])
        cases.append((rng.choice(["lcc", "repobench-p"]), pred, [gt]))
    while len(cases) < 264:
        gt = rng.choice(lcc)
        kind = rng.random()
        if kind < 0.5:
            pred = char_edit(rng, gt, rng.randint(0, 12))
        elif kind < 0.7:
            pred = rng.choice(["# note\n", "// x\n", "```java\n", "\n\n", "int a; // c\n"]) + char_edit(rng, gt, 3)
        elif kind < 0.85:
            pred = char_edit(rng, rng.choice(lcc), 2) + "\n" + gt
        else:
            pred = gt * rng.randint(2, 6)
        cases.append((rng.choice(["lcc", "repobench-p"]), pred, [gt]))
    return [{"metric": "code_sim", "task": t, "prediction": p, "answers": a, "all_classes": None}
            for t, p, a in cases]


RULER_WORDS = ["apple", "Zebra", "VAR QWERT", "ΣΟΦΟΣ", "Straße", "İstanbul", "8675309", "1234567", "mañana"]


def string_match_cases(rng, metric):
    tasks = ["niah_single_1", "niah_multikey_3", "vt", "cwe", "fwe"] if metric == "string_match_all" \
        else ["qa_1", "qa_2"]
    fixed = [("The special magic number is 1234567.", ["1234567"]), ("", ["x"]), ("12\n34567", ["1234567"]),
             ("  APPLE\t", ["apple", "zebra"]), ("σοφος", ["ΣΟΦΟΣ"]), ("σοφοσ", ["ΣΟΦΟΣ"]),
             ("i̇stanbul", ["İstanbul"]), ("istanbul", ["İstanbul"]), ("STRASSE", ["Straße"]),
             ("straße", ["STRASSE"]), ("x", [""]), ("\x1f\x01", [""]), ("a\u3000b", ["a b"])]
    cases = [(rng.choice(tasks), p, a) for p, a in fixed]
    while len(cases) < 220:
        refs = rng.sample(RULER_WORDS, rng.randint(1, 4))
        parts = [rng.choice([r, r.upper(), r.lower(), r[:-1], r.swapcase()]) for r in refs if rng.random() < 0.7]
        parts += [rand_text(rng, rng.randint(0, 5)) for _ in range(rng.randint(0, 2))]
        rng.shuffle(parts)
        pred = rng.choice([" ", ", ", "\n", "\t", "\x07"]).join(parts)
        if rng.random() < 0.3:
            pred = rng.choice(["  ", "\n", "\u00a0"]) + pred + rng.choice(["  ", "\n\n", "\x1c"])
        cases.append((rng.choice(tasks), pred, refs))
    return [{"metric": metric, "task": t, "prediction": p, "answers": a, "all_classes": None} for t, p, a in cases]


def needle_cases(rng):
    needle = "eat a sandwich and sit in Dolores Park on a sunny day."
    words = needle.split()
    fixed = [(needle, [needle]), ("", [needle]), ("EAT A SANDWICH", [needle]), ("day", [needle]),
             ("The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.",
              [needle]), ("eat\na\tsandwich\u00a0and", [needle]), ("x", ["ΣΟΦΟΣ", "x"])]
    cases = list(fixed)
    while len(cases) < 210:
        picked = [w if rng.random() < 0.5 else rng.choice([w.upper(), w + ",", rng.choice(WORDS)])
                  for w in words if rng.random() < 0.7]
        pred = rng.choice([" ", "  ", "\n"]).join(picked)
        if rng.random() < 0.3:
            pred = "The best thing to do in San Francisco is " + pred
        cases.append((pred, [needle] if rng.random() < 0.9 else [needle, "sit in the park"]))
    return [{"metric": "needle", "task": "needle", "prediction": p, "answers": a, "all_classes": None}
            for p, a in cases]


# ---- Unicode checksums: every code point through str.lower() and the classes metrics/text.c uses ----------

FNV_OFFSET, FNV_PRIME, MASK64 = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1
SIGMA_U = "\u03a3"


def fnv1a(h, values):
    for v in values:
        for byte in v.to_bytes(4, "little"):
            h = ((h ^ byte) * FNV_PRIME) & MASK64
    return h


def unicode_checksums():
    """FNV-1a over all code points of: len(c.lower()) and its code points; and a class byte (isspace, isalnum,
    isdecimal, final sigma after c, final sigma after "A" + c). test_metrics.c recomputes both."""
    lower = classes = FNV_OFFSET
    for cp in range(0x110000):
        c = chr(cp)
        low = c.lower()
        lower = fnv1a(lower, [len(low)] + [ord(x) for x in low])
        bits = (c.isspace() | c.isalnum() << 1 | c.isdecimal() << 2 | ((c + SIGMA_U).lower()[-1] == "\u03c2") << 3
                | (("A" + c + SIGMA_U).lower()[-1] == "\u03c2") << 4)
        classes = fnv1a(classes, [bits])
    return {"python": sys.version.split()[0], "unicode": unicodedata.unidata_version,
            "lower_fnv1a": f"{lower:016x}", "classes_fnv1a": f"{classes:016x}"}


# ---- driver ---------------------------------------------------------------------------------------------


def stack_depth():
    """Frames on the caller's stack, the caller included."""
    frame, n = sys._getframe(1), 0
    while frame:
        frame, n = frame.f_back, n + 1
    return n


def at_eval_depth(fn, *args):
    """Runs fn with the recursion headroom LongBench's eval.py has in its scorer (frames: <module>, scorer)."""
    extra = stack_depth() + 1 - 2  # + 1: fn's own frame stands where eval.py's scorer stands
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + extra)
    try:
        return fn(*args)
    finally:
        sys.setrecursionlimit(old)


def recon_max_calls():
    """The longest chain of _recon calls that still scores, found on identical sentences of k words."""
    def scores(k):
        words = " ".join(f"w{i}" for i in range(k))
        return at_eval_depth(longbench_sample, "rouge_l", "gov_report", words, [words], None) > 0.0

    lo, hi = 1, 4000  # scores(lo), not scores(hi)
    assert scores(lo) and not scores(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if scores(mid) else (lo, mid)
    return lo + 1  # lo diagonal steps + the call that meets the border


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--longbench", default="../shared/data/longbench_v1")
    ap.add_argument("--out", default="tests/data/metrics")
    args = ap.parse_args()
    rng = random.Random(20260401)
    multi_news = load_answers(os.path.join(args.longbench, "multi_news.jsonl"))
    lcc = load_answers(os.path.join(args.longbench, "lcc.jsonl"))
    calls = recon_max_calls()
    print(f"rouge: longest surviving _recon chain = {calls} calls (metrics/scorers.h ROUGE_RECON_MAX_CALLS)")
    sets = {"qa_f1": qa_f1_cases(rng), "rouge_l": rouge_l_cases(rng, multi_news, calls),
            "classification": classification_cases(rng), "retrieval": retrieval_cases(rng),
            "count": count_cases(rng), "code_sim": code_sim_cases(rng, lcc),
            "string_match_all": string_match_cases(rng, "string_match_all"),
            "string_match_part": string_match_cases(rng, "string_match_part"), "needle": needle_cases(rng)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "unicode.json"), "w", encoding="utf-8") as f:
        json.dump(unicode_checksums(), f, indent=1)
        f.write("\n")
    for metric, cases in sets.items():
        path = os.path.join(args.out, f"{metric}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for case in cases:
                assert "\x00" not in case["prediction"]  # the C API takes NUL-terminated strings
                case["expected"] = expected_score(case)
                f.write(json.dumps(case, ensure_ascii=False) + "\n")
        print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    main()

"""Constructed judge cases from MT-Bench: people's real second turns against mechanically built failures.

For each of the 30 MT-Bench items with a GPT-4 reference answer, the context is the first question and that answer;
the candidate user turns are `genuine` (the real human second turn), `restate_verbatim` (the first question again),
`restate_edit` (the first question lightly edited: a prefix, its first sentence dropped, or lower-cased without
punctuation), `copy` (the longest sentence of the answer) and `new_task` (the first question of an item from another
category: writing, roleplay, stem, humanities). These are easy cases; the judge's error bar on what real models write
comes from `labels/followup/` (`fic.judges.validity`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .base import Case


def mt_bench_constructed_cases(data_dir: str | Path) -> list[tuple[Case, str]]:
    """`(case, kind)` pairs, five per item, from `data_dir/mt_bench/` (question.jsonl, reference_answer_gpt-4.jsonl)."""
    data_dir = Path(data_dir)
    questions = {}
    for line in (data_dir / "mt_bench" / "question.jsonl").read_text().splitlines():
        row = json.loads(line)
        questions[row["question_id"]] = row
    fresh = [
        q["turns"][0] for q in questions.values() if q["category"] in ("writing", "roleplay", "stem", "humanities")
    ]
    out = []
    for k, line in enumerate((data_dir / "mt_bench" / "reference_answer_gpt-4.jsonl").read_text().splitlines()):
        ref = json.loads(line)
        q1, q2 = questions[ref["question_id"]]["turns"]
        a1 = ref["choices"][0]["turns"][0]
        messages = [{"role": "user", "content": q1}, {"role": "assistant", "content": a1}]
        sentences = re.split(r"(?<=[.!?])\s+", q1.strip())
        edits = [
            "Again: " + q1,
            " ".join(sentences[1:]) if len(sentences) > 1 else " ".join(q1.split()[:-2]),
            re.sub(r"[^\w\s]", "", q1.lower()),
        ]
        spans = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", a1) if s.strip()]
        out += [
            (Case(messages, fresh[k % len(fresh)]), "new_task"),
            (Case(messages, q2), "genuine"),
            (Case(messages, q1), "restate_verbatim"),
            (Case(messages, edits[k % 3]), "restate_edit"),
            (Case(messages, max(spans, key=len)), "copy"),
        ]
    return out

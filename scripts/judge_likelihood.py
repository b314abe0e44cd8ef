#!/usr/bin/env python
"""The likelihood-ratio feature of every labelled turn, computed once and kept beside the labels.

    python scripts/judge_likelihood.py [--model smollm2] [--out labels/followup/likelihood_ratios.jsonl]

For each labelled turn with text (`labels/followup/labels.jsonl`, the IFBench check, `labels/followup/collab/`),
`fic.judges.likelihood.TurnLikelihood` gives log p(turn | own answer) - log p(turn | foil answer) per token under a
small LM (SmolLM2-135M-Instruct by default). The turns of one source and dataset go together, so the foil is another
item's answer of the same dataset, as in `scripts/judge_calibration.py`. Rows: `{source, dataset, item, turn_sha,
ratio, model}`; `scripts/judge_calibration.py` reads them (the LM is not run there). Resumable: turns already in the
file are not scored again. ~0.1 s per turn on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "labels" / "followup"
DEFAULT_OUT = LABELS / "likelihood_ratios.jsonl"


def _jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file, foil labels left out (`foil: true`, `fic review --foil-share`: a turn shown after
    another context's conversation, not the turn after its own)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("foil") is not True]


def labelled_turns() -> list[dict]:
    """`{source, dataset, item, turn_sha, messages, user_turn}` of every labelled turn with text."""
    from fic.eval.rates import turn_sha
    from fic.judges.provenance import prompt_hash

    paths = [("labels.jsonl", LABELS / "labels.jsonl"), ("ifbench_check", LABELS / "ifbench_check" / "turns.jsonl")]
    collab = LABELS / "collab"
    paths += [(f"collab/{p.relative_to(collab).as_posix()}", p) for p in sorted(collab.rglob("*.jsonl"))
              if not p.stem.endswith("_d2")]  # fmt: skip
    return [{"source": source, "dataset": row["dataset"], "item": prompt_hash(row["messages"]),
             "turn_sha": turn_sha(row["user_turn"]), "messages": row["messages"], "user_turn": row["user_turn"]}
            for source, path in paths for row in _jsonl(path) if "messages" in row]  # fmt: skip


def key(row: dict) -> tuple:
    """What a ratio is stored under: the turn's source, item and text."""
    return row["source"], row["item"], row["turn_sha"]


def read_ratios(path: Path = DEFAULT_OUT) -> dict[tuple, float | None]:
    return {key(r): r["ratio"] for r in _jsonl(path)} if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="the small LM (a name or path fic can load)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)

    from fic.judges import Case
    from fic.judges.likelihood import TurnLikelihood

    done = read_ratios(args.out)
    turns = labelled_turns()
    groups: dict = {}
    for t in turns:
        groups.setdefault((t["source"], t["dataset"]), []).append(t)
    todo = {g: rows for g, rows in groups.items() if any(key(r) not in done for r in rows)}
    print(f"{len(turns)} labelled turns with text, {sum(key(t) in done for t in turns)} already scored")
    if not todo:
        return 0
    lm = TurnLikelihood(args.model, batch_size=args.batch_size)
    with args.out.open("a", encoding="utf-8") as out, tqdm(total=sum(map(len, todo.values())), unit="turn") as bar:
        for rows in todo.values():
            # The whole group is scored (the foils depend on its membership), and only new turns are written.
            ratios = lm.ratios([Case(r["messages"], r["user_turn"]) for r in rows])
            for row, ratio in zip(rows, ratios):
                if key(row) not in done:
                    out.write(json.dumps({"source": row["source"], "dataset": row["dataset"], "item": row["item"],
                                          "turn_sha": row["turn_sha"], "ratio": ratio, "model": args.model}) + "\n")  # fmt: skip
                    done[key(row)] = ratio
            out.flush()
            bar.update(len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

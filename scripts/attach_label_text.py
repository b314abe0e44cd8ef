#!/usr/bin/env python
"""Write the labelled turns' text into label files that name their turns only by key and hash.

    python scripts/attach_label_text.py RUN_DIR [--labels labels/followup/collab] [--folder-prefix probe_]

The collab labels (`labels/followup/collab/MODEL.jsonl`) were made on a run's probe folders and carry each turn's key
(`dataset`, `item_id`, `temperature`, `perturbation`, `sample`) and `turn_sha`, not its text, so a fresh clone could
not judge them again. Given a run of the collab part that reproduces those turns (`RUN_DIR/probe_MODEL/samples.jsonl`),
this adds `messages` and `user_turn` to every label whose turn hashes the same there, and says how many did not
(those keep no text and `scripts/judge_calibration.py` leaves them out). Labels are never changed. A foil label
(`foil: true`, `fic review --foil-share`: the turn was shown after another context's conversation) is left as it is:
its own context's text would not be what the reader saw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def attach(label_rows: list[dict], samples: list[dict]) -> tuple[list[dict], int]:
    """`label_rows` with `messages` and `user_turn` from the sample of the same key and text hash; and how many found
    none (their rows come back unchanged). Foil labels come back unchanged and are not counted."""
    from fic.eval.rates import turn_sha
    from fic.followup_summary import row_key

    by_key = {row_key(s): s for s in samples}
    out, missing = [], 0
    for label in label_rows:
        if label.get("foil") is True:
            out.append(label)
            continue
        sample = by_key.get(row_key(label))
        if sample is None or turn_sha(sample["user_turn"]) != label.get("turn_sha"):
            missing += 1
            out.append(label)
            continue
        out.append({**label, "messages": sample["messages"], "user_turn": sample["user_turn"]})
    return out, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a collab part folder (holds probe_MODEL/samples.jsonl)")
    parser.add_argument("--labels", type=Path, default=ROOT / "labels/followup/collab")
    parser.add_argument("--folder-prefix", default="probe_")
    args = parser.parse_args(argv)
    for path in sorted(args.labels.glob("*.jsonl")):
        model = path.stem.removesuffix("_d2")
        samples_path = args.run_dir / f"{args.folder_prefix}{model}" / "samples.jsonl"
        if not samples_path.is_file():
            print(f"{path.name}: no {samples_path}; left as it is")
            continue
        labels = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        samples = [json.loads(line) for line in samples_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        rows, missing = attach(labels, samples)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        foils = sum(r.get("foil") is True for r in rows)
        print(f"{path.name}: text for {len(rows) - foils - missing} of {len(rows) - foils} labels ({missing} turns "
              f"differ or absent)" + (f"; {foils} foil labels left as they are" if foils else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

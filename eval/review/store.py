"""The data side of `fic review`: blind items from a probe's samples.jsonl, saved annotations, human-judge agreement.

Blindness. An item is shown by an opaque id (a hash of its identity fields) with only its context and generated
user turn; the model, dataset, item id, temperature and the judge's label stay on the server. The order is a
shuffle by a seed drawn once and kept in `DIR/review/order.json`, so every session of the same folder sees the same
order and a reload resumes at the first item not yet annotated.

Saving. Annotations live in `DIR/review/annotations.json` ({id: {label, genuine, annotator, time}}), rewritten
atomically (temp file + rename) after each one, so a crash never leaves half a file. `DIR/review/human_labels.jsonl`
mirrors them in the judge-output format (dataset, item_id, temperature, perturbation, sample, label, genuine), so
`fic judge-agreement` can compare the human with any judge file too.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from pathlib import Path

from fic.errors import FicError
from fic.jsonl import load_done, write_json

IDENTITY = ("model", "dataset", "item_id", "temperature", "perturbation", "sample")


class ReviewError(FicError, ValueError):
    """A bad review folder or a bad annotation; the message says what to fix."""


def _labels() -> dict[str, str]:
    from fic.judges.labels import LABELS

    return dict(LABELS)


def _genuine_label() -> str:
    from fic.judges.labels import GENUINE_FOLLOWUP

    return GENUINE_FOLLOWUP


class ReviewStore:
    """Items, order and annotations of one review folder (thread-safe)."""

    def __init__(self, directory: str | Path, annotator: str = "annotator", seed: int | None = None):
        self.directory = Path(directory)
        path = self.directory / "samples.jsonl"
        if not path.is_file():
            raise ReviewError(f"{path} not found; point `fic review` at a folder written by `fic probe` (it holds "
                              "samples.jsonl)")  # fmt: skip
        rows = load_done(path)
        if not rows:
            raise ReviewError(f"{path} holds no samples; run `fic probe` first")
        self.annotator = annotator
        self.review_dir = self.directory / "review"
        self.rows: dict[str, dict] = {}
        seen: dict[str, int] = {}
        for n, row in enumerate(rows, 1):
            if not isinstance(row.get("messages"), list) or not isinstance(row.get("user_turn"), str):
                raise ReviewError(f"{path} line {n}: needs `messages` (a list) and `user_turn` (a string), as "
                                  "`fic probe` writes them")  # fmt: skip
            ident = json.dumps([row.get(k) for k in IDENTITY], sort_keys=True, default=str)
            seen[ident] = seen.get(ident, 0) + 1
            key = hashlib.sha256(f"{ident}#{seen[ident]}".encode()).hexdigest()[:16]
            self.rows[key] = row
        self.order = self._order(seed)
        self._lock = threading.Lock()
        self.annotations: dict[str, dict] = self._load_annotations()

    def _order(self, seed: int | None) -> list[str]:
        state_path = self.review_dir / "order.json"
        if seed is None:
            if state_path.is_file():
                seed = json.loads(state_path.read_text())["seed"]
            else:
                seed = random.SystemRandom().randrange(2**31)
        write_json(state_path, {"seed": seed})
        order = sorted(self.rows)
        random.Random(seed).shuffle(order)
        return order

    def _load_annotations(self) -> dict[str, dict]:
        path = self.review_dir / "annotations.json"
        if not path.is_file():
            return {}
        try:
            saved = json.loads(path.read_text())
        except ValueError as err:
            raise ReviewError(f"{path} is not valid JSON ({err}); restore it or move it away to start over") from None
        return {k: v for k, v in saved.items() if k in self.rows}

    # what the browser may see -------------------------------------------------------------------------------

    def labels(self) -> list[dict]:
        return [{"name": k, "description": v} for k, v in _labels().items()]

    def state(self) -> dict:
        with self._lock:
            return {"total": len(self.order), "done": len(self.annotations), "next": self._next(),
                    "annotator": self.annotator, "labels": self.labels()}  # fmt: skip

    def _next(self) -> int | None:
        for i, key in enumerate(self.order):
            if key not in self.annotations:
                return i
        return None

    def item(self, index: int) -> dict:
        if not 0 <= index < len(self.order):
            raise ReviewError(f"item index {index} is out of range 0..{len(self.order) - 1}")
        key = self.order[index]
        row = self.rows[key]
        messages = [{"role": str(m.get("role", "?")), "content": _text(m.get("content"))}
                    for m in row["messages"] if isinstance(m, dict)]  # fmt: skip
        with self._lock:
            saved = self.annotations.get(key)
        annotation = {"label": saved["label"], "genuine": saved["genuine"]} if saved else None
        return {"id": key, "index": index, "total": len(self.order), "messages": messages,
                "user_turn": row["user_turn"], "annotation": annotation}  # fmt: skip

    # saving -------------------------------------------------------------------------------------------------

    def annotate(self, key: str, label: str, genuine: bool) -> dict:
        if not isinstance(key, str) or key not in self.rows:
            raise ReviewError(f"id {key!r:.40} is not an item of this review")
        if not isinstance(label, str) or label not in _labels():
            raise ReviewError(f"label {label!r:.40} is not a follow-up label; valid: {sorted(_labels())}")
        if not isinstance(genuine, bool):
            raise ReviewError(f"genuine must be true or false, got {genuine!r}")
        with self._lock:
            self.annotations[key] = {"label": label, "genuine": genuine, "annotator": self.annotator,
                                     "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
            write_json(self.review_dir / "annotations.json", self.annotations)
            self._write_human_labels()
            return {"ok": True, "done": len(self.annotations), "next": self._next()}

    def _write_human_labels(self) -> None:
        path = self.review_dir / "human_labels.jsonl"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for key in self.order:
                if key in self.annotations:
                    row = self.rows[key]
                    ident = {k: row[k] for k in IDENTITY if k in row}
                    f.write(json.dumps({**ident, **self.annotations[key]}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)

    # agreement ----------------------------------------------------------------------------------------------

    def agreement(self) -> dict:
        """Human vs judge on the annotated items: Cohen's kappa and raw agreement on the label and on the binary
        decision, and the label confusion matrix. Items the judge could not decide (judge_error) are excluded."""
        from fic.metrics import agreement, cohen_kappa

        with self._lock:
            annotated = dict(self.annotations)
        pairs, excluded = [], 0
        for key, human in annotated.items():
            judge_label, judge_genuine = self.rows[key].get("label"), self.rows[key].get("genuine")
            if judge_label not in _labels() or judge_genuine is None:
                excluded += 1
                continue
            pairs.append((human["label"], judge_label, human["genuine"], bool(judge_genuine)))
        out = {"annotated": len(annotated), "total": len(self.rows), "n": len(pairs), "excluded": excluded,
               "label": None, "binary": None, "confusion": {}, "labels": list(_labels())}  # fmt: skip
        if pairs:
            h_lab, j_lab, h_bin, j_bin = (list(col) for col in zip(*pairs))
            out["label"] = {"kappa": cohen_kappa(h_lab, j_lab), "agreement": agreement(h_lab, j_lab)}
            out["binary"] = {"kappa": cohen_kappa(h_bin, j_bin), "agreement": agreement(h_bin, j_bin)}
            for h, j in zip(h_lab, j_lab):
                out["confusion"].setdefault(h, {}).setdefault(j, 0)
                out["confusion"][h][j] += 1
        return out


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)

"""The data side of `fic review`: blind items from a probe's samples.jsonl, saved annotations, human-judge agreement.

Blindness. An item is shown by an opaque id (a hash of its identity fields) with only its context and generated
user turn; the model, dataset, item id, temperature and the judge's label stay on the server. The order is a
shuffle by a seed drawn once and kept in `DIR/review/order.json`, so every session of the same folder sees the same
order and a reload resumes at the first item not yet annotated.

Sampling. `sample=N` serves N turns drawn at random, stratified by dataset and temperature with proportional
allocation (so the labelled turns stay a uniform sample of the run, as the prediction-powered estimate assumes); the
draw is kept in `DIR/review/order.json` with the seed. Every annotation also goes to `DIR/labels.jsonl` (the sample's
key fields, `genuine`, `label` and the run's id), which `fic rates DIR` reads. Once every item is annotated,
`state()` carries the calibrated estimate and its interval width; not before: the calibrated rate combines the labels
with the judge's verdicts, so its move after each label would tell the reader the judge's verdict on that turn.

Saving. Annotations live in `DIR/review/annotations.json` ({id: {label, genuine, annotator, time}}), rewritten
atomically (temp file + rename) after each one, so a crash never leaves half a file. `DIR/review/human_labels.jsonl`
mirrors them in the judge-output format (dataset, item_id, temperature, perturbation, sample, label, genuine), so
`fic judge-agreement` can compare the human with any judge file too.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from pathlib import Path

from fic.errors import FicError
from fic.followup_summary import calibrated, row_key
from fic.jsonl import load_done, write_json, write_rows
from fic.judges.labels import GENUINE_FOLLOWUP, LABELS
from fic.metrics import agreement, cohen_kappa

from ..rates import turn_sha

IDENTITY = ("model", "dataset", "item_id", "temperature", "perturbation", "sample")


class ReviewError(FicError, ValueError):
    """A bad review folder or a bad annotation; the message says what to fix."""


def _labels() -> dict[str, str]:
    return dict(LABELS)


def _genuine_label() -> str:
    return GENUINE_FOLLOWUP


class ReviewStore:
    """Items, order and annotations of one review folder (thread-safe)."""

    def __init__(self, directory: str | Path, annotator: str = "annotator", seed: int | None = None,
                 sample: int | None = None):  # fmt: skip
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
        self.order = self._order(seed, sample)
        self.run_id = _run_id(self.directory)
        self._lock = threading.Lock()
        self.annotations: dict[str, dict] = self._load_annotations()

    def _order(self, seed: int | None, sample: int | None) -> list[str]:
        state_path = self.review_dir / "order.json"
        saved = json.loads(state_path.read_text()) if state_path.is_file() else {}
        if seed is None:
            seed = saved.get("seed", random.SystemRandom().randrange(2**31))
        if sample is None:
            sample = saved.get("sample")
        if sample is not None and not 0 < sample:
            raise ReviewError(f"--sample {sample}: give a positive number of turns to label")
        write_json(state_path, {"seed": seed, "sample": sample})
        rng = random.Random(seed)
        if sample is None or sample >= len(self.rows):
            order = sorted(self.rows)
            rng.shuffle(order)
            return order
        strata: dict[tuple, list[str]] = {}
        for key in sorted(self.rows):
            row = self.rows[key]
            strata.setdefault((str(row.get("dataset")), float(row.get("temperature") or 0.0)), []).append(key)
        # Proportional allocation with the largest remainders, then a uniform draw inside each stratum.
        quotas = {s: sample * len(keys) / len(self.rows) for s, keys in strata.items()}
        counts = {s: int(q) for s, q in quotas.items()}
        for s in sorted(quotas, key=lambda s: (counts[s] - quotas[s], s))[: sample - sum(counts.values())]:
            counts[s] += 1
        order = [key for s, keys in sorted(strata.items()) for key in rng.sample(keys, counts[s])]
        rng.shuffle(order)
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
                    "annotator": self.annotator, "labels": self.labels(), "estimate": self._estimate_when_done()}  # fmt: skip

    def estimate(self) -> dict | None:
        """The calibrated (PPI++) rate of the whole run from the labels so far, beside the labels alone, with each
        interval's width (None before two labels, or when the judge's verdicts are not in the samples)."""
        rows = [r for r in self.rows.values() if r.get("genuine") is not None]
        labels = {row_key(self.rows[k]): a["genuine"] for k, a in self.annotations.items() if k in self.rows}
        try:
            out = calibrated(rows, labels)
        except (KeyError, TypeError, ValueError):  # rows without the sample key fields
            return None
        if out is None:
            return None
        width = lambda c: c["high"] - c["low"]  # noqa: E731
        return {"n_labels": out["n_labels"], "calibrated": {**{k: out[k] for k in ("rate", "low", "high")},
                "width": width(out)}, "labels_only": {**out["labels_only"], "width": width(out["labels_only"])}}  # fmt: skip

    def _estimate_when_done(self) -> dict | None:
        """`estimate()` once every item is annotated, else None: shown while labelling, it would unblind the reader."""
        return self.estimate() if self._next() is None else None

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
            return {"ok": True, "done": len(self.annotations), "next": self._next(),
                    "estimate": self._estimate_when_done()}  # fmt: skip

    def _write_human_labels(self) -> None:
        """`DIR/review/human_labels.jsonl` (the judge-output format) and `DIR/labels.jsonl` (what `fic rates DIR`
        reads: the sample's key fields, genuine, label, annotator and the run's id), both rewritten atomically."""
        annotated = [key for key in self.order if key in self.annotations]
        human = [{**{k: self.rows[key][k] for k in IDENTITY if k in self.rows[key]}, **self.annotations[key]}
                 for key in annotated]  # fmt: skip
        write_rows(self.review_dir / "human_labels.jsonl", human)
        fields = ("dataset", "item_id", "temperature", "perturbation", "sample")
        run = [{**{k: self.rows[key][k] for k in fields if k in self.rows[key]},
                **{k: self.annotations[key][k] for k in ("genuine", "label", "annotator")}, "run_id": self.run_id,
                "turn_sha": turn_sha(self.rows[key]["user_turn"])}
               for key in annotated]  # fmt: skip
        write_rows(self.directory / "labels.jsonl", run)

    # agreement ----------------------------------------------------------------------------------------------

    def agreement(self) -> dict:
        """Human vs judge on the annotated items: Cohen's kappa and raw agreement on the label and on the binary
        decision, and the label confusion matrix. Items the judge could not decide (judge_error) are excluded."""
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


def _run_id(directory: Path) -> str | None:
    meta = directory / "probe_meta.json"
    return json.loads(meta.read_text()).get("run_id") if meta.is_file() else None


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)

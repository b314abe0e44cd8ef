"""The data side of `fic review`: blind items from probes' samples.jsonl, saved annotations, human-judge agreement.

Blindness. An item is shown by an opaque id with only its context and generated user turn; the model, folder,
dataset, item id, temperature and everything the judge wrote (label, genuine, confidence, rationale, the generic
floor's verdict) stay on the server. Nothing the reader can fetch depends on the judge until the reader's last item
is labelled: the ids, the sample (stratified by dataset and temperature only), the order (a seeded shuffle), the
progress counts and every API answer are the same whatever the judge said (`tests/test_review_blind.py` checks this
by serving the same turns under two different judges). Then, and not before, `state()` carries the calibrated
estimate and `agreement()` the kappa: the calibrated rate combines the labels with the judge's verdicts, and the
confusion matrix names the judge's label of each turn, so either shown while labelling would tell the reader the
judge's verdict on the turn just labelled. A pooled session never shows a folder's estimate, not even then: under
the folder's name it would tell readers who may read the same models again how each one fared (`fic rates DIR`
gives it to whoever runs the study).

Sampling. `sample=N` serves N turns of each folder drawn at random, stratified by dataset and temperature with
proportional allocation (so the labelled turns stay a uniform sample of the run, as the prediction-powered estimate
assumes). The plan (seed, N, readers) is kept in `DIR/review/order.json`, so every session of a folder draws the same
turns and a reload resumes at the first item not yet annotated; `fic review DIR --sample N --seed S` draws the same
turns of DIR whether DIR is reviewed alone or pooled with other folders.

Several folders, several readers. `ReviewStore([DIR1, DIR2, ...], readers=2, reader="r1")` pools the drawn turns of
every folder (each folder one model, say) and deals them to the readers: inside each folder, turn by turn in a
shuffled order grouped by stratum, round robin, the deal carrying on from one folder to the next. So each reader gets
each model's share to within one turn (and each stratum's), the readers' shares are disjoint and together cover the
sample, and the totals differ by at most one. A reader sees only their own share, shuffled by the seed and the reader
id, so the models are interleaved and no position says which folder a turn came from. Readers are named `r1` ... `rK`
(`readers=K`) or by a list of names; each runs their own session (their own `fic review` process, on their own port),
and all of them may write to the same folders at once.

Saving. Each annotation lands in its own folder: `DIR/review/annotations.json` ({key: {label, genuine, annotator,
reader, time}}) is read again, updated and rewritten atomically (temp file + rename) under a lock on
`DIR/review/.lock`, so concurrent readers never lose each other's labels and a crash never leaves half a file. Then
`DIR/labels.jsonl` (what `fic rates DIR` reads: the turn's key fields, `genuine`, `label`, `annotator`, `reader`, the
run's id and `turn_sha`) and `DIR/review/human_labels.jsonl` (the judge-output format: model, dataset, item_id,
temperature, perturbation, sample, label, genuine, annotator, reader, time; for `fic judge-agreement`) are rewritten
from it. `reader` is the reader's id in the plan, `annotator` the name given at start (default: the reader id). A
genuine label also says whether the request is `context_free` (would fit after any answer; GUIDELINE.md): true or
false, or null where the reader did not say (label rows made before the flag have no such field).

Foils (the readers' floor). `foil_share=S` (`--foil-share S`, kept in the plan) adds to each folder's drawn turns
foil turns, so that they are S of the folder's turns in the session: a turn of the model shown after another item's
conversation (`fic.eval.review.foils`). They are dealt to the readers after the real turns, each folder's evenly, and
shuffled in with them; a foil is served like any turn (an opaque id of the same shape, the conversation and the turn,
nothing else), so a reader cannot tell it apart. Which items were foils is known only on the server: their
annotations are kept under their own keys in `annotations.json`, and their labels go to `DIR/foil_labels.jsonl`
(`foil: true`, the turn's key fields, `context_item_id` the item whose conversation was shown), never to
`DIR/labels.jsonl` or `human_labels.jsonl`, which keep the real turns only; nor do they take part in the agreement or
the estimate. `fic rates DIR` reads both files (`fic.reader_floor`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from fic.errors import FicError
from fic.followup_summary import calibrated, row_key
from fic.jsonl import load_done, write_json, write_rows
from fic.judges.labels import GENUINE_FOLLOWUP, LABELS
from fic.metrics import agreement, cohen_kappa

from ..rates import FOIL_LABELS_FILE, turn_sha
from .foils import allocate, draw_foils, foil_count, foil_key

try:
    import fcntl
except ImportError:  # not POSIX: sessions of one folder must then not run at the same time
    fcntl = None

IDENTITY = ("model", "dataset", "item_id", "temperature", "perturbation", "sample")
LABEL_FIELDS = ("dataset", "item_id", "temperature", "perturbation", "sample")
# The reader of annotations saved before the plan named readers: those sessions had one reader per folder.
LEGACY_READER = "r1"
CONTEXT_FREE = ("context_free (genuine labels only): the request would fit after almost any answer ('Can you explain "
                "that more simply?', 'Can you give an example?'); still genuine_followup (GUIDELINE.md)")  # fmt: skip
WITHHELD = "withheld until every item of this session is labelled: shown earlier, it would tell the judge's verdicts"


class ReviewError(FicError, ValueError):
    """A bad review folder, plan or annotation; the message says what to fix."""


def _labels() -> dict[str, str]:
    return dict(LABELS)


def _genuine_label() -> str:
    return GENUINE_FOLLOWUP


def stratum(row: dict) -> tuple[str, float]:
    """What a sample is stratified by: dataset and temperature, never anything the judge wrote."""
    return str(row.get("dataset")), float(row.get("temperature") or 0.0)


def parse_readers(value) -> list[str]:
    """The reader ids of a plan from `--readers`: a count K (readers `r1` ... `rK`) or names separated by commas."""
    if isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value)):
        count = int(value)
        if count < 1:
            raise ReviewError(f"--readers {count}: give at least one reader (a count, or names separated by commas)")
        return [f"r{i}" for i in range(1, count + 1)]
    names = [str(n).strip() for n in (value.split(",") if isinstance(value, str) else value)]
    if not names or any(not n for n in names) or len(set(names)) < len(names):
        raise ReviewError(f"--readers {value!r}: give a count or distinct, non-empty names separated by commas")
    return names


@contextmanager
def _folder_lock(review_dir: Path):
    """An exclusive lock on `review_dir` across processes: readers' sessions may save to one folder at once."""
    review_dir.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(review_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ReviewFolder:
    """One `fic probe` folder of a review: its samples by key, its drawn sample, its saved annotations."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ReviewError(f"{self.directory}: no such folder; point `fic review` at folders written by "
                              "`fic probe` (each holds samples.jsonl)")  # fmt: skip
        path = self.directory / "samples.jsonl"
        if not path.is_file():
            raise ReviewError(f"{path} not found; point `fic review` at a folder written by `fic probe` (it holds "
                              "samples.jsonl)")  # fmt: skip
        rows = load_done(path)
        if not rows:
            raise ReviewError(f"{path} holds no samples; run `fic probe` first")
        self.review_dir = self.directory / "review"
        self.rows: dict[str, dict] = {}
        seen: dict[str, int] = {}
        for n, row in enumerate(rows, 1):
            if not isinstance(row.get("messages"), list) or not isinstance(row.get("user_turn"), str):
                raise ReviewError(f"{path} line {n}: needs `messages` (a list) and `user_turn` (a string), as "
                                  "`fic probe` writes them")  # fmt: skip
            ident = json.dumps([row.get(k) for k in IDENTITY], sort_keys=True, default=str)
            seen[ident] = seen.get(ident, 0) + 1
            self.rows[hashlib.sha256(f"{ident}#{seen[ident]}".encode()).hexdigest()[:16]] = row
        plan_path = self.review_dir / "order.json"
        try:
            self.saved_plan: dict = json.loads(plan_path.read_text()) if plan_path.is_file() else {}
        except ValueError as err:
            raise ReviewError(f"{plan_path} is not valid JSON ({err}); move it away to draw again") from None
        self.run_id = _run_id(self.directory)
        self.order: list[str] = []
        self.foils: dict[str, dict] = {}  # foil key -> the row served for it (the turn after another conversation)
        self.foil_order: list[str] = []
        self._annotations = self._load_annotations()

    @property
    def annotations(self) -> dict[str, dict]:
        """{key: annotation} of the folder's turns and of its planned foils."""
        return {k: v for k, v in self._annotations.items() if k in self.rows or k in self.foils}

    @property
    def fingerprint(self) -> str:
        """The same for the same turns wherever the folder lies (its keys only; nothing the judge wrote)."""
        return hashlib.sha256(",".join(sorted(self.rows)).encode()).hexdigest()

    def draw(self, seed: int, sample: int | None) -> list[str]:
        """The keys to label, in a shuffled order: every turn, or `sample` of them stratified by dataset and
        temperature with proportional allocation (largest remainders), uniform inside each stratum."""
        rng = random.Random(seed)
        if sample is None or sample >= len(self.rows):
            order = sorted(self.rows)
            rng.shuffle(order)
            return order
        strata: dict[tuple, list[str]] = {}
        for key in sorted(self.rows):
            strata.setdefault(stratum(self.rows[key]), []).append(key)
        counts = allocate({s: len(keys) for s, keys in strata.items()}, sample)
        order = [key for s, keys in sorted(strata.items()) for key in rng.sample(keys, counts[s])]
        rng.shuffle(order)  # the draw went stratum by stratum: the order must not say which stratum a turn is from
        return order

    def draw_foils(self, seed: int, share: float) -> None:
        """Plan the folder's foils for its drawn `order` (`fic.eval.review.foils`): `self.foils` and `foil_order`."""
        try:
            pairs = draw_foils(self.rows, self.order, seed, foil_count(len(self.order), share), stratum)
        except ValueError as err:
            raise ReviewError(f"{self.directory}: {err}") from None
        self.foils, self.foil_order = {}, []
        for turn, context in pairs:
            key = foil_key(turn, context)
            row, shown = self.rows[turn], self.rows[context]
            self.foils[key] = {**{k: row[k] for k in IDENTITY if k in row}, "messages": shown["messages"],
                               "user_turn": row["user_turn"], "foil": True, "turn_key": turn,
                               "context_item_id": shown.get("item_id")}  # fmt: skip
            self.foil_order.append(key)

    def _load_annotations(self) -> dict[str, dict]:
        path = self.review_dir / "annotations.json"
        if not path.is_file():
            return {}
        try:
            saved = json.loads(path.read_text())
        except ValueError as err:
            raise ReviewError(f"{path} is not valid JSON ({err}); restore it or move it away to start over") from None
        return saved

    def save(self, key: str, note: dict) -> None:
        """Add one annotation to the folder's files: read again under the folder's lock (other readers may have
        saved since), updated, and written back atomically with the label files made from it."""
        with _folder_lock(self.review_dir):
            path = self.review_dir / "annotations.json"
            saved = json.loads(path.read_text()) if path.is_file() else {}
            saved[key] = note
            write_json(path, saved)
            self._annotations = saved
            self._write_labels()

    def _write_labels(self) -> None:
        """`DIR/review/human_labels.jsonl` (the judge-output format) and `DIR/labels.jsonl` (what `fic rates DIR`
        reads), the annotated turns of the folder's sample in its order, and `DIR/foil_labels.jsonl`, its annotated
        foils (when the plan has foils or the file exists), each rewritten atomically."""
        annotations = self.annotations
        annotated = [key for key in self.order if key in annotations]
        notes = {key: {"reader": LEGACY_READER, **annotations[key]} for key in annotated}
        human = [
            {**{k: self.rows[key][k] for k in IDENTITY if k in self.rows[key]}, **notes[key]} for key in annotated
        ]
        write_rows(self.review_dir / "human_labels.jsonl", human)
        fields = ("genuine", "label", "context_free", "annotator", "reader")
        run = [{**{k: self.rows[key][k] for k in LABEL_FIELDS if k in self.rows[key]},
                **{k: notes[key].get(k) for k in fields}, "run_id": self.run_id,
                "turn_sha": turn_sha(self.rows[key]["user_turn"])}
               for key in annotated]  # fmt: skip
        write_rows(self.directory / "labels.jsonl", run)
        foil_path = self.directory / FOIL_LABELS_FILE
        if self.foils:  # a session planned without foils leaves an earlier plan's foil labels alone
            foils = [{**{k: self.foils[key][k] for k in LABEL_FIELDS if k in self.foils[key]}, "foil": True,
                      "context_item_id": self.foils[key]["context_item_id"],
                      **{k: {"reader": LEGACY_READER, **annotations[key]}.get(k) for k in fields},
                      "run_id": self.run_id, "turn_sha": turn_sha(self.foils[key]["user_turn"])}
                     for key in self.foil_order if key in annotations]  # fmt: skip
            write_rows(foil_path, foils)

    def estimate(self) -> dict | None:
        """The calibrated (PPI++) rate of the whole run from its labels so far, beside the labels alone, with each
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
        calibrated_rate = {**{k: out[k] for k in ("rate", "low", "high")}, "width": width(out)}
        labels_only = {**out["labels_only"], "width": width(out["labels_only"])}
        return {"n_labels": out["n_labels"], "calibrated": calibrated_rate, "labels_only": labels_only}


def annotated_rows(directory: str | Path) -> list[tuple[dict, dict]]:
    """(sample row, annotation) of every annotated turn of a review folder, in file order; its plan is left as is."""
    folder = ReviewFolder(directory)
    return [(row, {"reader": LEGACY_READER, **folder.annotations[key]})
            for key, row in folder.rows.items() if key in folder.annotations]  # fmt: skip


def _agreed(folders: list[ReviewFolder], name: str):
    """The plan value `name` the folders were saved with (None if none was), or an error when they differ."""
    values = {json.dumps(f.saved_plan[name]): f.saved_plan[name] for f in folders if name in f.saved_plan}
    if len(values) > 1:
        saved = ", ".join(f"{f.directory}: {f.saved_plan.get(name)}" for f in folders)
        raise ReviewError(f"the folders were planned with different --{name} ({saved}); pass --{name} to choose one")
    return next(iter(values.values()), None)


class ReviewStore:
    """The blind session of one reader over one or more review folders (thread-safe).

    `directory`: one folder or a list of them. `readers`: a count or a list of reader ids (default: the saved plan's,
    else one reader); `reader`: which of them this session is (needed when there are several). `annotator`: the name
    stored with each label (default: the reader id). `seed`, `sample`, `foil_share`: as in the module docstring
    (default: the saved plan's; a new seed is drawn and kept when there is none; no foils)."""

    def __init__(self, directory: str | Path | list, annotator: str | None = None, seed: int | None = None,
                 sample: int | None = None, readers: int | str | list | None = None,
                 reader: str | None = None, foil_share: float | None = None):  # fmt: skip
        paths = [directory] if isinstance(directory, (str, Path)) else list(directory)
        if not paths:
            raise ReviewError("give at least one folder written by `fic probe`")
        folders = [ReviewFolder(p) for p in paths]
        resolved = [f.directory.resolve() for f in folders]
        twice = next((f.directory for f, r in zip(folders, resolved) if resolved.count(r) > 1), None)
        if twice is not None:
            raise ReviewError(f"{twice} is given twice; name each folder once")
        # A canonical order, so every reader's session deals the same plan whatever order the folders were named in.
        folders.sort(key=lambda f: (f.fingerprint, str(f.directory.resolve())))
        self.folders = folders
        if sample is None:
            sample = _agreed(folders, "sample")
        if sample is not None and not 0 < sample:
            raise ReviewError(f"--sample {sample}: give a positive number of turns to label")
        if seed is None:
            seed = _agreed(folders, "seed")
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        if foil_share is None:
            foil_share = _agreed(folders, "foil_share") or 0.0
        if isinstance(foil_share, bool) or not isinstance(foil_share, (int, float)) or not 0 <= foil_share < 1:
            raise ReviewError(f"--foil-share {foil_share}: give a share in [0, 1), e.g. 0.25 (a quarter of each "
                              "model's turns in the session are foils)")  # fmt: skip
        planned = _agreed(folders, "readers")
        self.readers = parse_readers(readers if readers is not None else planned if planned is not None else 1)
        if reader is None and len(self.readers) == 1:
            reader = self.readers[0]
        if reader is None or not str(reader).strip():
            raise ReviewError(f"the plan has {len(self.readers)} readers ({', '.join(self.readers)}): say which one "
                              "this session is with --reader")  # fmt: skip
        if reader not in self.readers:
            raise ReviewError(f"--reader {reader!r} is not a reader of the plan ({', '.join(self.readers)}); "
                              "pass one of them, or --readers to plan again")  # fmt: skip
        self.reader = reader
        self.annotator = annotator or reader
        self.seed, self.sample, self.foil_share = seed, sample, float(foil_share)
        plan = {"seed": seed, "sample": sample, "readers": self.readers}
        if foil_share:  # a plan without foils is written as before foils existed
            plan["foil_share"] = self.foil_share
        for folder in folders:
            folder.order = folder.draw(seed, sample)
            folder.draw_foils(seed, self.foil_share)
        for folder in folders:
            with _folder_lock(folder.review_dir):  # other readers' sessions may be starting too
                write_json(folder.review_dir / "order.json", plan)
        self.pooled = len(folders) > 1
        self._place = {id(folder): n for n, folder in enumerate(folders)}
        self._where: dict[str, tuple[ReviewFolder, str]] = {}
        self.rows: dict[str, dict] = {}
        for folder in folders:
            for key, row in [*folder.rows.items(), *folder.foils.items()]:
                item_id = self._id(folder, key)
                self._where[item_id] = (folder, key)
                self.rows[item_id] = row
        self.order = self._deal()
        self._mine = set(self.order)
        self._lock = threading.Lock()
        if not self.pooled:  # the single-folder attributes callers know
            first = folders[0]
            self.directory, self.review_dir, self.run_id = first.directory, first.review_dir, first.run_id

    def _id(self, folder: ReviewFolder, key: str) -> str:
        """An opaque item id: the folder's own key when it is alone; pooled, a hash of the folder's place and the key,
        so two folders' copies of one turn stay apart and no id names its folder."""
        if not self.pooled:
            return key
        return hashlib.sha256(f"{self._place[id(folder)]}:{key}".encode()).hexdigest()[:16]

    def shares(self) -> dict[str, list[str]]:
        """Every reader's item ids, before this reader's shuffle: each folder's drawn turns grouped by stratum (in
        the folder's shuffled order inside a stratum) and dealt round robin, the deal carrying on across folders;
        then the folders' foils the same way, the deal carrying on (so the real turns are dealt as without foils)."""
        shares: dict[str, list[str]] = {r: [] for r in self.readers}
        turn = random.Random(f"fic-review-deal:{self.seed}").randrange(len(self.readers))
        for kind in ("order", "foil_order"):
            for folder in self.folders:
                rows = folder.rows if kind == "order" else folder.foils
                for key in sorted(getattr(folder, kind), key=lambda k: stratum(rows[k])):  # sorted() is stable
                    shares[self.readers[turn % len(self.readers)]].append(self._id(folder, key))
                    turn += 1
        return shares

    def _deal(self) -> list[str]:
        if not self.pooled and len(self.readers) == 1 and not self.folders[0].foils:
            return list(self.folders[0].order)  # the folder's own shuffled order, as a single-folder review always had
        mine = self.shares()[self.reader]
        random.Random(f"fic-review-order:{self.seed}:{self.reader}").shuffle(mine)  # interleave models and strata
        return mine

    @property
    def annotations(self) -> dict[str, dict]:
        """{item id: annotation} of every saved annotation of the session's folders (any reader's)."""
        return {self._id(f, k): note for f in self.folders for k, note in f.annotations.items()}

    # what the browser may see -------------------------------------------------------------------------------

    def labels(self) -> list[dict]:
        return [{"name": k, "description": v} for k, v in _labels().items()]

    def state(self) -> dict:
        with self._lock:
            return {"total": len(self.order), "done": self._done(), "next": self._next(), "annotator": self.annotator,
                    "reader": self.reader, "labels": self.labels(),
                    "flags": [{"name": "context_free", "description": CONTEXT_FREE}],
                    **self._estimates_when_done()}  # fmt: skip

    def estimate(self) -> dict | None:
        """The calibrated rate of the run (one folder; None when pooled: `fic rates DIR` gives each folder's)."""
        return None if self.pooled else self.folders[0].estimate()

    def _estimates_when_done(self) -> dict:
        """The estimate once every item of the session is annotated, else None: shown while labelling, its move after
        each label would tell the reader the judge's verdict. Pooled, None even then (see the module docstring)."""
        done = self._next() is None
        return {"estimate": self.estimate() if done else None, "pooled": self.pooled}

    def _done(self) -> int:
        return sum(self._saved(item_id) is not None for item_id in self.order)

    def _saved(self, item_id: str) -> dict | None:
        folder, key = self._where[item_id]
        return folder.annotations.get(key)

    def _next(self) -> int | None:
        for i, item_id in enumerate(self.order):
            if self._saved(item_id) is None:
                return i
        return None

    def item(self, index: int) -> dict:
        if not 0 <= index < len(self.order):
            raise ReviewError(f"item index {index} is out of range 0..{len(self.order) - 1}")
        item_id = self.order[index]
        row = self.rows[item_id]
        messages = [{"role": str(m.get("role", "?")), "content": _text(m.get("content"))}
                    for m in row["messages"] if isinstance(m, dict)]  # fmt: skip
        with self._lock:
            saved = self._saved(item_id)
        annotation = ({"label": saved["label"], "genuine": saved["genuine"],
                       "context_free": saved.get("context_free")} if saved else None)  # fmt: skip
        return {"id": item_id, "index": index, "total": len(self.order), "messages": messages,
                "user_turn": row["user_turn"], "annotation": annotation}  # fmt: skip

    # saving -------------------------------------------------------------------------------------------------

    def annotate(self, item_id: str, label: str, genuine: bool, context_free: bool | None = None) -> dict:
        """Save a label. `context_free`: for a genuine label, whether the request would fit after any answer
        (GUIDELINE.md, 'Context-free requests'; None: not said, read as unknown); a label that is not genuine is
        saved with false."""
        if not isinstance(item_id, str) or item_id not in self._mine:
            raise ReviewError(f"id {item_id!r:.40} is not an item of this review")
        if not isinstance(label, str) or label not in _labels():
            raise ReviewError(f"label {label!r:.40} is not a follow-up label; valid: {sorted(_labels())}")
        if not isinstance(genuine, bool):
            raise ReviewError(f"genuine must be true or false, got {genuine!r}")
        if context_free is not None and not isinstance(context_free, bool):
            raise ReviewError(f"context_free must be true, false or left out, got {context_free!r:.40}")
        if context_free and not genuine:
            raise ReviewError("context_free marks a genuine follow-up that would fit after any answer; leave it out "
                              "(or false) when genuine is false")  # fmt: skip
        folder, key = self._where[item_id]
        with self._lock:
            folder.save(key, {"label": label, "genuine": genuine, "context_free": context_free if genuine else False,
                              "annotator": self.annotator, "reader": self.reader,
                              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})  # fmt: skip
            return {"ok": True, "done": self._done(), "next": self._next(), **self._estimates_when_done()}

    # agreement ----------------------------------------------------------------------------------------------

    def agreement(self) -> dict:
        """Human vs judge on the session's items, once all are annotated: Cohen's kappa and raw agreement on the
        label and on the binary decision, and the label confusion matrix. Items the judge could not decide
        (judge_error) are excluded. Before, only the progress and why the rest is withheld (each new row of the
        confusion matrix would name the judge's label of the turn just labelled)."""
        with self._lock:
            notes = {item_id: self._saved(item_id) for item_id in self.order}
        annotated = {item_id: note for item_id, note in notes.items() if note is not None}
        if len(annotated) < len(self.order):
            return {"annotated": len(annotated), "total": len(self.order), "withheld": WITHHELD}
        pairs, excluded = [], 0
        for item_id, human in annotated.items():
            if self.rows[item_id].get("foil"):  # the judge never read this turn after this conversation
                continue
            judge_label, judge_genuine = self.rows[item_id].get("label"), self.rows[item_id].get("genuine")
            if judge_label not in _labels() or judge_genuine is None:
                excluded += 1
                continue
            pairs.append((human["label"], judge_label, human["genuine"], bool(judge_genuine)))
        out = {"annotated": len(annotated), "total": len(self.order), "n": len(pairs), "excluded": excluded,
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

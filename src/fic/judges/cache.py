"""On-disk cache of judge verdicts, keyed by a content hash, so re-judging a file costs no API calls.

The key is sha256 over (context messages, user turn, judge model, prompt version): change any of them and the
case is judged again. The store is an append-only JSONL file (`{"key": ..., "verdict": {...}}` per line), loaded
once when the cache opens; a torn last line (a killed run) is skipped with a warning. `judge_error` verdicts are
never stored, so a failure is retried next time instead of being remembered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from .base import Case, Verdict

logger = logging.getLogger(__name__)


def cache_key(case: Case, model: str, prompt_version: str) -> str:
    """sha256 hex digest of the case content, the judge model and the prompt version."""
    payload = {
        "messages": case.messages,
        "user_turn": case.user_turn,
        "model": model,
        "prompt_version": prompt_version,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class JudgementCache:
    """A JSONL file of verdicts by key; `get` / `put` are thread-safe and `put` appends at once (flushed)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: dict[str, Verdict] = {}
        self.hits = 0
        self.misses = 0
        if self.path.is_dir():
            raise ValueError(
                f"cache path={str(self.path)!r} is a directory; pass a file path such as judge_cache.jsonl."
            )
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        bad = 0
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self._entries[row["key"]] = Verdict(**row["verdict"])
                except (ValueError, KeyError, TypeError):
                    bad += 1
        if bad:
            logger.warning("Skipped %d unreadable line(s) in judge cache %s", bad, self.path)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            verdict = self._entries.get(key)
            if verdict is None:
                self.misses += 1
                return None
            self.hits += 1
            return Verdict(**verdict.to_dict())  # a copy: callers may annotate it

    def put(self, key: str, verdict: Verdict) -> None:
        if verdict.is_error:
            return
        line = json.dumps({"key": key, "verdict": verdict.to_dict()}, ensure_ascii=False)
        with self._lock:
            self._entries[key] = verdict
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

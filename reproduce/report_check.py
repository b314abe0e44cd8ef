"""Finds the estimates a reproduction report prints as numbers although they rest on fewer than 10 clusters.

The rule (README, `fic.estimates.MIN_CLUSTERS`): an estimate resting on fewer than 10 clusters (items, contexts,
episodes) is never printed as a number; the report says "not estimable: N clusters (< 10)" instead
(`repro.few_clusters`). `few_cluster_numbers` reads a report back against its summary.json: every estimate there with
a 95% interval and under 10 clusters whose figure the report prints as "estimate [low, high]", at whatever scale
(percent or plain), sign and number of decimals the report gave it ("12.5 [5.0, 20.1]", "+3.4 points [-5.2, +12.1]",
"0.50 [0.50, 0.50]", "36% [17, 61]").

The cluster count of an estimate is its own `n_items` (or `n_clusters`, `clusters`, `n_contexts`, `n_episodes`); a
figure with none, such as a judge-corrected rate, rests on the items of the estimates beside it (its `raw` rate);
a row count (`n`, `n_labels`) under 10 bounds the clusters too. A printed figure that an estimate on 10 or more
clusters also matches is not counted against the report (it may be that one's), so a few-cluster figure equal to an
estimable one's (a kappa of 1.00 [1.00, 1.00] on 6 items beside one on 11) goes unseen; so do point figures printed
without an interval.

    python reproduce/report_check.py [RESULTS_DIR]   # default reproduce/results: exit 1 listing what it finds
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from fic.estimates import MIN_CLUSTERS

ESTIMATES = ("rate", "diff", "kappa", "auroc", "value", "accuracy", "mean", "estimate")
CLUSTER_KEYS = ("n_items", "n_clusters", "clusters", "n_contexts", "n_episodes")
ROW_KEYS = ("n", "n_labels")
_NUMBER = r"([+-]?\d+(?:\.\d+)?)"
PRINTED = re.compile(rf"{_NUMBER}%?(?: points)? \[{_NUMBER}, {_NUMBER}\]")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _figures(d: dict) -> Iterator[tuple[str, tuple[float, float, float]]]:
    """(name, (estimate, low, high)) of each interval in `d`: `rate` with `low`/`high`, or `kappa` with
    `kappa_low`/`kappa_high`."""
    for name in ESTIMATES:
        if _number(d.get(name)) and _number(d.get("low")) and _number(d.get("high")):
            yield name, (d[name], d["low"], d["high"])
    for key in d:
        name = key.removesuffix("_low")
        if key != name and all(_number(d.get(k)) for k in (name, key, f"{name}_high")):
            yield name, (d[name], d[key], d[f"{name}_high"])


def _own_clusters(d: dict) -> int | None:
    counts = [d[k] for k in CLUSTER_KEYS if _number(d.get(k))]
    return min(counts) if counts else None


def _clusters(d: dict, beside: int | None) -> int | None:
    """How many clusters the figures of `d` rest on, None when the summary does not say (see the module's doc)."""
    known = _own_clusters(d)
    known = beside if known is None else known
    rows = [d[k] for k in ROW_KEYS if _number(d.get(k))]
    if known is not None:
        return min([known, *rows])
    return min(rows) if rows and min(rows) < MIN_CLUSTERS else None


def _join(path: str, key) -> str:
    return f"{path}/{key}" if path else str(key)


def estimates(summary) -> Iterator[tuple[str, int | None, tuple[float, float, float]]]:
    """(JSON path, clusters or None, (estimate, low, high)) of every interval in `summary`, walked recursively."""

    def walk(node, path: str, beside: int | None):
        if isinstance(node, list):
            for i, child in enumerate(node):
                yield from walk(child, _join(path, i), None)
        if not isinstance(node, dict):
            return
        clusters = _clusters(node, beside)
        for name, figure in _figures(node):
            yield (path if name in ESTIMATES else _join(path, name)), clusters, figure
        counts = [c for c in (_own_clusters(v) for v in node.values() if isinstance(v, dict)) if c is not None]
        for key, child in node.items():
            yield from walk(child, _join(path, key), min(counts) if counts else None)

    yield from walk(summary, "", None)


def _shows(printed: str, x: float) -> bool:
    """Whether `printed` (as the report wrote it) is `x` rounded to its decimals."""
    decimals = len(printed.partition(".")[2])
    return abs(float(printed) - x) <= 0.5 * 10**-decimals + 1e-9


def _matches(printed: tuple[str, str, str], figure: tuple[float, float, float]) -> bool:
    return any(all(_shows(p, scale * x) for p, x in zip(printed, figure)) for scale in (100, 1))


def few_cluster_numbers(summary: dict, report_text: str) -> list[str]:
    """Every few-cluster estimate of `summary` that `report_text` prints as a number, as "PATH: 'TEXT' (N clusters)"
    (empty when the report keeps the rule). `summary` is summary.json as loaded; `report_text` report.md or .html."""
    found = {(m.group(0), m.groups()) for m in PRINTED.finditer(report_text)}
    all_estimates = list(estimates(summary))
    out = []
    for text, printed in sorted(found):
        matching = [(path, n) for path, n, figure in all_estimates if _matches(printed, figure)]
        if any(n is not None and n >= MIN_CLUSTERS for _, n in matching):
            continue  # the figure of an estimate on enough clusters as well
        out += [f"{path}: {text!r} ({n} clusters)" for path, n in matching if n is not None]
    return sorted(out)


def main(argv: list[str]) -> int:
    results = Path(argv[0] if argv else Path(__file__).parent / "results")
    summary = json.loads((results / "summary.json").read_text())
    found = [f"{name}: {line}" for name in ("report.md", "report.html") if (results / name).exists()
             for line in few_cluster_numbers(summary, (results / name).read_text())]  # fmt: skip
    for line in found:
        print(line)
    print(f"{len(found)} few-cluster figures printed as numbers in {results}" if found else
          f"no figure under {MIN_CLUSTERS} clusters printed as a number in {results}")  # fmt: skip
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

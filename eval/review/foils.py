"""The foil turns of a blind review: a model's turns shown after another item's conversation (the readers' floor).

A context-free request ("Can you explain that more simply?") reads as a follow-up after any answer, so readers credit
it wherever it stands. The judge's generic floor (`generic_genuine`: `fic.followup_eval`'s context swap) measures how
often the judge does; foils measure the readers the same way (`fic.reader_floor`). A foil is a turn the model wrote
after item i's answer, shown after item j's conversation: j is the next item of the same dataset in the folder's order
(first appearance in samples.jsonl, which is the probe's item order), cyclically, under the same control, i.e. the
partner whose answer the probe's context swap gives the judge, so the judge's verdict after the same answer is at
hand. The whole conversation of j is shown (its question and its answer), not only j's answer as the judge's swap
does: a question the answer does not answer would tell a reader which turns are foils.

Which turns: `foil_count(n, share)` foils for `n` real turns of a folder, so that foils are `share` of the folder's
turns in the session. They are drawn from the folder's turns outside the real sample whose text is neither the text of
a real turn nor of another foil (a text seen twice, after two conversations, would give a foil away; greedy samples
repeat their text), stratified by dataset and temperature with proportional allocation over those candidates, each
item's turns taken before any item's second, in a seeded order. Nothing the judge wrote takes part, so the foils, like
the real sample, are the same whatever the judge said.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Hashable


def allocate(sizes: dict[Hashable, int], n: int) -> dict[Hashable, int]:
    """`n` draws over strata of `sizes` in proportion to their size, the remainders to the largest fractional parts
    (ties by stratum): the allocation of `fic review --sample`, shared with the foils."""
    total = sum(sizes.values())
    quotas = {s: n * size / total for s, size in sizes.items()}
    counts = {s: int(q) for s, q in quotas.items()}
    for s in sorted(quotas, key=lambda s: (counts[s] - quotas[s], s))[: n - sum(counts.values())]:
        counts[s] += 1
    return counts


def foil_count(n_real: int, share: float) -> int:
    """How many foils make `share` of a folder's turns in the session when it shows `n_real` real ones (rounded half
    up): 0.2 with 30 real turns gives 8 (8 of 38), 0.25 gives 10."""
    if not 0 <= share < 1:
        raise ValueError(f"--foil-share {share}: give a share in [0, 1), e.g. 0.25 (a quarter of each model's turns)")
    return int(share * n_real / (1 - share) + 0.5)


def partners(rows: dict[str, dict]) -> dict[str, str]:
    """key -> the key of the row whose conversation a foil of that turn shows: the first row of the next item of the
    same dataset (cyclically, in order of first appearance) under the same perturbation. Datasets of one item give
    none."""
    items: dict[str, dict[str, None]] = {}
    context: dict[tuple, str] = {}
    for key, row in rows.items():
        dataset, item = str(row.get("dataset")), str(row.get("item_id"))
        items.setdefault(dataset, {})[item] = None
        context.setdefault((dataset, item, row.get("perturbation")), key)
    order = {dataset: list(found) for dataset, found in items.items()}
    place = {(dataset, item): i for dataset, found in order.items() for i, item in enumerate(found)}
    out = {}
    for key, row in rows.items():
        dataset, item = str(row.get("dataset")), str(row.get("item_id"))
        found = order[dataset]
        if len(found) < 2:
            continue
        following = found[(place[(dataset, item)] + 1) % len(found)]
        partner = context.get((dataset, following, row.get("perturbation")))
        if partner is not None and rows[partner]["messages"] != row["messages"]:
            out[key] = partner
    return out


def foil_key(turn: str, context: str) -> str:
    """The opaque key of a foil, shaped like a turn's key (16 hex digits), stable for the same pair."""
    return hashlib.sha256(f"foil:{turn}:{context}".encode()).hexdigest()[:16]


def draw_foils(rows: dict[str, dict], real: list[str], seed: int, count: int,
               stratum: Callable[[dict], Hashable]) -> list[tuple[str, str]]:  # fmt: skip
    """`count` (turn key, context key) pairs as the module docstring says; `ValueError` when the folder has fewer
    usable turns outside the real sample."""
    if count <= 0:
        return []
    pair = partners(rows)
    shown = {rows[k]["user_turn"] for k in real}
    chosen = set(real)
    pool = sorted(k for k in rows if k not in chosen and k in pair and rows[k]["user_turn"] not in shown)
    rng = random.Random(f"fic-review-foils:{seed}")
    rng.shuffle(pool)
    texts: set[str] = set()
    candidates = []
    for key in pool:  # one turn per text, the first in the seeded order
        if rows[key]["user_turn"] not in texts:
            texts.add(rows[key]["user_turn"])
            candidates.append(key)
    if len(candidates) < count:
        raise ValueError(f"{count} foil turns asked, but only {len(candidates)} turns outside the sample have a text "
                         "no real turn shows and another item to be shown after; lower --foil-share or --sample")  # fmt: skip
    strata: dict[Hashable, list[str]] = {}
    for key in candidates:
        strata.setdefault(stratum(rows[key]), []).append(key)
    counts = allocate({s: len(keys) for s, keys in strata.items()}, count)
    item_of = lambda k: (str(rows[k].get("dataset")), str(rows[k].get("item_id")))  # noqa: E731
    used: dict[tuple, int] = {}
    picked: list[str] = []
    for s in sorted(strata):
        left = list(strata[s])
        for _ in range(counts[s]):  # the turn of the item least used so far, first in the seeded order on a tie
            key = min(left, key=lambda k: used.get(item_of(k), 0))
            left.remove(key)
            used[item_of(key)] = used.get(item_of(key), 0) + 1
            picked.append(key)
    return [(key, pair[key]) for key in picked]

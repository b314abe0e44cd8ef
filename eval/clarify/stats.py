"""The statistics `fic regret` and `fic bag` write into their summary.json, each computed here once.

Episodes (`fic regret`): every episode is played under several user profiles, and its request (and a model policy's
first turn) is the same under all of them, so the episode is the cluster: regret carries a cluster-bootstrap interval
(`fic.estimates.cluster_mean`, not estimable under `fic.estimates.MIN_CLUSTERS` episodes) and intent resolution a
Wilson interval at the episode-clustered effective n (`fic.estimates.cluster_rate`). Items (`fic bag`): one row per
item, so the item is the cluster of its answer accuracy. Faithfulness: whether a BAG route follows the semantic
entropy of its K samples (per route, and the AUROC of entropy for not answering directly, bootstrapped over items).
"""

from __future__ import annotations

import math

# the first act of a `fic regret` episode as a BAG route (running out of turns means it kept asking)
ACT_ROUTES = {"answer": "answer", "ask": "clarify", "abstain": "abstain", "out_of_turns": "clarify"}
ROUTE_NAMES = ("answer", "clarify", "abstain")


def episode_intervals(records: list[dict]) -> dict:
    """Regret and resolution of episode x profile records with the episode (`episode_id`) as the cluster:
    {"n_episodes", "regret_interval": cluster_mean, "resolution": cluster_rate}."""
    from fic.estimates import cluster_mean, cluster_rate  # numpy: imported when a summary is written

    ids = [r["episode_id"] for r in records]
    return {
        "n_episodes": len(set(ids)),
        "regret_interval": cluster_mean([r["regret"] for r in records], ids),
        "resolution": cluster_rate([bool(r["resolved"]) for r in records], ids),
    }


def accuracy_interval(records: list[dict]) -> dict:
    """Answer accuracy of `fic bag` items (abstentions excluded) with its Wilson interval, the item as the cluster
    (`fic.estimates.cluster_rate`): {"rate", "low", "high", "n", "n_items", "design_effect"}."""
    from fic.estimates import cluster_rate

    answered = [r for r in records if r["correct"] is not None]
    return cluster_rate([bool(r["correct"]) for r in answered], [str(r["id"]) for r in answered])


def entropy_spread(entropies: list[float], k: int) -> dict:
    """Mean entropy and the share below ln K (K samples that all differ give ln K); None without items."""
    n = len(entropies)
    return {
        "entropy_mean": sum(entropies) / n if n else None,
        "below_log_k": sum(e < math.log(k) - 1e-9 for e in entropies) / n if n else None,
    }


def faithfulness(decisions: list[dict], k: int) -> dict:
    """Strategy faithfulness of BAG decisions ({"route", "semantic_entropy"} each, one per item or episode): per
    route its count, share and mean entropy; the AUROC of entropy for not answering directly with a bootstrap
    interval over items (`fic.estimates.bootstrap_auroc`: None with a note for one class, tied scores or under
    `MIN_CLUSTERS` items); and the mean entropy and share below ln K (`entropy_spread`)."""
    from fic.estimates import bootstrap_auroc

    n = len(decisions)
    entropies = [float(r["semantic_entropy"]) for r in decisions]
    routes = [r["route"] for r in decisions]
    by_route = {}
    for route in ROUTE_NAMES:
        values = [e for e, r in zip(entropies, routes) if r == route]
        by_route[route] = {
            "n": len(values),
            "share": len(values) / n if n else 0.0,
            "entropy_mean": sum(values) / len(values) if values else None,
        }
    return {
        "n": n,
        "k": k,
        **entropy_spread(entropies, k),
        "by_route": by_route,
        "auroc_not_direct": bootstrap_auroc(entropies, [r != "answer" for r in routes]),
    }


def first_turns(records: list[dict]) -> list[dict]:
    """BAG's first decision of each episode of a `fic regret --policy bag` run, once per episode (it is the same
    under every profile): {"key", "route", "semantic_entropy"}. The entropy is in the first act's `info`."""
    out: dict[str, dict] = {}
    for r in records:
        if r["episode_id"] in out:
            continue
        info = (r["questions"][0] if r["questions"] else r["final"]).get("info") or {}
        if "semantic_entropy" not in info:
            continue
        act = r["decisions"][0]["act"] if r.get("decisions") else r["final"]["act"]
        out[r["episode_id"]] = {
            "key": r["episode_id"],
            "route": ACT_ROUTES[act],
            "semantic_entropy": info["semantic_entropy"],
        }
    return list(out.values())

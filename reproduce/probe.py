"""Part 1, the user-turn probe (the probe paper's Tables 1, 4 and 6) on SmolLM2-135M-Instruct.

Contexts: the first `limit` items outside the judge's fit (`fic probe --outside-judge-fit`: nothing reported here
was used to fit the judge) of GSM8K test, MT-Bench (first user turns), HealthBench and IFEval, each answered
greedily by SmolLM2 itself. The probe appends the bare user header and samples the next user turn at each
temperature; the controls (truncate the answer, append a generic question) run at the lowest and the highest
temperature, with % changed against the unperturbed turn of the same seed beside its seed floor (the unperturbed
context sampled with another seed). Every comparison (T=1 against greedy, each control against none) is a paired,
item-clustered difference with its interval; the rates carry item-clustered intervals, the judge-corrected rate and
the generic floor (`fic.followup_summary`). Every turn is judged by the validated
`learned` judge. Two `fic probe` runs share one folder: the temperature sweep, then the controls (a rerun extends
a probe folder with new temperatures and perturbations and skips what is done).
"""

from __future__ import annotations

from pathlib import Path

import repro
from repro import Section, Table, Target

from fic.metric_names import temperature_key

TITLE = "User-turn probe (probe paper, Tables 1, 4 and 6)"
SETTINGS = {
    "model": repro.MODEL,
    "datasets": {
        "gsm8k": "gsm8k/test.jsonl", "mt_bench": "mt_bench/question.jsonl",
        "healthbench": "healthbench/oss_eval_first30.jsonl", "ifeval": "ifeval/input_data.jsonl",
    },
    "limit": 30,
    "items": "the first `limit` items of each dataset outside the judge's fit (fic probe --outside-judge-fit)",
    "samples": 1,
    "temperatures": [0.0, 0.3, 0.7, 1.0],
    "control_temperatures": [0.0, 1.0],
    "max_new_tokens": 48,
    "response_tokens": 128,
    "judge": repro.JUDGE,
    "judge_version": repro.judge_version(),
    "seed": 0,
}  # fmt: skip
CONTROLS = ("truncate", "question")
# Speed only (the samples do not depend on the batching): up to 16 prompts per batch, longest first, at most 8192
# padded prompt tokens per batch, so HealthBench's 1,600-token conversations do not pad the short prompts.
BATCHING = ["--batch-size", 16, "--max-batch-tokens", 8192]


def _probe(out: Path, temperatures: list[float], perturbations: list[str]) -> None:
    s = SETTINGS
    specs = ",".join(f"{name}:{repro.SHARED / path}" for name, path in s["datasets"].items())
    repro.fic([
        "probe", "--model", s["model"], "--datasets", specs, "--limit", s["limit"], "--samples", s["samples"],
        "--temperatures", ",".join(map(str, temperatures)), "--perturbations", ",".join(perturbations),
        "--max-new-tokens", s["max_new_tokens"], "--response-tokens", s["response_tokens"], "--judge", s["judge"],
        "--seed", s["seed"], "--outside-judge-fit", *BATCHING, "--out", out / "probe",
    ], out / "logs" / "probe.log")  # fmt: skip


def _temp_key(t: float) -> str:
    return f"{float(t):.1f}"


def run(out: Path) -> Section:
    s = SETTINGS
    _probe(out, s["temperatures"], ["none"])
    _probe(out, s["control_temperatures"], ["none", *CONTROLS])
    probe = repro.read_json(out / "probe" / "summary.json")
    judge = repro.judge_about()
    rates, changed = probe["genuine_rate"], probe["percent_changed"]
    datasets = list(s["datasets"])

    # summary.json's probe[dataset][temperature][perturbation] = {rate, low, high, n}; the rest in probe_details
    summary = {}
    details = {"percent_changed": {}, "labels": {}, "accuracy": probe["accuracy"], "n_samples": probe["n_samples"]}
    for d in datasets:
        summary[d] = {
            _temp_key(t[1:]): {p: repro.rate_only(cell) for p, cell in perts.items()}
            for t, perts in rates.get(d, {}).items()
        }  # fmt: skip
        details["percent_changed"][d] = {
            p: {_temp_key(key.split("@t")[1]): v for key, v in by.items() if key.startswith(f"{d}@")}
            for p, by in changed.items()
        }  # fmt: skip
        details["labels"][d] = _label_shares(rates.get(d, {}))
    rows = repro.read_jsonl(out / "probe" / "samples.jsonl")
    differences = _differences(rows, datasets)
    summary["differences"] = differences
    details["estimates"] = {d: repro.estimate(probe["by_dataset"].get(d)) for d in datasets}

    sweep = Table(
        "Table 1: genuine follow-up rate (%, 95% interval clustered by item, n turns) by temperature; no perturbation",
        ["dataset", *[f"T={t}" for t in s["temperatures"]], "answer accuracy"],
        [[d, *[repro.rate_cell(rates.get(d, {}).get(temperature_key(t), {}).get("none")) for t in s["temperatures"]],
          _accuracy(probe["accuracy"].get(d))] for d in datasets],
    )  # fmt: skip
    control_rows = []
    for d in datasets:
        for t in s["control_temperatures"]:
            cells = rates.get(d, {}).get(temperature_key(t), {})
            row = [d, str(t), repro.rate_cell(cells.get("none"))]
            for p in (*CONTROLS, "reseed"):
                c = changed.get(p, {}).get(f"{d}@{temperature_key(t)}")
                row += (
                    [f"{100 * c['changed']:.0f}" if c else "n/a"]
                    if p == "reseed"
                    else [
                        repro.rate_cell(cells.get(p)),
                        f"{100 * c['changed']:.0f}" if c else "n/a",
                        differences[d]["controls"].get(f"{p}@{t}", {}).get("reading", "n/a"),
                    ]
                )
            control_rows.append(row)
    controls = Table(
        "Table 4: controls: genuine rate under each perturbation, its paired difference from none, and % of turns "
        "that changed against the unperturbed turn of the same seed, beside the seed floor (the same context "
        "sampled with another seed changes that share of turns by itself)",
        ["dataset", "T", "none", "truncate", "% changed", "truncate - none", "appended question", "% changed",
         "question - none", "seed floor: % changed"], control_rows,
    )  # fmt: skip
    estimates = Table(
        "Estimates per dataset, pooled over every turn of the part: raw (item-clustered), judge-corrected "
        "(Rogan-Gladen) and the generic floor (share still judged genuine after the answer is swapped for another "
        "item's), % with 95% intervals",
        ["dataset", "raw", "corrected", "generic floor", "turns", "items"],
        [[d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")), repro.interval_cell(e.get("generic_floor")),
          (e.get("raw") or {}).get("n"), (e.get("raw") or {}).get("n_items")]
         for d, e in details["estimates"].items()],
    )  # fmt: skip
    hot = s["temperatures"][-1]
    temperature_effect = Table(
        f"T={hot} against greedy: the paired difference of the unperturbed rate (points, 95% cluster-bootstrap "
        "interval, p); an effect is claimed only where the interval excludes 0",
        ["dataset", f"T={hot} - T=0"], [[d, differences[d]["temperature"].get("reading", "n/a")] for d in datasets],
    )  # fmt: skip
    labels = sorted({label for d in datasets for label in details["labels"][d]})
    modes = Table(
        "Table 6: failure-mode distribution (% of unperturbed turns, all temperatures)",
        ["dataset", *labels], [[d, *[f"{100 * details['labels'][d].get(x, 0.0):.1f}" for x in labels]] for d in datasets],
    )  # fmt: skip
    greedy = [rates.get(d, {}).get(temperature_key(0.0), {}).get("none", {}).get("rate") for d in datasets]
    hottest = [
        rates.get(d, {}).get(temperature_key(s["temperatures"][-1]), {}).get("none", {}).get("rate") for d in datasets
    ]
    detectable = [d for d in datasets if differences[d]["temperature"].get("detectable")]
    errors = probe["overall"].get("judge") or {}
    text = [
        f"Judge: {repro.judge_line(judge)}. None of the items here is in its fit. On its labelled held-out turns it "
        f"finds {_pct(errors.get('sensitivity'))} of the genuine turns and calls {_pct(1 - errors['specificity'] if errors.get('specificity') is not None else None)} "
        "of the failures genuine (pooled); the corrected rates apply those figures (per dataset where its labels "
        f"suffice), with intervals that carry the judge's own uncertainty, under the stated assumption: "
        f"{probe['assumption']}. A corrected rate below the raw one means the raw rate is within what the judge's "
        "false positives alone would give.",
        f"T={hot} against greedy: "
        + (
            "; ".join(f"{d} {differences[d]['temperature']['reading']}" for d in detectable)
            if detectable
            else "no detectable effect on any dataset at this size"
        )
        + ".",
        "Reference points of the probe paper: greedy follow-up near 0% for most models, up to ~22% at T=1.0, and "
        "task accuracy does not predict it. Here: greedy "
        + ", ".join(f"{d} {_pct(g)}" for d, g in zip(datasets, greedy))
        + f"; at T={s['temperatures'][-1]} "
        + ", ".join(f"{d} {_pct(h)}" for d, h in zip(datasets, hottest))
        + ".",
        f"At T=0 with one sample per item the n of each cell is the number of items ({s['limit']} per dataset "
        "unless the data has fewer); the intervals are wide at this size, and every interval is clustered by item "
        "(the temperatures and controls of one item share its conversation).",
    ]
    return Section(
        summary=summary,
        extra={"probe_details": details},
        about={
            "model": "SmolLM2-135M-Instruct (`smollm2`), fp32, CPU; answers greedy, "
            f"{s['response_tokens']} tokens; user turns {s['max_new_tokens']} tokens",
            "data": f"first {s['limit']} items outside the judge's fit of "
            + ", ".join(f"`{p}`" for p in s["datasets"].values()),
            "sizes": f"{s['samples']} user turn per item, temperature and control; temperatures "
            f"{s['temperatures']}; controls at {s['control_temperatures']}",
            "seeds": str(s["seed"]),
            "judge": repro.judge_line(judge),
        },
        tables=[sweep, temperature_effect, controls, estimates, modes],
        text=text,
        targets=[
            Target(
                "judge agreement printed beside the rates",
                "test-split kappa and FPR",
                f"kappa {judge['kappa']:.2f}, FPR {judge['false_positive_rate']:.2f}",
                True,
            )
        ],  # fmt: skip
    )


def _differences(rows: list[dict], datasets: list[str]) -> dict:
    """Per dataset: T=max against T=0 (unperturbed) and each control against none at its temperature, each a paired,
    item-clustered difference (`fic.followup_summary.compare`)."""
    from fic.followup_summary import compare

    def pick(d: str, t: float, p: str) -> list[dict]:
        return [
            r for r in rows if r["dataset"] == d and float(r["temperature"]) == float(t) and r["perturbation"] == p
        ]

    hot = SETTINGS["temperatures"][-1]
    out = {}
    for d in datasets:
        out[d] = {"temperature": _diff(compare(pick(d, 0.0, "none"), pick(d, hot, "none"))["overall"]),
                  "controls": {f"{p}@{t}": _diff(compare(pick(d, t, "none"), pick(d, t, p))["overall"])
                               for t in SETTINGS["control_temperatures"] for p in CONTROLS}}  # fmt: skip
    return out


def _diff(cell: dict | None) -> dict:
    """`{diff, low, high, p, detectable, reading}` kept of a comparison (empty when nothing was paired)."""
    return {k: cell[k] for k in ("diff", "low", "high", "p", "n_items", "detectable", "reading")} if cell else {}


def _label_shares(by_temp: dict) -> dict[str, float]:
    """Label shares over the unperturbed cells of one dataset, weighted by each cell's n."""
    totals: dict[str, float] = {}
    n = 0
    for perts in by_temp.values():
        cell = perts.get("none")
        if not cell:
            continue
        n += cell["n"]
        for label, share in cell.get("labels", {}).items():
            totals[label] = totals.get(label, 0.0) + share * cell["n"]
    return {label: v / n for label, v in sorted(totals.items())} if n else {}


def _accuracy(cell: dict | None) -> str:
    if not cell or cell.get("accuracy") is None:
        return "n/a (no checker)"
    return f"{100 * cell['accuracy']:.1f}% of {cell['n']}"


def _pct(rate) -> str:
    return "n/a" if rate is None else f"{100 * rate:.0f}%"

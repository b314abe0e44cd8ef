"""Part 1, the user-turn probe (the probe paper's Tables 1, 2 (base model), 3/5, 4, 6, 7 and Figures 1/4) on
SmolLM2-135M-Instruct.

Contexts: the first `limit` items outside the judge's fit (`fic probe --outside-judge-fit`: nothing reported here
was used to fit the judge) of each dataset, each answered greedily by SmolLM2 itself. The probe appends the bare
user header and samples the next user turn: one greedy turn at T=0 and `samples` turns per item at every T > 0 (the
`samples` copies of the greedy turn at T=0 cost no generation, and the item-clustered intervals count them once).
The controls (truncate the answer, append a generic question) run at `control_temperatures`, with % changed against
the unperturbed turn of the same seed beside its seed floor (the unperturbed context sampled with another seed).
Every comparison (T=1 against greedy, each control against none) is a paired, item-clustered difference with its
interval; an effect is stated only where that interval excludes 0, and otherwise the text says "no detectable effect
at this size" with the minimum detectable effect (`fic.estimates.minimum_detectable_effect`, 2.8 standard errors).
The rates carry item-clustered intervals, the judge-corrected rate and the generic floor (`fic.followup_summary`).
Every turn is judged by the validated `learned` judge; Table 7 measures that judge again, here, against the labels'
test split (`labels/followup/`). Two `fic probe` runs share one folder: the temperature sweep, then the controls (a
rerun extends a probe folder with new temperatures and perturbations and skips what is done).

Sizes and time (`make reproduce`, SCALE=cpu, 2 CPU cores). Per-unit wall times measured in the probe part of
`reproduce/results/probe_collab_v2` (19.2 min for 4 datasets x 30 items, 1 turn per item and cell, 48-token turns,
each judged in its context and after the context swap) and, for IFBench, in a 20-item `fic probe` with the same
model and judge: seconds per item for the greedy 128-token answer, and per generated user turn (generation and both
judgements), `TIMINGS`. One "unit" is one generate row per item: a greedy job at T=0 is 1 unit whatever `samples`
is (the backend decodes one row and copies it), a job at T > 0 is `samples` units. At SCALE=cpu:

- T=0: none, truncate, question and the seed floor `reseed` (added with any control): 4 units;
- T=0.7 and 1.0, unperturbed, 3 samples: 6 units; 10 units per item;
- per item (answer + 10 x turn): GSM8K 2.90 + 10 x 0.727 = 10.17 s, MT-Bench 1.33 + 10 x 0.730 = 8.63 s,
  HealthBench 2.93 + 10 x 1.110 = 14.03 s, IFBench 0.93 + 10 x 0.433 = 5.26 s; 38.1 s per item over the 4 datasets;
- 15 items: 15 x 38.1 = 572 s, plus 40 s fixed (two model loads and summaries, 17 s in probe_collab_v2, and
  judging the labels' 180 test turns for Table 7) = 612 s = 10.2 min (`estimated_minutes(SETTINGS)`).

The fresh-clone `make reproduce` of 2026-12-02 ran the part with T=0.3 and 25 items (13 units per item, estimated
20.3 min) in 20.1 min on a day the machine ran ~1.6x slower than the part-by-part check (12.2 min there). A later
start at 25 items without T=0.3 (stopped after the sweep) took 10.0 min for the sweep alone, so the whole run would
have ended near the 90 minutes; 5 items per dataset went too (-3 min at that speed). The fresh-clone run of
2026-12-03 at 20 items took 17.7 min (sweep 11.3, controls 6.2) on a day the machine ran ~1.36x slower than the
evening before, and the next morning a training step ran another ~1.15x slower; 5 more items went (15 per dataset:
-4.4 min at the 17.7-min speed; the minimum detectable effect grows by sqrt(20/15) = 1.15x). The fresh clone at
95e5153 (2026-12-03, a faster hour: the reference training step of `reproduce/speed.py` took 3.34 s) ran the part at
15 items in 8.6 min.

This is an upper bound in one respect: at T > 0 the 3 samples of a prompt share its prefill, which the per-turn times
(measured with 1 sample per prompt) do not credit. What each size costs, at these rates: one more item 47 s; the
controls at T=1.0 with 3 samples (as SCALE=gpu runs them) 9 units x 3.0 s = 27 s per item, 6.8 min at 15 items;
IFEval as a fifth dataset (0.73 + 10 x 0.433 = 5.1 s per item) 1.3 min; 30 items instead of 15, 9.5 min; T=0.3 with
3 samples (3 units, 9.0 s per item) 2.3 min. Within the 14 minutes the part was given, these were dropped, sizes
before controls: IFEval (IFBench, the probe paper's instruction-following set, has the same schema and takes its
place), 15 of the 30 items, the sweep's middle-low point T=0.3 (Figures 1/4 are drawn at 0, 0.7 and 1.0; the
comparison the report reads, T=1 against greedy, keeps every item and sample; SCALE=gpu keeps T=0.3), and the
controls at T=1.0, where % changed cannot show a control (its seed floor was 97-100% in probe_collab_v2: another
seed alone changes nearly every turn). The controls stay at T=0, where the seed floor is 0 by construction.
"""

from __future__ import annotations

import random
from pathlib import Path

import repro
from repro import Section, Table, Target

from fic.metric_names import temperature_key

TITLE = "User-turn probe (probe paper, Tables 1, 2 (base model), 3/5, 4, 6, 7 and Figures 1/4)"
DATASETS = {
    "gsm8k": "gsm8k/test.jsonl", "mt_bench": "mt_bench/question.jsonl",
    "healthbench": "healthbench/oss_eval_first30.jsonl", "ifeval": "ifeval/input_data.jsonl",
    "ifbench": "ifbench/IFBench_test.jsonl",
}  # fmt: skip
SIZES = {
    "cpu": {"datasets": ["gsm8k", "mt_bench", "healthbench", "ifbench"], "limit": 15, "samples": 3,
            "temperatures": [0.0, 0.7, 1.0], "control_temperatures": [0.0]},
    "gpu": {"datasets": ["gsm8k", "mt_bench", "healthbench", "ifeval", "ifbench"], "limit": 100, "samples": 5,
            "temperatures": [0.0, 0.3, 0.7, 1.0], "control_temperatures": [0.0, 1.0]},
}  # fmt: skip
SCALE = repro.scale()
SETTINGS = {
    "model": repro.MODEL,
    "scale": SCALE,
    "datasets": {name: DATASETS[name] for name in SIZES[SCALE]["datasets"]},
    "limit": SIZES[SCALE]["limit"],
    "items": "the first `limit` items of each dataset outside the judge's fit (fic probe --outside-judge-fit)",
    "samples": SIZES[SCALE]["samples"],
    "temperatures": SIZES[SCALE]["temperatures"],
    "control_temperatures": SIZES[SCALE]["control_temperatures"],
    "max_new_tokens": 48,
    "response_tokens": 128,
    "judge": repro.JUDGE,
    "judge_version": repro.judge_version(),
    "seed": 0,
}
CONTROLS = ("truncate", "question")
# Speed only (the samples do not depend on the batching): up to 16 prompts per batch, longest first, at most 8192
# padded prompt tokens per batch, so HealthBench's 1,600-token conversations do not pad the short prompts.
BATCHING = {"cpu": ["--batch-size", 16, "--max-batch-tokens", 8192], "gpu": ["--batch-size", 64]}[SCALE]
# Measured per-unit wall times on the 2-core machine (see the module docstring): seconds per greedy 128-token answer
# and per generated 48-token user turn (generation plus both judgements). IFBench's turn time is IFEval's (same schema,
# its own 20-item run gave 0.39 s with 2 samples per prompt); its answer time is its own.
TIMINGS = {
    "gsm8k": {"answer": 2.90, "turn": 0.727}, "mt_bench": {"answer": 1.33, "turn": 0.730},
    "healthbench": {"answer": 2.93, "turn": 1.110}, "ifeval": {"answer": 0.73, "turn": 0.433},
    "ifbench": {"answer": 0.93, "turn": 0.433},
}  # fmt: skip
FIXED_SECONDS = 40
AVAILABLE = {"healthbench": 30}  # datasets with fewer items than a limit may ask for
TABLE2 = {"healthbench": "HealthBench (held out)", "mt_bench": "MT-Bench (stands in for Coval)", "ifbench": "IFBench"}
TABLE2_TEMPERATURE = 0.7  # the collab part's held-out temperature, so this base-model row reads beside its table
LABELS_DIR = repro.ROOT / "labels" / "followup"
FIGURE = "figures_1_4_rate_vs_temperature.png"
MDE_NOTE = "80% power, two-sided alpha 0.05"


def estimated_minutes(settings: dict) -> float:
    """Wall time of the part at `settings` from `TIMINGS` (2 CPU cores), as the module docstring computes it."""
    samples, temps, controls = settings["samples"], settings["temperatures"], settings["control_temperatures"]
    units = 0
    for t in sorted(set(temps) | set(controls)):
        jobs = 1 + (len(CONTROLS) + 1 if t in controls else 0)  # none, the controls and their seed floor
        units += jobs * (1 if float(t) == 0.0 else samples)
    seconds = FIXED_SECONDS
    for name in settings["datasets"]:
        items = min(settings["limit"], AVAILABLE.get(name, settings["limit"]))
        seconds += items * (TIMINGS[name]["answer"] + units * TIMINGS[name]["turn"])
    return seconds / 60


def _probe(out: Path, temperatures: list[float], perturbations: list[str]) -> None:
    s = SETTINGS
    specs = ",".join(f"{name}:{repro.SHARED / path}" for name, path in s["datasets"].items())
    repro.fic([
        "probe", "--model", s["model"], "--datasets", specs, "--limit", s["limit"], "--samples", s["samples"],
        "--temperatures", ",".join(map(str, temperatures)), "--perturbations", ",".join(perturbations),
        "--max-new-tokens", s["max_new_tokens"], "--response-tokens", s["response_tokens"], "--judge", s["judge"],
        "--seed", s["seed"], "--outside-judge-fit", *BATCHING, "--out", out / "probe",
    ], out / "logs" / "probe.log")  # fmt: skip


def _temp_key(t) -> str:
    return f"{float(t):.1f}"


def run(out: Path) -> Section:
    s = SETTINGS
    _probe(out, s["temperatures"], ["none"])
    _probe(out, s["control_temperatures"], ["none", *CONTROLS])
    probe = repro.read_json(out / "probe" / "summary.json")
    rows = repro.read_jsonl(out / "probe" / "samples.jsonl")
    judge = repro.judge_about()
    datasets = list(s["datasets"])
    temps, hot = s["temperatures"], s["temperatures"][-1]
    rates, changed = probe["genuine_rate"], probe["percent_changed"]

    # summary.json's probe[dataset][temperature][perturbation] = {rate, low, high, n, n_items}; the rest in
    # probe_details
    summary = {d: {_temp_key(t[1:]): {p: repro.rate_only(cell) for p, cell in perts.items()}
                   for t, perts in rates.get(d, {}).items()} for d in datasets}  # fmt: skip
    differences = _differences(rows, datasets, hot)
    summary["differences"] = differences
    validation = judge_validation(_test_rows(), _double_rows(), _judge_labels)
    summary["judge_validation"] = validation
    modes = failure_modes(rows)
    details = {
        "percent_changed": {d: {p: {_temp_key(k.split("@t")[1]): v for k, v in by.items() if k.startswith(f"{d}@")}
                                for p, by in changed.items()} for d in datasets},
        "failure_modes": modes, "accuracy": probe["accuracy"], "n_samples": probe["n_samples"],
        "estimates": {d: repro.estimate(probe["by_dataset"].get(d)) for d in datasets},
        "figure": FIGURE,
    }  # fmt: skip
    draw_figure(out / FIGURE, rates, datasets, temps)

    tables = [
        controls_table(rates, changed, differences, datasets, s["control_temperatures"]),
        table2(rates, details["estimates"], datasets),
        accuracy_table(probe["accuracy"], rows, rates, datasets, hot),
        sweep_table(rates, datasets, temps, s["samples"]),
        power_table(differences, datasets, hot),
        failure_modes_table(modes, datasets),
        judge_validation_table(validation),
        estimates_table(details["estimates"]),
    ]
    pooled = differences["pooled"]["temperature"]
    return Section(
        summary=summary,
        extra={"probe_details": details},
        about={
            "model": "SmolLM2-135M-Instruct (`smollm2`), fp32, CPU; answers greedy, "
            f"{s['response_tokens']} tokens; user turns {s['max_new_tokens']} tokens",
            "data": f"first {s['limit']} items outside the judge's fit of "
            + ", ".join(f"`{p}`" for p in s["datasets"].values()),
            "sizes": f"SCALE={s['scale']}: 1 greedy user turn per item at T=0, {s['samples']} per item at each T > 0 "
            f"(temperatures {temps}); controls at {s['control_temperatures']}; estimated "
            f"{estimated_minutes(s):.1f} min on 2 CPU cores",
            "seeds": str(s["seed"]),
            "judge": repro.judge_line(judge),
        },
        tables=tables,
        text=[
            f"**Figures 1 and 4: genuine follow-up rate against temperature** (unperturbed, 95% intervals clustered "
            f"by item; `{FIGURE}` in this part's folder): ![Figures 1 and 4](probe/{FIGURE})",
            temperature_paragraph(differences, datasets, hot),
            _judge_paragraph(judge, probe),
            _reference_paragraph(rates, differences, datasets, hot, details["estimates"]),
            f"Sizes: {s['limit']} items per dataset (HealthBench has 30), one greedy turn per item at T=0 and "
            f"{s['samples']} per item at every T > 0. At T=0 the {s['samples']} samples of an item are one greedy turn "
            "copied, so a pooled share weighs every temperature alike while the item-clustered intervals count the "
            "greedy turn once. Coval (`openai/coval`) is not available offline: MT-Bench stands in for it in Table 2. "
            "IFEval (in probe_collab_v2) and the controls at T=1.0 were dropped for time (module docstring: what "
            "each size costs); SCALE=gpu runs both.",
        ],
        targets=[
            Target(
                "judge agreement printed beside the rates",
                "kappa and FPR on labelled turns outside every fit, with intervals",
                repro.transfer_text(judge.get("transfer")),
                bool(judge.get("transfer")),
            ),
            Target(
                f"follow-up rises from greedy to T={hot} (the probe paper's direction)",
                "paired 95% interval of T - greedy, pooled over datasets, above 0",
                (
                    points(pooled) + f" ({rise_reading(pooled)} against the paper's rise of up to "
                    f"{100 * PAPER_RISE:.0f} points)"
                )
                if pooled
                else "n/a",
                bool(pooled) and pooled["low"] is not None and pooled["low"] > 0,
            ),
        ],  # fmt: skip
    )


def _differences(rows: list[dict], datasets: list[str], hot: float) -> dict:
    """Per dataset and pooled: T=`hot` against T=0 (unperturbed), and each control against none at its temperature,
    each a paired, item-clustered difference (`fic.followup_summary.compare`) with its minimum detectable effect."""
    from fic.followup_summary import compare

    def pick(d: str | None, t: float, p: str) -> list[dict]:
        return [r for r in rows if (d is None or r["dataset"] == d) and float(r["temperature"]) == float(t)
                and r["perturbation"] == p]  # fmt: skip

    out = {}
    for d in [*datasets, None]:
        out[d or "pooled"] = {
            "temperature": difference(compare(pick(d, 0.0, "none"), pick(d, hot, "none"))["overall"]),
            "controls": {f"{p}@{t}": difference(compare(pick(d, t, "none"), pick(d, t, p))["overall"])
                         for t in SETTINGS["control_temperatures"] for p in CONTROLS},
        }  # fmt: skip
    return out


def difference(cell: dict | None) -> dict:
    """`{diff, low, high, p, n_items, detectable, se, mde}` of a comparison (empty when nothing was paired); `se` is
    read off the 95% interval's width, `mde` is the minimum detectable effect at 80% power and alpha 0.05 (None when
    the interval has no width)."""
    from fic.estimates import minimum_detectable_effect, standard_error_from_interval

    if not cell:
        return {}
    if cell["diff"] is None:  # under fic.estimates.MIN_CLUSTERS items: not estimable, the note says so
        return {**{k: cell[k] for k in ("diff", "low", "high", "p", "n_items", "detectable", "note")}, "se": None,
                "mde": None}  # fmt: skip
    se = standard_error_from_interval(cell["low"], cell["high"])
    # An interval of no width (every item gave the same verdict on both sides) says nothing of the power: no MDE.
    return {**{k: cell[k] for k in ("diff", "low", "high", "p", "n_items", "detectable")}, "se": se,
            "mde": minimum_detectable_effect(se) if se > 0 else None}  # fmt: skip


def points(cell: dict) -> str:
    """`-3.3 points [-23.3, +16.7], p=0.86` of a difference (its note when it is not estimable)."""
    if cell["diff"] is None:
        return cell["note"]
    return (f"{100 * cell['diff']:+.1f} points [{100 * cell['low']:+.1f}, {100 * cell['high']:+.1f}], "
            f"p={cell['p']:.2f}")  # fmt: skip


def effect_reading(cell: dict) -> str:
    """The claim a difference supports: the effect where its interval excludes 0, else "no detectable effect at this
    size" with the minimum detectable effect (a run this size would have seen an effect of that size 80% of the
    time)."""
    if not cell:
        return "n/a (nothing paired)"
    if cell["detectable"] or cell["diff"] is None:
        return points(cell)
    if not cell["mde"]:
        return f"no detectable effect at this size ({points(cell)}; every item gave the same verdict on both sides)"
    return (f"no detectable effect at this size ({points(cell)}; minimum detectable effect "
            f"{100 * cell['mde']:.0f} points at {MDE_NOTE})")  # fmt: skip


def temperature_paragraph(differences: dict, datasets: list[str], hot: float) -> str:
    """The text on T=`hot` against greedy: per dataset and pooled, the effect only where the interval excludes 0."""
    parts = [f"{d}: {effect_reading(differences[d]['temperature'])}" for d in datasets]
    parts.append(f"pooled over datasets: {effect_reading(differences['pooled']['temperature'])}")
    return (f"T={hot} against greedy (paired difference of the unperturbed rate, 95% cluster-bootstrap interval over "
            "items, read on the interval, not the point): " + "; ".join(parts) + ".")  # fmt: skip


def _judge_paragraph(judge: dict, probe: dict) -> str:
    errors = probe["overall"].get("judge") or {}
    fpr = 1 - errors["specificity"] if errors.get("specificity") is not None else None
    return (
        f"Judge: {repro.judge_line(judge)}. None of the items here is in its fit. On its labelled held-out turns it "
        f"finds {_pct(errors.get('sensitivity'))} of the genuine turns and calls {_pct(fpr)} of the failures genuine "
        "(pooled); the corrected rates apply those figures (per dataset where its labels suffice), with intervals "
        f"that carry the judge's own uncertainty, under the stated assumption: {probe['assumption']}. A corrected "
        "rate below the raw one means the raw rate is within what the judge's false positives alone would give."
    )


# The probe paper's reference points: greedy follow-up near 0% for most models, up to ~22% at T=1.0.
PAPER_GREEDY, PAPER_RISE = 0.0, 0.22


def rise_reading(diff: dict, paper_rise: float = PAPER_RISE) -> str:
    """How a T - greedy difference reads against the paper's rise: `shown` (lower end above 0), `contradicted`
    (upper end below 0), `excluded` (upper end below the paper's rise: a rise of the paper's size is ruled out,
    though a smaller one is not), `neither shown nor excluded`; `not estimable` without an interval."""
    if not diff or diff.get("low") is None:
        return "not estimable"
    if diff["low"] > 0:
        return "shown"
    if diff["high"] < 0:
        return "contradicted"
    if diff["high"] < paper_rise:
        return "excluded"
    return "neither shown nor excluded"


def _reference_paragraph(rates: dict, differences: dict, datasets: list[str], hot: float, estimates: dict) -> str:
    def cell(d: str, t: float) -> str:
        return repro.interval_cell(rates.get(d, {}).get(temperature_key(t), {}).get("none"))

    def said(d: str) -> str:
        diff = differences[d]["temperature"]
        reading = rise_reading(diff)
        if reading == "not estimable":
            return f"{d}: not estimable"
        interval = f"{100 * diff['diff']:+.1f} [{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}]"
        return f"{d} {interval}: {reading}"

    corrected = [f"{d} {repro.interval_cell((estimates.get(d) or {}).get('corrected'))}" for d in datasets]
    return (
        f"Reference points of the probe paper: greedy follow-up near {100 * PAPER_GREEDY:.0f}% for most models, up "
        f"to ~{100 * PAPER_RISE:.0f}% at T=1.0 (a rise of up to {100 * PAPER_RISE:.0f} points), and task accuracy "
        "does not predict it. Here (%, 95% intervals): greedy " + ", ".join(f"{d} {cell(d, 0.0)}" for d in datasets)
        + f"; at T={hot} " + ", ".join(f"{d} {cell(d, hot)}" for d in datasets)
        + f". The rise T={hot} - greedy (points; `excluded`: the interval's upper end is below the paper's "
        f"{100 * PAPER_RISE:.0f}-point rise, so a rise of its size is ruled out here, a smaller one is not): "
        + "; ".join(said(d) for d in [*datasets, "pooled"])
        + ". The raw greedy levels sit above the paper's ~0%; the judge's false positives explain that much: "
        "corrected for its measured errors, every turn of each dataset gives " + ", ".join(corrected)
        + " (the estimates table below), at the paper's level where the interval reaches 0."
    )  # fmt: skip


def _sweep_cell(cell: dict | None, greedy: bool) -> str:
    if not cell or cell.get("rate") is None:
        return "n/a"
    n_items = cell.get("n_items") or 0
    size = f"{n_items} items, greedy" if greedy else f"{n_items} items x {cell['n'] // max(n_items, 1)}"
    return f"{repro.interval_cell(cell)} ({size})"


def sweep_table(rates: dict, datasets: list[str], temps: list[float], samples: int) -> Table:
    return Table(
        "Table 4: genuine follow-up rate by temperature (%, 95% interval clustered by item; items x turns per item; "
        f"{samples} turns per item at T > 0); no perturbation. Figures 1 and 4 draw it",
        ["dataset", *[f"T={t}" for t in temps]],
        [[d, *[_sweep_cell(rates.get(d, {}).get(temperature_key(t), {}).get("none"), float(t) == 0.0) for t in temps]]
         for d in datasets],
    )  # fmt: skip


def controls_table(rates: dict, changed: dict, differences: dict, datasets: list[str], temps: list[float]) -> Table:
    rows = []
    for d in datasets:
        for t in temps:
            cells = rates.get(d, {}).get(temperature_key(t), {})
            greedy = float(t) == 0.0
            row = [d, str(t), _sweep_cell(cells.get("none"), greedy)]
            for p in CONTROLS:
                row += [_sweep_cell(cells.get(p), greedy), _changed(changed, p, d, t),
                        effect_reading(differences[d]["controls"].get(f"{p}@{t}", {}))]  # fmt: skip
            rows.append(row + [_changed(changed, "reseed", d, t)])
    return Table(
        "Table 1: controls: genuine rate (%, 95% interval clustered by item; items x turns per item) of the base "
        "context and under "
        "each perturbation, its paired difference from the base, and % of turns that changed against the "
        "unperturbed turn of the same seed, beside the seed floor (the same context sampled with another seed "
        "changes that share of turns by itself; 0 at T=0, where the seed does not matter)",
        ["dataset", "T", "base", "truncate", "% changed", "truncate - base", "appended question", "% changed",
         "question - base", "seed floor: % changed"], rows,
    )  # fmt: skip


def _changed(changed: dict, p: str, d: str, t: float) -> str:
    c = changed.get(p, {}).get(f"{d}@{temperature_key(t)}")
    return f"{100 * c['changed']:.0f}" if c else "n/a"


def table2(rates: dict, estimates: dict, datasets: list[str]) -> Table:
    """The probe paper's Table 2 columns for the base model (the collab part adds the trained models)."""
    names = [d for d in TABLE2 if d in datasets]
    at = temperature_key(TABLE2_TEMPERATURE)

    def row(name: str, cell) -> list:
        return [name, *[repro.interval_cell(cell(d)) for d in names]]

    return Table(
        "Table 2 (base model): genuine follow-up rate of SmolLM2-135M-Instruct on the held-out sets (%, 95% "
        "intervals clustered by item); MT-Bench stands in for Coval, which is not available offline",
        ["estimate", *[TABLE2[d] for d in names]],
        [row(f"raw, T={TABLE2_TEMPERATURE}", lambda d: rates.get(d, {}).get(at, {}).get("none")),
         row("raw, every turn of the part", lambda d: estimates[d].get("raw")),
         row("judge-corrected, every turn", lambda d: estimates[d].get("corrected")),
         row("generic floor, every turn", lambda d: estimates[d].get("generic_floor"))],
    )  # fmt: skip


def accuracy_table(accuracy: dict, rows: list[dict], rates: dict, datasets: list[str], hot: float) -> Table:
    """Tables 3 and 5: answer accuracy beside the follow-up rate, and the rate split by whether the answer was
    right (unperturbed turns of every temperature)."""
    from fic.followup_summary import raw_rate

    def split(d: str, flag: bool) -> str:
        group = [r for r in rows if r["dataset"] == d and r["perturbation"] == "none" and r.get("correct") is flag]
        return repro.rate_cell(raw_rate(group)) if group else "n/a"

    return Table(
        "Tables 3 and 5: answer accuracy beside the genuine follow-up rate (%, 95% intervals clustered by item); the "
        "rate when the answer was right and wrong pools the unperturbed turns of every temperature",
        ["dataset", "answer accuracy", "follow-up T=0", f"follow-up T={hot}", "follow-up, answer right",
         "follow-up, answer wrong"],
        [[d, _accuracy(accuracy.get(d)), repro.interval_cell(rates.get(d, {}).get(temperature_key(0.0), {}).get("none")),
          repro.interval_cell(rates.get(d, {}).get(temperature_key(hot), {}).get("none")), split(d, True),
          split(d, False)] for d in datasets],
    )  # fmt: skip


def power_table(differences: dict, datasets: list[str], hot: float) -> Table:
    return Table(
        f"T={hot} against greedy: the paired difference of the unperturbed rate (points, 95% cluster-bootstrap "
        f"interval over items, p) and the minimum detectable effect ({MDE_NOTE}, 2.8 standard errors); an effect "
        "is claimed only where the interval excludes 0",
        ["dataset", f"T={hot} - T=0", "items", "minimum detectable effect (points)", "reading"],
        [[d, points(c) if c else "n/a", c.get("n_items"), _mde_cell(c),
          effect_reading(c)] for d in [*datasets, "pooled"] for c in [differences[d]["temperature"]]],
    )  # fmt: skip


def _mde_cell(cell: dict) -> str:
    if not cell or cell["diff"] is None:
        return "n/a"
    return f"{100 * cell['mde']:.0f}" if cell["mde"] else "n/a (the interval has no width)"


def failure_modes(rows: list[dict]) -> dict:
    """Label shares of the unperturbed turns of every temperature: pooled over datasets with an item-clustered
    interval, and per dataset. `{"pooled": {label: {rate, low, high, n, n_items}}, "by_dataset": {d: {label: share}}}`."""
    from fic.estimates import cluster_rate

    kept = [r for r in rows if r["perturbation"] == "none" and r.get("label")]
    labels = sorted({r["label"] for r in kept})
    items = [(r["dataset"], str(r["item_id"])) for r in kept]
    pooled = {x: cluster_rate([r["label"] == x for r in kept], items) for x in labels}
    by_dataset: dict[str, dict[str, float]] = {}
    for d in sorted({r["dataset"] for r in kept}):
        group = [r["label"] for r in kept if r["dataset"] == d]
        by_dataset[d] = {x: group.count(x) / len(group) for x in labels}
    return {"pooled": {x: {k: c[k] for k in ("rate", "low", "high", "n", "n_items")} for x, c in pooled.items()},
            "by_dataset": by_dataset}  # fmt: skip


def failure_modes_table(modes: dict, datasets: list[str]) -> Table:
    names = [d for d in datasets if d in modes["by_dataset"]]
    return Table(
        "Table 6: failure modes, pooled over datasets and temperatures (% of unperturbed turns, 95% interval "
        "clustered by item), with each dataset's share",
        ["label", "pooled", *names],
        [[x, repro.interval_cell(c), *[f"{100 * modes['by_dataset'][d].get(x, 0.0):.1f}" for d in names]]
         for x, c in modes["pooled"].items()],
    )  # fmt: skip


def _row_key(row: dict) -> tuple:
    return (row["dataset"], str(row["item_id"]), float(row["temperature"]), row["perturbation"], int(row["sample"]))


def _test_rows() -> list[dict]:
    return [r for r in repro.read_jsonl(LABELS_DIR / "labels.jsonl") if r["split"] == "test"]


def _double_rows() -> list[dict]:
    return [r for r in repro.read_jsonl(LABELS_DIR / "double.jsonl") if r["split"] == "test"]


def _judge_labels(rows: list[dict]) -> list[str]:
    """The reproduction's judge's label of each labelled turn (judged here, in its context)."""
    from fic.followup_eval import judge_turns
    from fic.judges import make_judge

    verdicts = judge_turns(make_judge(repro.JUDGE), [r["messages"] for r in rows], [[r["user_turn"]] for r in rows])
    return [v[0].label for v in verdicts]


def balanced(pairs: list[tuple], seed: int = 0) -> list[tuple]:
    """Every pair whose reference label (first element) is genuine and as many of the others, drawn at random."""
    genuine = [p for p in pairs if p[0] == "genuine_followup"]
    others = [p for p in pairs if p[0] != "genuine_followup"]
    return genuine + random.Random(seed).sample(others, min(len(genuine), len(others)))


def agreement_row(pairs: list[tuple], n_boot: int = 1000, seed: int = 0) -> dict:
    """N, genuine agreement and kappa, label agreement and kappa of `(reference label, other label, item)` pairs,
    each kappa with a 95% bootstrap interval over items (the turns of one item are not independent;
    `fic.bootstrap.item_bootstrap`, the interval of `fic.judges.agreement.binary_agreement`)."""
    from fic.bootstrap import item_bootstrap
    from fic.metrics import agreement, cohen_kappa

    if not pairs:
        return {"n": 0}

    def stats(subset: list[tuple]) -> dict:
        a, b = [p[0] for p in subset], [p[1] for p in subset]
        ga, gb = [x == "genuine_followup" for x in a], [x == "genuine_followup" for x in b]
        return {"genuine_agreement": agreement(ga, gb), "genuine_kappa": cohen_kappa(ga, gb),
                "label_agreement": agreement(a, b), "label_kappa": cohen_kappa(a, b)}  # fmt: skip

    by_item: dict = {}
    for p in pairs:
        by_item.setdefault(p[2], []).append(p)
    cells = item_bootstrap(list(by_item.values()), stats, n_boot, seed)
    out = {"n": len(pairs), "n_items": len(by_item), **{name: cell["value"] for name, cell in cells.items()}}
    for name in ("genuine_kappa", "label_kappa"):
        out[f"{name}_low"], out[f"{name}_high"] = cells[name]["low"], cells[name]["high"]
    return out


def judge_validation(test_rows: list[dict], double_rows: list[dict], judge_labels) -> dict:
    """Table 7's numbers on the labels' test split: the judge against the labels, and the second labeller against
    the first, each on a random slice (every test turn, or every double-labelled one) and a balanced one (every
    turn the reference called genuine and as many others, drawn with seed 0)."""
    judged = judge_labels(test_rows)
    judge_pairs = [(r["label"], j, (r["dataset"], str(r["item_id"]))) for r, j in zip(test_rows, judged)]
    first = {_row_key(r): r for r in test_rows}
    double_pairs = [(first[_row_key(r)]["label"], r["label"], (r["dataset"], str(r["item_id"])))
                    for r in double_rows if _row_key(r) in first]  # fmt: skip
    return {
        "judge_vs_labels": {"random": agreement_row(judge_pairs), "balanced": agreement_row(balanced(judge_pairs))},
        "labeller_vs_labeller": {"random": agreement_row(double_pairs),
                                 "balanced": agreement_row(balanced(double_pairs))},
        "split": "test", "judge": repro.JUDGE, "labels_by": repro.LABELS_BY,
    }  # fmt: skip


def judge_validation_table(validation: dict) -> Table:
    def kappa(c: dict, name: str) -> str:
        if not c.get("n"):
            return "n/a"
        return repro.few_clusters(c) or f"{c[name]:.2f} [{c[name + '_low']:.2f}, {c[name + '_high']:.2f}]"

    def agreement(c: dict, name: str) -> str:
        return "n/a" if not c.get("n") else repro.few_clusters(c) or f"{c[name]:.2f}"

    rows = []
    for who, label in (
        ("judge_vs_labels", f"judge `{repro.JUDGE}` vs labels"),
        ("labeller_vs_labeller", "second labeller vs first"),
    ):
        for slice_ in ("random", "balanced"):
            c = validation[who][slice_]
            rows.append([label, slice_, c.get("n"), c.get("n_items"),
                         agreement(c, "genuine_agreement"), kappa(c, "genuine_kappa"),
                         agreement(c, "label_agreement"), kappa(c, "label_kappa")])  # fmt: skip
    return Table(
        "Table 7: judge validation on the labels' test split (SmolLM2 turns outside every fit; labels by "
        "independent AI-agent annotators following labels/followup/GUIDELINE.md, blind): random = every test turn "
        "(every double-labelled one for the labellers), balanced = every turn the reference labelled genuine and "
        "as many others drawn at random; kappas with 95% bootstrap intervals over items",
        ["comparison", "slice", "N", "items", "genuine agreement", "genuine kappa", "label agreement", "label kappa"],
        rows,
    )  # fmt: skip


def estimates_table(estimates: dict) -> Table:
    return Table(
        "Estimates per dataset, pooled over every turn of the part: raw (item-clustered), judge-corrected "
        "(Rogan-Gladen) and the generic floor (share still judged genuine after the answer is swapped for another "
        "item's), % with 95% intervals",
        ["dataset", "raw", "corrected", "generic floor", "turns", "items"],
        [[d, repro.interval_cell(e.get("raw")), repro.interval_cell(e.get("corrected")),
          repro.interval_cell(e.get("generic_floor")), (e.get("raw") or {}).get("n"),
          (e.get("raw") or {}).get("n_items")] for d, e in estimates.items()],
    )  # fmt: skip


def draw_figure(path: Path, rates: dict, datasets: list[str], temps: list[float]) -> None:
    """Figures 1 and 4: the unperturbed genuine rate against temperature, one line per dataset, with its 95%
    item-clustered interval as error bars (a PNG, matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, d in enumerate(datasets):
        cells = [(float(t), rates.get(d, {}).get(temperature_key(t), {}).get("none")) for t in temps]
        cells = [(t + 0.01 * (k - len(datasets) / 2), c) for t, c in cells if c and c.get("rate") is not None]
        if not cells:
            continue
        x = [t for t, _ in cells]
        y = [100 * c["rate"] for _, c in cells]
        err = [[100 * (c["rate"] - c["low"]) for _, c in cells], [100 * (c["high"] - c["rate"]) for _, c in cells]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=d)
    ax.set_xlabel("user-turn sampling temperature")
    ax.set_ylabel("genuine follow-up rate (%)")
    ax.set_title("Genuine follow-up rate vs temperature (95% intervals)")
    ax.set_xticks([float(t) for t in temps])
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _accuracy(cell: dict | None) -> str:
    if not cell or cell.get("accuracy") is None:
        return "n/a (no checker)"
    return f"{100 * cell['accuracy']:.1f}% of {cell['n']}"


def _pct(rate) -> str:
    return "n/a" if rate is None else f"{100 * rate:.0f}%"

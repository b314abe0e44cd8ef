"""Part 1 of `make reproduce`: the user-turn probe on SmolLM2-135M-Instruct (the probe paper's Tables 1, 2 (base
model), 3/5, 4, 6, 7 and Figures 1/4).

`run` makes two `fic probe` runs in one folder (the temperature sweep, then the controls at `control_temperatures`;
a rerun extends the folder and skips what is done), reads its `summary.json` and `samples.jsonl`, and builds the
section from `probe_readings` (paired differences and the claims they support), `probe_tables` (tables, figure) and
`probe_judge` (Table 7). The sizes are `reproduce/settings/probe.json`; `estimated_minutes` prices them from measured
per-unit times. Why these sizes: "How the probe part is set up" in `reproduce/results/README.md`.
"""

from __future__ import annotations

from pathlib import Path

import probe_judge
import repro
from probe_readings import (
    CONTROLS,
    PAPER_RISE,
    differences,
    judge_paragraph,
    points,
    reference_paragraph,
    rise_reading,
    temperature_paragraph,
)
from probe_tables import (
    FIGURE,
    accuracy_table,
    controls_table,
    draw_figure,
    estimates_table,
    failure_modes,
    failure_modes_table,
    power_table,
    sweep_table,
    table2,
)
from repro import Section, Target

TITLE = "User-turn probe (probe paper, Tables 1, 2 (base model), 3/5, 4, 6, 7 and Figures 1/4)"
SCALE = repro.scale()
SETTINGS = repro.part_settings("probe")
# Speed only (the samples do not depend on the batching): up to 16 prompts per batch, longest first, at most 8192
# padded prompt tokens per batch, so HealthBench's 1,600-token conversations do not pad the short prompts.
BATCHING = {"cpu": ["--batch-size", 16, "--max-batch-tokens", 8192], "gpu": ["--batch-size", 64]}[SCALE]
# Measured per-unit wall times on the 2-core machine (reproduce/results/README.md, "How the probe part is set up"):
# seconds per greedy 128-token answer and per generated 48-token user turn (generation plus both judgements).
# IFBench's turn time is IFEval's (same schema, its own 20-item run gave 0.39 s with 2 samples per prompt); its answer
# time is its own.
TIMINGS = {
    "gsm8k": {"answer": 2.90, "turn": 0.727}, "mt_bench": {"answer": 1.33, "turn": 0.730},
    "healthbench": {"answer": 2.93, "turn": 1.110}, "ifeval": {"answer": 0.73, "turn": 0.433},
    "ifbench": {"answer": 0.93, "turn": 0.433},
}  # fmt: skip
FIXED_SECONDS = 40  # two model loads, the summaries and judging the labels' 180 test turns for Table 7
AVAILABLE = {"healthbench": 30}  # datasets with fewer items than a limit may ask for


def estimated_minutes(settings: dict) -> float:
    """Wall time of the part at `settings` on 2 CPU cores, from `TIMINGS`. One unit is one generate row per item: a
    job at T=0 is 1 unit (the backend decodes one greedy row and copies it `samples` times), at T > 0 `samples`
    units; each temperature has the unperturbed job, and at a control temperature also the controls and their seed
    floor."""
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
    """Probe (or resume) into `out/probe`, then build the section from its summary and samples."""
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
    diffs = differences(rows, datasets, hot, s["control_temperatures"])
    summary["differences"] = diffs
    validation = probe_judge.judge_validation(
        probe_judge.labelled_test_rows(), probe_judge.double_labelled_rows(), probe_judge.judge_labels
    )
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
        controls_table(rates, changed, diffs, datasets, s["control_temperatures"]),
        table2(rates, details["estimates"], datasets),
        accuracy_table(probe["accuracy"], rows, rates, datasets, hot),
        sweep_table(rates, datasets, temps, s["samples"]),
        power_table(diffs, datasets, hot),
        failure_modes_table(modes, datasets),
        probe_judge.judge_validation_table(validation),
        estimates_table(details["estimates"]),
    ]
    pooled = diffs["pooled"]["temperature"]
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
            temperature_paragraph(diffs, datasets, hot),
            judge_paragraph(judge, probe),
            reference_paragraph(rates, diffs, datasets, hot, details["estimates"]),
            f"Sizes: {s['limit']} items per dataset (HealthBench has 30), one greedy turn per item at T=0 and "
            f"{s['samples']} per item at every T > 0. At T=0 the {s['samples']} samples of an item are one greedy turn "
            "copied, so a pooled share weighs every temperature alike while the item-clustered intervals count the "
            "greedy turn once. Coval (`openai/coval`) is not available offline: MT-Bench stands in for it in Table 2. "
            "IFEval (in probe_collab_v2) and the controls at T=1.0 were dropped for time (what each size costs: "
            'reproduce/results/README.md, "How the probe part is set up"); SCALE=gpu runs both.',
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

"""The probe part of `make reproduce` without a model: its tables, figure and summary.json entries from made-up
judged `fic probe` rows (`fic probe` itself is tested in test_probe.py). Checks the probe paper's numbering, the
`probe.differences` entries ({diff, low, high, p} of T=1 against greedy per dataset), the sentence that states an
effect only where its interval excludes 0 and otherwise gives the minimum detectable effect, Table 7 on the labels'
test split (its genuine kappa interval the core's), the time estimate of the default sizes, the settings read from
reproduce/settings/probe.json, and the one-way imports between the part's modules."""

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import crosswalk  # noqa: E402
import probe_judge  # noqa: E402
import probe_readings  # noqa: E402
import probe_tables  # noqa: E402
import repro  # noqa: E402

JUDGE = {"kind": "learned", "name": "learned", "version": "v", "n": 180, "kappa": 0.51, "false_positive_rate": 0.02}


@pytest.fixture
def part(monkeypatch):
    monkeypatch.delenv("SCALE", raising=False)
    sys.modules.pop("probe", None)
    return importlib.import_module("probe")


def _genuine(dataset: str, item: int, temp: float, pert: str) -> bool:
    """gsm8k: every item genuine greedy, none at T > 0 (a clear drop); mt_bench: items 0, 1 genuine greedy and items
    1, 2 at T > 0 (no change on average, but the items move); the rest: item 0 always (no change at all). No control
    turn is genuine."""
    if pert != "none":
        return False
    if dataset == "gsm8k":
        return temp == 0.0
    if dataset == "mt_bench":
        return item in ((0, 1) if temp == 0.0 else (1, 2))
    return item == 0


def _rows(part, n_items: int = 10) -> list[dict]:
    s = part.SETTINGS
    rows = []
    cells = [(t, "none") for t in s["temperatures"]]
    cells += [(t, p) for t in s["control_temperatures"] for p in (*probe_readings.CONTROLS, "reseed")]
    for dataset in s["datasets"]:
        for item in range(n_items):
            for temp, pert in cells:
                genuine = _genuine(dataset, item, temp, pert)
                for sample in range(s["samples"]):
                    text = "same" if pert in ("none", "reseed") else f"turn {item} {pert}"
                    rows.append({"dataset": dataset, "item_id": str(item), "temperature": temp, "perturbation": pert,
                                 "sample": sample, "user_turn": text, "genuine": genuine,
                                 "label": "genuine_followup" if genuine else "previous_turn_restate",
                                 "correct": (item % 2 == 0) if dataset == "gsm8k" else None})  # fmt: skip
    return rows


def _identity_judge(rows: list[dict]) -> list[str]:
    return [r["label"] for r in rows]


@pytest.fixture
def section(part, tmp_path, monkeypatch):
    from fic.followup_summary import summarize

    rows = _rows(part)
    summary = summarize(rows, {"gsm8k": {"accuracy": 0.5, "n": 8}})
    commands = []

    def fake_fic(args, log):
        commands.append(args)
        (tmp_path / "probe").mkdir(exist_ok=True)
        (tmp_path / "probe" / "summary.json").write_text(json.dumps(summary))
        (tmp_path / "probe" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(repro, "fic", fake_fic)
    monkeypatch.setattr(repro, "judge_about", lambda: JUDGE)
    monkeypatch.setattr(
        probe_judge, "judge_labels", _identity_judge
    )  # no judge model: the judge agrees with the labels
    result = part.run(tmp_path)
    result.commands = commands
    return result


def test_the_probe_commands(part, section):
    s = part.SETTINGS
    commands = section.commands
    assert [a[a.index("--perturbations") + 1] for a in commands] == ["none", "none,truncate,question"]
    assert all("--outside-judge-fit" in a for a in commands)  # nothing reported was in the judge's fit
    assert all(a[a.index("--samples") + 1] >= 3 for a in commands)  # at least 3 turns per item at T > 0
    specs = commands[0][commands[0].index("--datasets") + 1]
    assert "ifbench:" in specs and specs.endswith("ifbench/IFBench_test.jsonl")
    assert s["scale"] == "cpu" and s["control_temperatures"] == [0.0]


def test_tables_carry_the_papers_numbers(part, section):
    captions = [t.caption for t in section.tables]
    for prefix in ("Table 1: controls", "Table 2 (base model)", "Tables 3 and 5", "Table 4: genuine follow-up rate",
                   "Table 6: failure modes, pooled", "Table 7: judge validation"):  # fmt: skip
        assert sum(c.startswith(prefix) for c in captions) == 1, prefix
    figure = next(p for p in section.text if p.startswith("**Figures 1 and 4"))
    assert f"![Figures 1 and 4](probe/{probe_tables.FIGURE})" in figure
    # every probe row of the crosswalk names a caption (or the figure) this part writes
    named = [
        e["fic_table"] for e in crosswalk.CROSSWALK if e["part"] == "probe" and e["fic_table"]
    ]  # None: not reproduced
    assert named and all(any(c.startswith(n) for c in [*captions, figure.strip("*")]) for n in named)
    table2 = next(t for t in section.tables if t.caption.startswith("Table 2"))
    assert table2.columns == ["estimate", "HealthBench (held out)", "MT-Bench (stands in for Coval)", "IFBench"]
    assert "Coval, which is not available offline" in table2.caption


def test_table_contents(part, section):
    tables = {t.caption.split(":")[0]: t for t in section.tables}
    controls = tables["Table 1"]
    assert controls.rows[0][:2] == ["gsm8k", "0.0"] and controls.rows[0][4] == "100" and controls.rows[0][-1] == "0"
    assert controls.rows[0][2].endswith("(10 items, greedy)")  # the greedy copies count once
    sweep = tables["Table 4"]
    assert sweep.rows[0][1].endswith("(10 items, greedy)") and sweep.rows[0][2].endswith("(10 items x 3)")
    accuracy = tables["Tables 3 and 5"]
    assert accuracy.rows[0][1] == "50.0% of 8" and accuracy.rows[1][1] == "n/a (no checker)"
    modes = tables["Table 6"]
    assert [r[0] for r in modes.rows] == ["genuine_followup", "previous_turn_restate"]
    assert modes.columns == ["label", "pooled", *part.SETTINGS["datasets"]]
    judge = tables["Table 7"]
    assert judge.columns == ["comparison", "slice", "N", "items", "genuine agreement", "genuine kappa",
                             "label agreement", "label kappa"]  # fmt: skip
    assert [r[1] for r in judge.rows] == ["random", "balanced", "random", "balanced"]
    out = Path(section.commands[0][section.commands[0].index("--out") + 1]).parent
    assert (out / probe_tables.FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_differences_and_the_claims_that_follow_them(part, section):
    diffs = section.summary["differences"]
    assert set(diffs) == {*part.SETTINGS["datasets"], "pooled"}
    for entry in diffs.values():
        assert {"diff", "low", "high", "p"} <= set(entry["temperature"])
    gsm8k, mt_bench, healthbench = (diffs[d]["temperature"] for d in ("gsm8k", "mt_bench", "healthbench"))
    assert gsm8k["diff"] == -1.0 and gsm8k["detectable"] and gsm8k["high"] < 0
    assert mt_bench["diff"] == 0.0 and mt_bench["low"] < 0 < mt_bench["high"] and not mt_bench["detectable"]
    assert mt_bench["mde"] == pytest.approx(2.8 * (mt_bench["high"] - mt_bench["low"]) / 3.92, rel=1e-3)
    assert healthbench["low"] == healthbench["high"] == 0.0 and healthbench["mde"] is None
    assert diffs["gsm8k"]["controls"]["truncate@0.0"]["diff"] == -1.0
    paragraph = next(p for p in section.text if p.startswith("T=1.0 against greedy"))
    assert "gsm8k: -100.0 points" in paragraph and "gsm8k: no detectable" not in paragraph
    assert (f"mt_bench: no detectable effect at this size (+0.0 points [{100 * mt_bench['low']:+.1f}, "
            f"{100 * mt_bench['high']:+.1f}], p=1.00; minimum detectable effect {100 * mt_bench['mde']:.0f} points "
            "at 80% power, two-sided alpha 0.05)") in paragraph  # fmt: skip
    assert "healthbench: no detectable effect at this size" in paragraph
    reference = next(p for p in section.text if p.startswith("Reference points"))
    assert "gsm8k -100.0 [" in reference and reference.split("gsm8k -100.0 [")[1].split(";")[0].endswith(
        ": contradicted"
    )
    assert ": shown" not in reference and "healthbench +0.0 [+0.0, +0.0]: excluded" in reference
    target = next(t for t in section.targets if "direction" in t.name)
    assert not target.met  # read on the pooled interval, which lies below 0 here


def test_a_difference_on_under_ten_items_is_not_estimable(part):
    datasets = part.SETTINGS["datasets"]
    s = part.SETTINGS
    diffs = probe_readings.differences(
        _rows(part, n_items=8), datasets, s["temperatures"][-1], s["control_temperatures"]
    )
    gsm8k = diffs["gsm8k"]["temperature"]
    assert (gsm8k["diff"], gsm8k["low"], gsm8k["mde"], gsm8k["detectable"]) == (None, None, None, False)
    assert probe_readings.effect_reading(gsm8k) == "not estimable: 8 clusters (< 10)" == probe_readings.points(gsm8k)
    assert probe_tables.mde_cell(gsm8k) == "n/a"
    assert diffs["pooled"]["temperature"]["n_items"] == 8 * len(datasets)  # pooled over datasets: enough items


def test_summary_keys(part, section):
    cell = section.summary["gsm8k"]["1.0"]["none"]
    assert cell["rate"] == 0.0 and cell["n"] == 30 and cell["n_items"] == 10
    assert set(section.summary["gsm8k"]["0.0"]) == {"none", "truncate", "question", "reseed"}
    details = section.extra["probe_details"]
    assert details["percent_changed"]["healthbench"]["truncate"]["0.0"]["changed"] == 1.0
    assert details["percent_changed"]["healthbench"]["reseed"]["0.0"]["changed"] == 0.0
    assert set(details["failure_modes"]["pooled"]["genuine_followup"]) == {"rate", "low", "high", "n", "n_items"}
    validation = section.summary["judge_validation"]
    assert validation["split"] == "test"
    judge = validation["judge_vs_labels"]
    assert judge["random"]["n"] == 180 and judge["random"]["genuine_kappa"] == 1.0
    genuine = judge["balanced"]["n"] // 2
    assert judge["balanced"]["n"] == 2 * genuine and genuine > 0


def test_judge_validation_on_the_labels_test_split():
    """The real labels: the 27 double-labelled test turns agree on every genuine decision; the balanced slice holds
    each genuine turn and as many others. A judge that calls everything a failure has kappa 0."""
    test, double = probe_judge.labelled_test_rows(), probe_judge.double_labelled_rows()
    assert len(test) == 180 and all(r["split"] == "test" for r in test) and len(double) == 27
    out = probe_judge.judge_validation(test, double, lambda rows: ["new_task_prompt"] * len(rows))
    labellers = out["labeller_vs_labeller"]
    assert labellers["random"]["n"] == 27 and labellers["random"]["genuine_agreement"] == 1.0
    assert labellers["random"]["label_agreement"] == pytest.approx(23 / 27)
    assert labellers["balanced"]["n"] == 10
    judge = out["judge_vs_labels"]
    assert judge["random"]["genuine_kappa"] == 0.0 and judge["balanced"]["genuine_agreement"] == 0.5
    assert judge["random"]["genuine_kappa_low"] <= 0.0 <= judge["random"]["genuine_kappa_high"]


def test_time_estimate_and_scales(part, monkeypatch):
    """The default sizes fit the part's 14 minutes by the measured per-unit timings; SCALE=gpu is a larger set."""
    assert part.estimated_minutes(part.SETTINGS) == pytest.approx(10.2, abs=0.05)
    assert part.estimated_minutes(part.SETTINGS) <= 14
    before = {**part.SETTINGS, "limit": 25, "temperatures": [0.0, 0.3, 0.7, 1.0]}  # the sizes of the 2026-12-02 run
    assert part.estimated_minutes(before) == pytest.approx(20.3, abs=0.05)
    monkeypatch.setenv("SCALE", "gpu")
    sys.modules.pop("probe", None)
    gpu = importlib.import_module("probe")
    assert gpu.SETTINGS["scale"] == "gpu" and "ifeval" in gpu.SETTINGS["datasets"]
    assert gpu.SETTINGS["samples"] >= 3 and gpu.SETTINGS["control_temperatures"] == [0.0, 1.0]
    assert gpu.SETTINGS["temperatures"] == [0.0, 0.3, 0.7, 1.0]
    monkeypatch.setenv("SCALE", "tpu")
    with pytest.raises(ValueError, match="SCALE='tpu'"):
        repro.scale()
    sys.modules.pop("probe", None)


def test_the_rise_is_read_against_the_papers_size():
    """An interval below the paper's +22-point rise excludes it (the committed pooled -9.4 [-20.0, +1.1] does);
    a wide one neither shows nor excludes it; below 0 contradicts, above 0 shows."""
    read = probe_readings.rise_reading
    assert read({"diff": -0.094, "low": -0.200, "high": 0.011}) == "excluded"
    assert read({"diff": 0.05, "low": -0.10, "high": 0.30}) == "neither shown nor excluded"
    assert read({"diff": -0.2, "low": -0.3, "high": -0.05}) == "contradicted"
    assert read({"diff": 0.2, "low": 0.05, "high": 0.35}) == "shown"
    assert read({"diff": None, "low": None, "high": None, "note": "not estimable"}) == "not estimable"


def test_genuine_kappa_interval_is_the_cores():
    """Table 7's genuine kappa and its interval are `fic.judges.agreement.binary_agreement`'s; the label kappa's
    interval comes from the same item resamples (`fic.bootstrap.item_bootstrap`)."""
    import random

    from fic.bootstrap import item_bootstrap
    from fic.judges.agreement import binary_agreement
    from fic.metrics import cohen_kappa

    rng = random.Random(7)
    labels = ["genuine_followup", "new_task_prompt", "previous_turn_restate", "meta_planning"]
    pairs = []
    for _ in range(120):
        a = rng.choice(labels)
        pairs.append((a, a if rng.random() < 0.6 else rng.choice(labels), ("d", str(rng.randrange(25)))))
    row = probe_judge.agreement_row(pairs, 300, seed=4)
    genuine = [(a == "genuine_followup", b == "genuine_followup") for a, b, _ in pairs]
    core = binary_agreement([a for a, _ in genuine], [b for _, b in genuine], [p[2] for p in pairs], 300, 4)
    assert (row["genuine_kappa"], row["genuine_kappa_low"], row["genuine_kappa_high"]) == tuple(core["kappa"].values())
    groups: dict = {}
    for p in pairs:
        groups.setdefault(p[2], []).append(p)
    label = item_bootstrap(list(groups.values()), lambda rs: {"k": cohen_kappa([r[0] for r in rs], [r[1] for r in rs])},
                           300, 4)["k"]  # fmt: skip
    assert (row["label_kappa"], row["label_kappa_low"], row["label_kappa_high"]) == tuple(label.values())
    assert row["n"] == 120 and row["n_items"] == len(groups) and probe_judge.agreement_row([]) == {"n": 0}


def test_settings_are_data(part, monkeypatch):
    """SETTINGS is reproduce/settings/probe.json at the current SCALE, plus the shared model and judge; the
    crosswalk's probe rows read the same file."""
    data = repro.load_settings("probe", "cpu")
    s = part.SETTINGS
    assert {k: s[k] for k in data} == data
    assert (s["model"], s["judge"], s["scale"]) == (repro.MODEL, repro.JUDGE, "cpu") and s["judge_version"]
    differs = next(e["differs"] for e in crosswalk.CROSSWALK if e["item"] == "Table 4")
    assert f"{data['limit']} items per dataset" in differs and f"{data['samples']} per item" in differs


def test_imports_run_one_way():
    """probe -> probe_tables -> probe_readings, probe -> probe_judge; no module imports the runner or a private name
    of another."""
    import ast

    allowed = {"probe_readings": set(), "probe_judge": set(), "probe_tables": {"probe_readings"},
               "probe": {"probe_readings", "probe_tables", "probe_judge"}}  # fmt: skip
    for name, may in allowed.items():
        tree = ast.parse((ROOT / "reproduce" / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = {(a.name, None) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                found = {(node.module, a.name) for a in node.names}
            else:
                continue
            for module, imported in found:
                if module in allowed:
                    assert module in may, f"{name} imports {module}"
                    assert not (imported or "").startswith("_"), f"{name} imports {module}.{imported}"

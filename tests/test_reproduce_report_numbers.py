"""No number under 10 clusters in the reproduction's report (issue 46 item 8): `reproduce/report_check.py` against
made-up summaries and reports written with the part reports' own formatting helpers, its command line, and the
committed `reproduce/results/`. Also the judge-corrected rate, which now carries its raw rate's item count."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import clarify_report  # noqa: E402
import probe_readings  # noqa: E402
import repro  # noqa: E402
import vasd_report  # noqa: E402
from report_check import few_cluster_numbers  # noqa: E402

RAW = {"rate": 0.3611, "low": 0.1689, "high": 0.6113, "n": 36, "n_items": 9}  # 9 contexts: not estimable
BIG = {"rate": 0.2, "low": 0.105, "high": 0.348, "n": 40, "n_items": 40}
DIFF = {"diff": 0.034, "low": -0.052, "high": 0.121, "p": 0.41, "n_items": 6, "detectable": False}
KAPPA = {"label_kappa": 0.846, "label_kappa_low": 0.4806, "label_kappa_high": 1.0, "n": 10, "n_items": 6}
AUROC = {"auroc": 0.71, "low": 0.55, "high": 0.88, "n": 8, "n_positive": 3}  # 8 rows: at most 8 items
RECOVERY = {"estimate": 0.912, "low": 0.804, "high": 0.991, "n_items": 5}
SUMMARY = {
    "collab": {"healthbench": {"raw": RAW, "corrected": {"rate": 0.6, "low": 0.04, "high": 1.0}}, "big": BIG},
    "probe": {"diff": DIFF, "balanced": KAPPA},
    "clarify": {"auroc": AUROC},
    "vasd": {"recovery": RECOVERY},
}


def printed(cell: dict) -> str:
    """What a part report printed of `cell` before the few-cluster rule: its interval, the count left out."""
    return repro.interval_cell({k: v for k, v in cell.items() if k != "n_items"})


def test_finds_few_cluster_intervals_in_every_format():
    report = "\n".join([
        f"| HealthBench | {printed(RAW)} | {printed(SUMMARY['collab']['healthbench']['corrected'])} |",
        f"SFT moved it by {probe_readings.points(DIFF)}.",
        f"| balanced | 0.90 | {KAPPA['label_kappa']:.2f} [{KAPPA['label_kappa_low']:.2f}, "
        f"{KAPPA['label_kappa_high']:.2f}] |",
        f"AUROC {clarify_report._auroc_cell(AUROC)}; recovery {vasd_report._recovery_cell(RECOVERY)}.",
        f"| MT-Bench | {printed(BIG)} |",
    ])  # fmt: skip
    assert few_cluster_numbers(SUMMARY, report) == [
        "clarify/auroc: '0.71 [0.55, 0.88]' (8 clusters)",
        "collab/healthbench/corrected: '60.0 [4.0, 100.0]' (9 clusters)",  # the raw rate's 9 contexts
        "collab/healthbench/raw: '36.1 [16.9, 61.1]' (9 clusters)",
        "probe/balanced/label_kappa: '0.85 [0.48, 1.00]' (6 clusters)",
        "probe/diff: '+3.4 points [-5.2, +12.1]' (6 clusters)",
        "vasd/recovery: '0.912 [0.804, 0.991]' (5 clusters)",
    ]


def test_passes_a_report_that_says_not_estimable():
    cells = [repro.interval_cell(RAW), repro.rate_cell(RAW), repro.few_clusters(DIFF), repro.few_clusters(KAPPA)]
    assert cells[0] == cells[1] == "not estimable: 9 clusters (< 10)"
    report = " | ".join([*cells, repro.interval_cell(BIG), repro.rate_cell(BIG)])
    assert few_cluster_numbers(SUMMARY, report) == []


def test_a_figure_on_enough_clusters_is_not_flagged():
    assert few_cluster_numbers(SUMMARY, f"MT-Bench {printed(BIG)}, {repro.rate_cell(BIG)}") == []
    # the same figure printed for an estimable estimate and a few-cluster one: the report may mean the former
    twin = {"a": BIG, "b": {**BIG, "n_items": 4}}
    assert few_cluster_numbers(twin, printed(BIG)) == []
    assert few_cluster_numbers({"b": {**BIG, "n_items": 4}}, printed(BIG)) == ["b: '20.0 [10.5, 34.8]' (4 clusters)"]


def test_corrected_rate_carries_the_raw_items():
    est = {
        "raw": RAW,
        "corrected": {"rate": 0.6, "low": 0.04, "high": 1.0},
        "corrected_note": "",
        "generic_floor": RAW,
    }
    kept = repro.estimate(est)
    assert kept["corrected"]["n_items"] == 9
    assert repro.interval_cell(kept["corrected"]) == "not estimable: 9 clusters (< 10)"
    on_enough = repro.estimate({**est, "raw": BIG})["corrected"]
    assert repro.interval_cell(on_enough) == "60.0 [4.0, 100.0]"
    own = repro.estimate({**est, "corrected": {**est["corrected"], "n_items": 7}})["corrected"]
    assert own["n_items"] == 7  # a count of its own wins
    assert repro.estimate({**est, "corrected": None})["corrected"] is None


def test_command_line(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    (tmp_path / "report.md").write_text(f"raw {printed(RAW)}")
    run = lambda: subprocess.run([sys.executable, str(ROOT / "reproduce" / "report_check.py"), str(tmp_path)],  # noqa: E731
                                 capture_output=True, text=True)  # fmt: skip
    out = run()
    assert out.returncode == 1 and "report.md: collab/healthbench/raw: '36.1 [16.9, 61.1]'" in out.stdout
    (tmp_path / "report.md").write_text(f"raw {repro.interval_cell(RAW)}")
    out = run()
    assert out.returncode == 0 and "no figure under 10 clusters" in out.stdout


def test_committed_report_prints_no_number_under_10_clusters():
    results = ROOT / "reproduce" / "results"
    summary = json.loads((results / "summary.json").read_text())
    for report in ("report.md", "report.html"):
        assert few_cluster_numbers(summary, (results / report).read_text()) == [], report


def test_bag_accuracy_under_10_answered_items_is_not_estimable():
    import clarify

    acc = {"rate": 0.5, "low": 0.2, "high": 0.8, "n": 8, "n_items": 8, "design_effect": 1.0}
    summary = {"accuracy": 0.5, "accuracy_interval": acc, "answered": 8, "correct": 4, "abstained": 2, "n": 10,
               "accuracy_all_items": 0.4, "accuracy_any_intent": 0.5, "routing": {},
               "faithfulness": {"auroc_entropy_not_direct": None, "entropy_mean": 1.0}}  # fmt: skip
    entry = clarify.bag_entry(summary)
    assert entry["n_items"] == 8
    assert clarify_report._accuracy_cell(entry) == "not estimable: 8 clusters (< 10) (4/8)"
    on_ten = clarify.bag_entry({**summary, "accuracy_interval": {**acc, "n_items": 10}})
    assert clarify_report._accuracy_cell(on_ten) == "50.0 [20.0, 80.0] (4/8)"

"""`make reproduce`'s harness without models: parts resume and are refused with other settings, a failed part is
reported and the others still are, and summary.json / report.md / report.html hold every part's tables. The probe
part's own tables are tested in test_reproduce_probe.py."""

import json
import sys
import types
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))

import crosswalk  # noqa: E402
import repro  # noqa: E402
import run as reproduce  # noqa: E402
from repro import Section, Table, Target  # noqa: E402


@pytest.fixture
def fake_parts(monkeypatch):
    """Replace the four parts by cheap modules that count their runs; `fail` makes one raise a FicError."""
    calls = {name: 0 for name in reproduce.PARTS}
    fail: set[str] = set()

    def make(name):
        module = types.ModuleType(name)
        module.TITLE, module.SETTINGS = f"Part {name}", {"size": 1}

        def run(out):
            calls[name] += 1
            if name in fail:
                raise repro.StepError(f"{name} broke")
            return Section(summary={"value": 0.5}, about={"model": "m"}, targets=[Target("t", ">= 0.4", "0.5", True)],
                           tables=[Table("a | table", ["x", "y"], [["1", 0.25]])], text=["**done** `x`"],
                           extra={f"{name}_details": {"k": 1}})  # fmt: skip

        module.run = run
        return module

    for name in reproduce.PARTS:
        monkeypatch.setitem(sys.modules, name, make(name))
    monkeypatch.setattr(reproduce, "judge_about", lambda: {"kind": "learned", "name": "learned", "version": "v",
                        "n": 180, "kappa": 0.51, "false_positive_rate": 0.02})  # fmt: skip
    monkeypatch.setattr("report.judge_line", lambda judge: "judge line")

    def measure():  # the reference step loads SmolLM2; here a made-up speed that counts its calls
        measure.calls += 1
        return {"reference": "reference step", "step_seconds": 4.2, "steps": [6.0, 4.2, 4.1, 4.3], "cpus": 2}

    measure.calls = 0
    monkeypatch.setattr(reproduce.speed, "measure", measure)
    return calls, fail


def test_machine_speed_is_measured_once_per_folder_and_reported(tmp_path, fake_parts):
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe"]) == 0
    assert reproduce.main(["--out", str(tmp_path), "--parts", "collab"]) == 0  # a resumed folder keeps its first speed
    assert reproduce.speed.measure.calls == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["machine"]["step_seconds"] == 4.2
    assert "Machine speed at the start: 4.2 s per reference step" in (tmp_path / "report.md").read_text()


def test_parts_run_once_and_the_report_holds_them(tmp_path, fake_parts):
    calls, _ = fake_parts
    assert reproduce.main(["--out", str(tmp_path)]) == 0
    assert reproduce.main(["--out", str(tmp_path)]) == 0  # finished parts are reused, not run again
    assert all(n == 1 for n in calls.values())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {name: summary[name] for name in reproduce.PARTS} == {name: {"value": 0.5} for name in reproduce.PARTS}
    assert summary["parts_missing"] == [] and summary["judge"]["kappa"] == 0.51
    assert summary["probe_details"] == {"k": 1}  # a part's extra entries sit beside its own
    assert summary["minutes"] == pytest.approx(sum(summary["minutes_per_part"].values()))
    assert summary["crosswalk"] == crosswalk.crosswalk() and summary["crosswalk"][0]["item"] == "Table 1"
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.count("| 1 | 0.250 |") == 4 and "a | table" in markdown
    assert markdown.index("## Crosswalk") < markdown.index("## Part probe")  # the crosswalk comes first
    assert "| probe paper | Table 1 |" in markdown and "| Table 1: controls |" in markdown
    html = (tmp_path / "report.html").read_text()
    assert html.count("<td>0.250</td>") == 4 and "<b>done</b> <code>x</code>" in html
    assert "<td>Table 1: controls</td>" in html
    assert reproduce.main(["--out", str(tmp_path), "--redo", "vasd"]) == 0
    assert calls["vasd"] == 2 and calls["probe"] == 1


def test_one_part_alone_and_a_failing_part(tmp_path, fake_parts, capsys):
    calls, fail = fake_parts
    fail.add("collab")
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe,collab"]) == 1
    assert "parts failed: collab" in capsys.readouterr().err
    assert calls == {"probe": 1, "collab": 1, "vasd": 0, "clarify": 0}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["parts_missing"] == ["collab", "vasd", "clarify"] and "probe" in summary
    assert (tmp_path / "collab" / "elapsed.json").exists()  # an interrupted part keeps its time so far
    fail.clear()
    assert reproduce.main(["--out", str(tmp_path), "--parts", "collab"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "probe" in summary and "collab" in summary  # the report covers parts finished in earlier runs


def test_another_pass_of_a_finished_part_adds_its_time(tmp_path, fake_parts):
    """Removing a finished part's section.json (e.g. to pick up labels) runs it again; `minutes` stays its total."""
    calls, _ = fake_parts
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe"]) == 0
    first = json.loads((tmp_path / "probe" / "section.json").read_text())["minutes"]
    assert json.loads((tmp_path / "probe" / "elapsed.json").read_text())["minutes"] == pytest.approx(first, abs=0.01)
    (tmp_path / "probe" / "elapsed.json").write_text(json.dumps({"minutes": 40.0}))  # as if the first pass took 40
    (tmp_path / "probe" / "section.json").unlink()
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe"]) == 0
    assert calls["probe"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["minutes_per_part"]["probe"] >= 40.0


def test_a_part_that_crashes_keeps_its_minutes(tmp_path, fake_parts, monkeypatch):
    """A bug (here an ImportError, as a module edited under a running pass gave) ends the run, but the part's wall
    time so far is kept, so the pass that finishes it reports the part's total."""

    def crash(out):
        raise ImportError("cannot import name 'x'")

    monkeypatch.setattr(sys.modules["collab"], "run", crash)
    with pytest.raises(ImportError):
        reproduce.main(["--out", str(tmp_path), "--parts", "collab"])
    assert (tmp_path / "collab" / "elapsed.json").exists()


def test_a_part_folder_made_with_other_settings_is_refused(tmp_path, fake_parts, capsys):
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe"]) == 0
    sys.modules["probe"].SETTINGS = {"size": 2}
    assert reproduce.main(["--out", str(tmp_path), "--parts", "probe"]) == 1
    err = capsys.readouterr().err
    assert "probe failed" in err and "size" in err
    assert reproduce.main(["--out", str(tmp_path), "--parts", "nope"]) == 1
    assert "nope" in capsys.readouterr().err


def test_the_crosswalk_names_tables_the_parts_write():
    """Every crosswalk row names a part, and its fic table is a caption that part's modules write (None: missing,
    and said so in `differs`)."""
    items = {(e["paper"], e["item"]) for e in crosswalk.CROSSWALK}
    assert len(items) == len(crosswalk.CROSSWALK)
    assert {("probe paper", "Table 1"), ("probe paper", "Table 4"), ("probe paper", "Table 2")} <= items
    for entry in crosswalk.CROSSWALK:
        assert entry["part"] in reproduce.PARTS and entry["differs"]
        source = "".join(p.read_text() for p in sorted((ROOT / "reproduce").glob(f"{entry['part']}*.py")))
        assert entry["fic_table"] is None or entry["fic_table"] in source, entry
    coval = next(e for e in crosswalk.CROSSWALK if e["item"] == "Table 2")
    assert "Coval" in coval["differs"] and "not available offline" in coval["differs"]


def test_vasd_summary_says_how_many_rows_training_saw():
    """The trainer's `rows` is the synthetic train set's size; each VASD / control run trained on max_steps x batch
    of them, with the part's overrides applied to the recipe's values."""
    sys.modules.pop("vasd", None)
    sys.modules.pop("vasd_report", None)
    import vasd as part
    from vasd_report import _vasd_train

    values = part.SETTINGS["vasd"]["recipe_values"]
    steps = int(dict(o.split("=", 1) for o in part.SETTINGS["vasd"]["overrides"])["max_steps"])
    out = _vasd_train({"vasd-mix0.5-seed0": {"rows": 2000, "train_loss": 0.09, "wall_s": 610.7, "model": "m"}})
    assert out == {"rows_trained": steps * values["per_device_train_batch_size"], "rows_available": 2000,
                   "steps": steps, "batch_size": values["per_device_train_batch_size"],
                   "runs": {"vasd-mix0.5-seed0": {"train_loss": 0.09, "wall_s": 610.7}}}  # fmt: skip
    recipe = yaml.safe_load((ROOT / "recipes" / f"{part.SETTINGS['vasd']['recipe']}.yaml").read_text())
    assert {k: recipe[k] for k in values} == values  # the part's copy of the recipe's values is the recipe's


def test_report_html_shows_a_parts_figure_and_escapes_text():
    import report

    line = report._inline("**Figures 1 and 4** (`fig.png`): ![rate vs T](probe/fig.png) <script>")
    assert '<img alt="rate vs T" src="probe/fig.png">' in line
    assert "<b>Figures 1 and 4</b>" in line and "<code>fig.png</code>" in line and "&lt;script&gt;" in line


@pytest.mark.slow
def test_reference_step_runs_smollm2_in_a_fresh_process():
    """The real speed reference: SmolLM2 trains a few steps in its own process; the median skips the warm-up step."""
    import statistics

    machine = reproduce.speed.measure()
    assert len(machine["steps"]) == reproduce.speed.STEPS and all(s > 0 for s in machine["steps"])
    assert machine["step_seconds"] == pytest.approx(statistics.median(machine["steps"][1:]), abs=1e-3)
    assert "SmolLM2-135M" in machine["reference"] and machine["cpus"] >= 1


def test_compare_names_every_differing_leaf_and_ignores_run_facts(tmp_path):
    import compare

    committed = {"collab": {"calibrated": {"base": {"n_labels": 29, "rate": 0.276}}, "wall_s": 10},
                 "minutes": 56.0, "probe": {"rates": [0.1, 0.2]}}  # fmt: skip
    fresh = {"collab": {"calibrated": {"base": {"n_labels": 28, "rate": 0.25}}, "wall_s": 12},
             "minutes": 55.3, "probe": {"rates": [0.1, 0.2]}, "extra": 1}  # fmt: skip
    found = compare.differences(fresh, committed)
    assert found == ["collab.calibrated.base.n_labels: 29 -> 28", "collab.calibrated.base.rate: 0.276 -> 0.25",
                     "extra: only fresh"]  # fmt: skip
    assert compare.differences(committed, committed) == []
    assert compare.differences({"x": 1.0 + 1e-12}, {"x": 1.0}, tolerance=1e-9) == []
    (tmp_path / "a.json").write_text(json.dumps(fresh))
    (tmp_path / "b.json").write_text(json.dumps(committed))
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--parts", "probe"]) == 0
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1

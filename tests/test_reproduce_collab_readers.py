"""The collab part's readers' floor: real and foil blind labels of the base and trained models read into the readers'
rate, floor and floor-subtracted gain, the table, text and targets; the label scripts leave foil labels out. The part
runs on the made-up commands of tests/collab_fakes.py."""

import json
import sys
from pathlib import Path

from fic.eval.rates import turn_sha

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reproduce"))

from collab_fakes import KEY, ROOT, flip, run_part, samples, write  # noqa: E402


def _real_labels(folder: Path, flag: bool = True) -> list[dict]:
    """30 labels of the folder's first-sample turns (every item), with the context_free flag on genuine ones unless
    `flag` is false (labels made before the flag)."""
    labels = []
    for i, r in enumerate(samples(folder)[:30]):
        genuine = bool(r["genuine"]) or i % 5 == 0
        row = {k: r[k] for k in KEY} | {"genuine": genuine, "run_id": f"run-{folder.name}",
                                        "turn_sha": turn_sha(r["user_turn"])}  # fmt: skip
        if flag:
            row["context_free"] = genuine and i % 4 == 0
        labels.append(row)
    return labels


def _foil_labels(folder: Path, n: int, share: float, run_id: str | None = None) -> list[dict]:
    """`n` foil labels of turns outside the real sample (sample 2, one per item), `context_item_id` the next item of
    the same dataset; genuine on about `share` of them, every genuine foil a context-free request."""
    rows = [r for r in samples(folder) if r["sample"] == 2][:n]
    items: dict[str, dict[str, None]] = {}
    for r in samples(folder):
        items.setdefault(r["dataset"], {})[str(r["item_id"])] = None
    labels = []
    for r in rows:
        mine = list(items[r["dataset"]])
        genuine = flip(share, folder.name, r["item_id"])
        labels.append({k: r[k] for k in KEY} | {
            "foil": True, "context_item_id": mine[(mine.index(str(r["item_id"])) + 1) % len(mine)],
            "genuine": genuine, "context_free": genuine, "label": "genuine_followup" if genuine else "new_task_prompt",
            "run_id": run_id or f"run-{folder.name}", "turn_sha": turn_sha(r["user_turn"])})  # fmt: skip
    return labels


def _without_readers(section) -> dict:
    data = section.to_json()
    data["summary"] = {k: v for k, v in data["summary"].items() if k != "readers"}
    data["tables"] = [t for t in data["tables"] if not t["caption"].startswith("The readers' generic floor")]
    data["text"] = [t for t in data["text"] if "readers' floor is not measured" not in t
                    and not t.startswith("Read by blind readers with their own floor subtracted")]  # fmt: skip
    data["targets"] = [t for t in data["targets"] if "read by blind readers" not in t["name"]]
    return data


def test_the_readers_floor_from_foil_labels(tmp_path, monkeypatch):
    """Real and foil labels of the base model and trained ones (this run's files, and committed foil labels attached
    by turn hash): the readers' rate, floor and floor-subtracted reading per model and reading, and per trained model
    `reader_difference` against the base model, Holm-adjusted; the table, the text and the targets read the
    floor-subtracted gain; a foil label that does not attach is named; under 10 items, no number; without foil labels,
    one line and nothing else changes."""
    from collab_labels import NOT_MEASURED

    from fic.reader_floor import reader_difference, reader_readings

    out = tmp_path / "collab"
    committed = tmp_path / "collab_foils"
    run_part(out, monkeypatch, "cpu", committed)
    real = {m: _real_labels(out / f"probe_{m}", flag=m != "rl") for m in ("base", "template_filtered", "rl",
                                                                          "template_unfiltered")}  # fmt: skip
    for m, labels in real.items():
        write(out / f"probe_{m}" / "labels.jsonl", labels)
    _, before, *_ = run_part(out, monkeypatch, "cpu", committed)
    r = before.summary["readers"]
    assert not r["measured"] and r["note"] == NOT_MEASURED and r["differences"] == {}
    assert [t for t in before.text if "readers' floor" in t] == [NOT_MEASURED]
    assert not any(t.caption.startswith("The readers' generic floor") for t in before.tables)
    assert all(t.measured.startswith("calibrated") for t in before.targets[:2])
    assert r["models"]["base"]["counted"]["floor"] is None and r["models"]["rl"]["not_counted"] == "unknown"
    assert r["models"]["real"] == {"foil_labels": r["models"]["real"]["foil_labels"], "n_real": 0, "n_foils": 0}

    foils = {"base": _foil_labels(out / "probe_base", 14, 0.3),
             "template_filtered": _foil_labels(out / "probe_template_filtered", 14, 0.5),
             "template_unfiltered": _foil_labels(out / "probe_template_unfiltered", 6, 0.5)}  # fmt: skip
    for m, labels in foils.items():
        write(out / f"probe_{m}" / "foil_labels.jsonl", labels)
    # the RL model's foil labels are committed ones, made on another run: they attach by hash, one turn changed
    rl_foils = [{**x, "annotator": "f1"} for x in _foil_labels(out / "probe_rl", 12, 0.4, run_id="another-run")]
    rl_foils[0]["turn_sha"] = turn_sha("another text")
    write(committed / "rl.jsonl", rl_foils)
    foils["rl"] = rl_foils[1:]
    _, section, *_ = run_part(out, monkeypatch, "cpu", committed)
    r = section.summary["readers"]
    assert r["measured"] and r["note"] == ""
    named = "|".join(str(rl_foils[0][k]) for k in KEY)
    status = r["models"]["rl"]["foil_labels"]
    assert (
        status["status"] == f"11 of 12 foil labels attach (1 labelled turn(s) differ in this run, left out: {named})"
    )
    assert status["left_out_keys"] == [named] and status["committed"] == str(committed / "rl.jsonl")
    assert r["models"]["base"]["foil_labels"]["status"] == "14 of 14 foil labels attach"
    assert r["models"]["real"]["foil_labels"]["status"] == "no foil labels"

    rows = {m: [json.loads(x) for x in (out / f"probe_{m}" / "samples.jsonl").read_text().splitlines()] for m in foils}
    for m in foils:
        direct = reader_readings(real[m], foils[m], rows[m])
        mine = r["models"][m]
        assert mine["n_real"] == 30 and mine["n_foils"] == len(foils[m])
        assert mine["counted"]["genuine"] == direct["counted"]["real"]
        assert mine["counted"]["floor"] == direct["counted"]["floor"]
    assert r["models"]["base"]["counted"]["floor_subtracted"] == reader_readings(
        real["base"], foils["base"], rows["base"])["counted"]["floor_subtracted"]  # fmt: skip
    assert r["models"]["rl"]["not_counted"] == "unknown" and "no context_free flag" in r["models"]["rl"][
        "not_counted_note"]  # fmt: skip
    # under 10 items (6 foil contexts): no number, not even in summary.json
    unf = r["models"]["template_unfiltered"]["counted"]
    assert unf["floor"]["rate"] is None and "not estimable" in unf["floor"]["note"]
    assert unf["floor_subtracted"]["diff"] is None and unf["floor_subtracted"]["rate_foil"] is None

    diffs = r["differences"]
    assert set(diffs) == {"template_filtered", "rl", "template_unfiltered"}
    for m in ("template_filtered", "rl"):
        for reading in ("counted", "not_counted"):
            if m == "rl" and reading == "not_counted":
                assert diffs[m][reading] == "unknown"  # the RL model's real labels carry no flag
                continue
            direct = reader_difference(real["base"], foils["base"], real[m], foils[m], reading, seed=0)
            for stat in ("gain", "floor_rise", "floor_subtracted_gain"):
                got = diffs[m][reading][stat]
                assert {k: got[k] for k in ("diff", "low", "high", "p")} == direct[stat], (m, reading, stat)
                family = 2 if reading == "counted" else 1  # the RL model's reading without them is unknown
                assert "p_holm" in got and got["holm_family"] == family and "Holm-adjusted p=" in got["reading"]
    few = diffs["template_unfiltered"]["counted"]
    assert few["floor_subtracted_gain"]["diff"] is None and "not estimable" in few["note"]
    assert set(few["rates"].values()) == {None}

    table = next(t for t in section.tables if t.caption.startswith("The readers' generic floor"))
    assert len(table.rows) == 2 * 5 and "Holm-adjusted" in table.caption
    row = next(x for x in table.rows if x[0] == "SFT: template, judge-filtered" and x[1] == "counted genuine")
    assert row[-1] == diffs["template_filtered"]["counted"]["floor_subtracted_gain"]["reading"]
    few_row = next(x for x in table.rows if x[0] == "SFT: template, unfiltered" and x[1] == "counted genuine")
    assert few_row[4].startswith("not estimable") and few_row[-1].startswith("not estimable")
    assert any(x[0] == "follow-up RL" and x[1] == "not counted" and x[3].startswith("unknown") for x in table.rows)
    # the RL model's foils were labelled by another annotator than its real turns: said beside its labels
    assert r["models"]["rl"]["annotators"] == {"real": ["None"], "foils": ["f1"], "same": False}
    rl_row = next(x for x in table.rows if x[0] == "follow-up RL" and x[1] == "counted genuine")
    assert "labelled by other annotators (real: None; foils: f1)" in rl_row[2]
    assert r["models"]["base"]["annotators"]["same"]
    assert NOT_MEASURED not in section.text
    para = next(t for t in section.text if t.startswith("Read by blind readers with their own floor subtracted"))
    assert diffs["template_filtered"]["counted"]["floor_subtracted_gain"]["reading"] in para
    assert "No real and foil labels for SFT: real follow-ups" in para
    gain = section.targets[0]
    cell = diffs["template_filtered"]
    assert gain.measured.startswith("readers' gain minus floor rise, context-free counted: ")
    lows = [cell[x]["floor_subtracted_gain"]["low"] for x in ("counted", "not_counted")]
    holm = [cell[x]["floor_subtracted_gain"].get("detectable_holm", True) for x in ("counted", "not_counted")]
    assert gain.met == (all(low >= 0.15 for low in lows) and all(holm))
    assert section.targets[1].measured.endswith("not counted: unknown (no context_free flag)")
    # nothing else moves: every other table, figure and target is the section's without foil labels
    assert _without_readers(section) == _without_readers(before)

    # committed foil labels of another run (most turns changed) are refused, in one line
    for x in rl_foils[:8]:
        x["turn_sha"] = turn_sha("another text")
    write(committed / "rl.jsonl", rl_foils)
    _, section, *_ = run_part(out, monkeypatch, "cpu", committed)
    assert section.summary["readers"]["models"]["rl"]["foil_labels"]["status"].startswith("foil labels not usable")
    assert "rl" not in section.summary["readers"]["differences"]


def test_the_label_scripts_leave_foil_labels_out(tmp_path, monkeypatch):
    """scripts/attach_label_text.py keeps a foil label as it is (no text of its own context), judge_calibration.py and
    judge_likelihood.py read no foil label as a turn."""
    import importlib.util

    def script(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.syspath_prepend(str(ROOT / "scripts"))
        spec.loader.exec_module(module)
        return module

    key = {"dataset": "mt_bench", "item_id": "1", "temperature": 0.7, "perturbation": "none"}
    samples = [{**key, "sample": s, "messages": [{"role": "user", "content": "q"}], "user_turn": f"turn {s}"}
               for s in range(2)]  # fmt: skip
    labels = [{**key, "sample": 0, "genuine": True, "turn_sha": turn_sha("turn 0")},
              {**key, "sample": 1, "genuine": True, "foil": True, "context_item_id": "2",
               "turn_sha": turn_sha("turn 1")}]  # fmt: skip
    rows, missing = script("attach_label_text").attach(labels, samples)
    assert missing == 0 and rows[0]["user_turn"] == "turn 0" and rows[1] == labels[1]
    path = tmp_path / "labels.jsonl"
    write(path, [{**labels[0], "messages": samples[0]["messages"]}, {**labels[1], "messages": []}])
    for name in ("judge_likelihood", "judge_calibration"):
        assert [r["sample"] for r in script(name)._jsonl(path)] == [0], name

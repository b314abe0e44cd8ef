"""The readers' generic floor and the two readings of context-free requests (`fic.reader_floor`), on made-up label
rows, and what `fic rates` reads and prints of them (old label files, foil labels, bad input in one line)."""

from __future__ import annotations

import argparse
import json

import pytest

from fic.eval import rates
from fic.eval.rates import RatesError, read_foil_labels, read_labels, turn_sha, write_rates
from fic.reader_floor import (
    LabelRowError,
    check_flag,
    flag_state,
    floor_subtracted,
    reader_difference,
    reader_lines,
    reader_rate,
    reader_readings,
    reading_flags,
    seeded_reader_difference,
    without_context_free,
)


def label(item, genuine, context_free="absent", dataset="d", sample=0, **extra):
    row = {"dataset": dataset, "item_id": str(item), "temperature": 1.0, "perturbation": "none", "sample": sample,
           "genuine": genuine, "label": "genuine_followup" if genuine else "new_task_prompt", **extra}  # fmt: skip
    if context_free != "absent":
        row["context_free"] = context_free
    return row


def real_and_foils(n_items=20):
    """Per item two real turns (item i: genuine when i % 4 != 3, context-free when i % 4 == 0) and one foil turn
    (genuine, context-free, on items i % 5 == 0): real 75% genuine, 50% without the context-free ones; floor 20%."""
    real = [label(i, i % 4 != 3, i % 4 == 0 if i % 4 != 3 else False, sample=s) for i in range(n_items)
            for s in (0, 1)]  # fmt: skip
    foils = [label(i, i % 5 == 0, i % 5 == 0, sample=2, foil=True, context_item_id=str((i + 1) % n_items))
             for i in range(n_items)]  # fmt: skip
    return real, foils


def test_reader_rate_is_clustered_and_not_estimable_under_ten_items():
    cell = reader_rate([True, False] * 10, [i // 2 for i in range(20)])
    assert cell["rate"] == 0.5 and cell["n_items"] == 10 and cell["low"] < 0.5 < cell["high"] and cell["note"] == ""
    few = reader_rate([True, False] * 9, [i // 2 for i in range(18)])
    assert few["rate"] is None and few["low"] is None and "not estimable: 9 items (< 10)" in few["note"]
    assert reader_rate([], [])["rate"] is None


def test_floor_subtracted_difference_and_its_interval():
    real = [i % 2 == 0 for i in range(40)]
    foil = [i % 10 == 0 for i in range(20)]
    out = floor_subtracted(real, [i // 2 for i in range(40)], foil, list(range(20)), seed=1)
    assert out["rate_real"] == 0.5 and out["rate_foil"] == 0.1 and out["diff"] == pytest.approx(0.4)
    assert 0 < out["low"] < 0.4 < out["high"] and out["p"] < 0.05 and out["note"] == ""
    assert floor_subtracted(real, [i // 2 for i in range(40)], foil, list(range(20)), seed=1) == out  # seeded
    few = floor_subtracted(real, [i // 2 for i in range(40)], foil[:9], list(range(9)))
    assert few["diff"] is None and few["rate_foil"] == pytest.approx(1 / 9) and "9 with foil labels" in few["note"]
    with pytest.raises(ValueError, match="one item key per decision"):
        floor_subtracted([True], [], [], [])


def test_both_readings_and_the_flag():
    rows = [label(1, True, True), label(2, True, False), label(3, False, False), label(4, False)]
    assert reading_flags(rows, "counted") == [True, True, False, False]
    assert reading_flags(rows, "not_counted") == [False, True, False, False]
    assert flag_state(rows) == {"known": True, "n_genuine": 2, "n_flagged": 1, "n_unknown": 0, "note": ""}
    assert [r["genuine"] for r in without_context_free(rows)] == [False, True, False, False]
    assert rows[0]["genuine"] is True  # the rows given are left as they were
    old = [label(1, True), label(2, False), label(3, True, None)]  # before the flag: absent, or null
    state = flag_state(old)
    assert (
        not state["known"]
        and state["n_unknown"] == 2
        and "2 of 2 genuine labels carry no context_free" in state["note"]
    )
    assert reading_flags(old, "not_counted") is None and without_context_free(old) is None
    assert reading_flags(old, "counted") == [True, False, True]  # the guideline's reading needs no flag
    with pytest.raises(ValueError, match="unknown 'both'"):
        reading_flags(rows, "both")


@pytest.mark.parametrize("row, message", [
    (label(1, True, "yes"), "context_free must be true, false or absent"),
    (label(1, False, True), "context_free is true on a label that is not genuine"),
])  # fmt: skip
def test_check_flag_refuses(row, message):
    with pytest.raises(LabelRowError, match=message):
        check_flag(row)
    check_flag(label(1, True, None))


def test_reader_readings_of_one_model():
    real, foils = real_and_foils()
    samples = [{**f, "generic_genuine": int(f["item_id"]) % 2 == 0} for f in foils]
    out = reader_readings(real, foils, samples)
    counted, not_counted = out["counted"], out["not_counted"]
    assert counted["real"]["rate"] == 0.75 and not_counted["real"]["rate"] == 0.5
    assert counted["floor"]["rate"] == 0.2 and not_counted["floor"]["rate"] == 0.0
    assert counted["floor_subtracted"]["diff"] == pytest.approx(0.55)
    assert not_counted["floor_subtracted"]["diff"] == pytest.approx(0.5)
    assert out["judge_floor_same_turns"]["rate"] == 0.5 and out["n_real"] == 40 and out["n_foils"] == 20
    lines = reader_lines(out)
    assert lines[0].startswith("readers (context-free counted genuine): genuine 0.750 [")
    assert "floor 0.200 [" in lines[0] and "floor-subtracted +0.550 [" in lines[0]
    assert "readers (context-free not counted): genuine 0.500" in lines[1]
    assert lines[2] == "readers: 14 of 34 genuine labels flagged context_free"
    no_foils = reader_readings(real, [])
    assert no_foils["counted"]["floor"] is None and "no foil labels" in reader_lines(no_foils)[0]


def test_old_label_files_read_with_the_second_reading_unknown():
    real = [label(i, i % 2 == 0, sample=s) for i in range(12) for s in (0, 1)]
    out = reader_readings(real, [])
    assert out["counted"]["real"]["rate"] == 0.5 and out["not_counted"] is None
    assert "carry no context_free flag" in out["not_counted_note"]
    line = reader_lines(out)[1]
    assert line.startswith("readers (context-free not counted): unknown: 12 of 12 genuine labels carry no")


def test_reader_difference_subtracts_the_floor_rise_paired_by_item():
    """Base: real 30%, floor 10%; the arm: real 70%, floor 50%. Its gain of 40 points is all floor rise."""
    items = range(20)
    base_real = [label(i, i % 10 < 3, False, sample=s) for i in items for s in (0, 1)]
    base_foils = [label(i, i % 10 < 1, False, sample=2) for i in items]
    arm_real = [label(i, i % 10 < 7, i % 10 < 7, sample=s) for i in items for s in (0, 1)]
    arm_foils = [label(i, i % 10 < 5, i % 10 < 5, sample=2) for i in items]
    out = reader_difference(base_real, base_foils, arm_real, arm_foils, seed=3)
    assert out["gain"]["diff"] == pytest.approx(0.4) and out["floor_rise"]["diff"] == pytest.approx(0.4)
    assert out["floor_subtracted_gain"]["diff"] == pytest.approx(0.0) and out["note"] == ""
    assert out["gain"]["low"] > 0 and out["floor_subtracted_gain"]["low"] < 0 < out["floor_subtracted_gain"]["high"]
    assert out["rates"] == pytest.approx({"base_real": 0.3, "base_floor": 0.1, "arm_real": 0.7, "arm_floor": 0.5})
    assert reader_difference(base_real, base_foils, arm_real, arm_foils, seed=3) == out
    # not counting the arm's context-free requests: the arm's rates fall to 0, and so does its floor
    strict = reader_difference(base_real, base_foils, arm_real, arm_foils, reading="not_counted")
    assert strict["gain"]["diff"] == pytest.approx(-0.3) and strict["floor_rise"]["diff"] == pytest.approx(-0.1)
    unknown = reader_difference([label(i, True) for i in items], base_foils, arm_real, arm_foils, "not_counted")
    assert unknown["gain"]["diff"] is None and "carry no context_free flag" in unknown["note"]
    few = reader_difference(base_real, base_foils[:9], arm_real, arm_foils)
    assert few["floor_subtracted_gain"]["diff"] is None and "base_floor 9 (< 10)" in few["note"]


def test_seeded_reader_difference_pools_the_seeds_and_resamples_them():
    """One seed: `reader_difference` draw for draw. Three seeds that agree: the pooled points; three that disagree
    (arm real 40%, 70%, 100%, floor 10% each): the same pooled gain, a wider interval than the seeds taken as fixed."""
    items = range(20)
    base_real = [label(i, i % 10 < 3, False, sample=s) for i in items for s in (0, 1)]
    base_foils = [label(i, i % 10 < 1, False, sample=2) for i in items]

    def arm(share_real: int, share_floor: int = 1):
        return ([label(i, i % 10 < share_real, False, sample=s) for i in items for s in (0, 1)],
                [label(i, i % 10 < share_floor, False, sample=2) for i in items])  # fmt: skip

    one = seeded_reader_difference(base_real, base_foils, {0: arm(7)[0]}, {0: arm(7)[1]}, seed=3)
    direct = reader_difference(base_real, base_foils, *arm(7), seed=3)
    for stat in ("gain", "floor_rise", "floor_subtracted_gain"):
        assert one[stat] == pytest.approx(direct[stat]), stat
    assert one["n_seeds"] == 1
    agree = seeded_reader_difference(base_real, base_foils, {s: arm(7)[0] for s in range(3)},
                                     {s: arm(7)[1] for s in range(3)})  # fmt: skip
    assert agree["gain"]["diff"] == pytest.approx(0.4) and agree["floor_subtracted_gain"]["diff"] == pytest.approx(0.4)
    shares = {0: 4, 1: 7, 2: 10}
    spread = seeded_reader_difference(base_real, base_foils, {s: arm(k)[0] for s, k in shares.items()},
                                      {s: arm(k)[1] for s, k in shares.items()})  # fmt: skip
    fixed = reader_difference(base_real, base_foils, [r for k in shares.values() for r in arm(k)[0]],
                              [r for k in shares.values() for r in arm(k)[1]])  # fmt: skip
    assert spread["gain"]["diff"] == pytest.approx(fixed["gain"]["diff"]) == pytest.approx(0.4)
    width = lambda d: d["gain"]["high"] - d["gain"]["low"]  # noqa: E731
    assert width(spread) > 1.5 * width(fixed) and spread["n_seeds"] == 3
    few = seeded_reader_difference(base_real, base_foils[:9], {0: arm(7)[0]}, {0: arm(7)[1]})
    assert few["gain"]["diff"] is None and "(< 10)" in few["note"]
    with pytest.raises(ValueError, match="same seeds"):
        seeded_reader_difference(base_real, base_foils, {0: arm(7)[0]}, {1: arm(7)[1]})


# `fic rates` on a probe folder ------------------------------------------------------------------------------------


def probe_folder(tmp_path, n_items=20):
    rows = [{"dataset": "d", "item_id": str(i), "temperature": 1.0, "perturbation": "none", "sample": s,
             "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
             "user_turn": f"turn {i}.{s}", "label": "new_task_prompt", "genuine": i % 3 == 0,
             "generic_genuine": i % 6 == 0} for i in range(n_items) for s in range(3)]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "probe_meta.json").write_text(json.dumps({"run_id": "run-1"}))
    return rows


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def with_sha(rows, samples):
    text = {(r["item_id"], r["sample"]): r["user_turn"] for r in samples}
    return [{**r, "run_id": "run-1", "turn_sha": turn_sha(text[(r["item_id"], r["sample"])])} for r in rows]


def test_rates_report_the_readers_floor_and_both_readings(tmp_path, capsys):
    samples = probe_folder(tmp_path)
    real, foils = real_and_foils()
    write(tmp_path / "labels.jsonl", with_sha(real, samples))
    write(tmp_path / "foil_labels.jsonl", with_sha(foils, samples))
    summary = write_rates(tmp_path, report=False)
    readers = summary["readers"]
    assert readers["counted"]["real"]["rate"] == 0.75 and readers["not_counted"]["floor"]["rate"] == 0.0
    assert summary["overall"]["calibrated"]["n_labels"] == 40  # the foils never enter the calibrated rate
    assert json.loads((tmp_path / "summary.json").read_text())["readers"] == readers
    parser = argparse.ArgumentParser()
    rates.add_arguments(parser)
    assert rates.run(parser.parse_args([str(tmp_path), "--no-report"])) == 0
    printed = capsys.readouterr().out
    assert "readers (context-free counted genuine): genuine 0.750" in printed and "floor-subtracted +0.550" in printed
    # the foils may also sit in the labels file itself, or in a file named with --foil-labels
    (tmp_path / "foil_labels.jsonl").rename(tmp_path / "elsewhere.jsonl")
    assert write_rates(tmp_path, report=False, foil_labels=tmp_path / "elsewhere.jsonl")["readers"] == readers
    write(tmp_path / "merged.jsonl", with_sha(real + foils, samples))
    assert write_rates(tmp_path, labels=tmp_path / "merged.jsonl", report=False)["readers"] == readers
    assert len(read_labels(tmp_path / "merged.jsonl", samples, "run-1")) == 40
    assert len(read_labels(tmp_path / "merged.jsonl", samples, "run-1", foils=True)) == 20


def test_rates_on_an_old_label_file_say_the_flag_is_unknown(tmp_path):
    samples = probe_folder(tmp_path)
    old = [label(i, i % 2 == 0, sample=s) for i in range(12) for s in (0, 1)]
    write(tmp_path / "labels.jsonl", with_sha(old, samples))
    summary = write_rates(tmp_path, report=False)
    assert summary["readers"]["not_counted"] is None and summary["readers"]["counted"]["real"]["rate"] == 0.5
    assert any("unknown: 12 of 12 genuine labels" in line for line in rates.estimate_lines(summary))
    assert summary["overall"]["calibrated"] is not None  # the labels still give the calibrated rate as before


@pytest.mark.parametrize("file, rows, message", [
    ("labels.jsonl", [label(1, True, "yes")], "line 1: context_free must be true, false or absent"),
    ("labels.jsonl", [label(1, False, True)], "line 1: context_free is true on a label that is not genuine"),
    ("foil_labels.jsonl", [label(1, True, True, foil=True, context_item_id="99")], "context_item_id '99' is no item"),
    ("foil_labels.jsonl", [label(1, True, True)], "1 rows are not foil labels"),
    ("foil_labels.jsonl", [label(1, True, True, foil=True, context_item_id="2")] * 2, "labelled twice as a foil"),
])  # fmt: skip
def test_bad_label_rows_are_one_clear_line(tmp_path, capsys, file, rows, message):
    samples = probe_folder(tmp_path)
    write(tmp_path / file, with_sha(rows, samples))
    with pytest.raises(RatesError, match=message):
        write_rates(tmp_path, report=False)
    from fic.cli import main

    assert main(["rates", str(tmp_path), "--no-report"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message.split("'")[0] in err


def test_foil_labels_of_another_run_and_a_missing_file(tmp_path):
    samples = probe_folder(tmp_path)
    foil = with_sha([label(1, True, True, foil=True, context_item_id="2")], samples)
    write(tmp_path / "f.jsonl", [{**foil[0], "turn_sha": "0" * 12}])
    with pytest.raises(RatesError, match="differs from this run's turn"):
        read_foil_labels(tmp_path / "f.jsonl", samples, "run-1")
    with pytest.raises(RatesError, match="--foil-labels .*nope.jsonl: no such file"):
        write_rates(tmp_path, report=False, foil_labels=tmp_path / "nope.jsonl")

"""Rates a referee trusts, end to end without a model: the summary's estimates, the context swap, the judge firewall,
`fic review --sample` -> `labels.jsonl` -> `fic rates` (calibrated), paired before/after differences, bad input."""

from __future__ import annotations

import json
import threading

import pytest
from test_review import request

from fic.eval import probe
from fic.eval.rates import RatesError, write_rates
from fic.eval.review import server as review_server
from fic.eval.review.store import ReviewStore
from fic.followup_eval import FollowupJobs, Item
from fic.followup_summary import compare, summarize
from fic.judges import Verdict
from fic.judges.provenance import JudgeOverlapError, check_overlap, overlap, prompt_hash
from fic.judges.validity import MIN_PER_CLASS, dataset_errors


class Backend:
    """Greedy answers for the assistant, and user turns that name the item (so the judge below can be read)."""

    def generate(self, prompts, params, progress=False):
        return [[f"Why {len(p) % 5}, {s}?" for s in range(params.n)] for p in prompts]


class GenericJudge:
    """Genuine when the turn ends in '?' and the answer mentions the question's first word: a swapped answer
    usually does not, so the generic floor is lower than the rate."""

    name = "generic"

    def judge(self, cases):
        out = []
        for case in cases:
            first = case.messages[0]["content"].split()[0].lower()
            genuine = case.user_turn.endswith("?") and first in case.messages[-1]["content"].lower()
            out.append(Verdict("genuine_followup" if genuine else "new_task_prompt", confidence=1.0))
        return out


class FittedJudge(GenericJudge):
    """A judge that says which prompts it was fitted on."""

    def __init__(self, fitted_messages):
        self.provenance = {"source": "test fit", "fitted_items": {prompt_hash(m) for m in fitted_messages},
                           "datasets": {}}  # fmt: skip


def rows_for(items: int, turns: int, rate_of, dataset="d", temperature=1.0, field="genuine"):
    out = []
    for i in range(items):
        for s in range(turns):
            out.append({"dataset": dataset, "item_id": str(i), "temperature": temperature, "perturbation": "none",
                        "sample": s, "messages": [{"role": "user", "content": f"q{i}"},
                                                  {"role": "assistant", "content": f"a{i}"}],
                        "user_turn": f"t{i}.{s}", "label": "x", field: rate_of(i, s)})  # fmt: skip
    return out


def test_the_context_swap_pairs_within_a_dataset_cyclically_across_chunks():
    items = [Item(d, str(i), [{"role": "user", "content": f"q{i}"}], f"a{i}") for i, d in enumerate("xyxx")]
    jobs = FollowupJobs(None, None, None, items, chunk_size=2)
    swapped = [*jobs.swapped("x", 0, "none"), *jobs.swapped("x", 1, "none")]
    assert [s[-1]["content"] for s in swapped] == ["a2", "a3", "a0"]
    assert [s[0]["content"] for s in swapped] == ["q0", "q2", "q3"]  # the question stays
    assert jobs.swapped("y", 0, "none") is None  # alone in its dataset: no swap
    assert jobs.swapped("x", 0, "question")[0][-1]["content"] == "a2\n\nWhat do you think?"  # under the control


def test_summary_shape_clustered_interval_and_no_correction_without_measurement():
    # 10 items x 4 turns; items 0-2 always genuine: 12 of 40 turns, all in 3 items
    rows = rows_for(10, 4, lambda i, s: i < 3)
    s = summarize(rows)
    raw = s["overall"]["raw"]
    assert raw["rate"] == pytest.approx(0.3) and raw["n"] == 40 and raw["n_items"] == 10
    assert raw["design_effect"] > 1  # the turns of an item agree: 40 turns count as fewer
    from fic.metrics import wilson_interval

    naive = wilson_interval(12, 40)
    assert raw["high"] - raw["low"] > naive[1] - naive[0]
    assert s["overall"]["corrected"] is None and "no labelled held-out turns" in s["overall"]["corrected_note"]
    assert s["overall"]["calibrated"] is None and s["by_dataset"]["d"]["raw"]["rate"] == pytest.approx(0.3)
    assert set(s["overall"]) >= {"raw", "corrected", "corrected_note", "calibrated", "judge", "generic_floor"}


def test_corrected_rate_uses_the_datasets_own_errors_only_when_its_labels_suffice():
    own = {"sensitivity": 0.5, "specificity": 0.9, "n_pos": MIN_PER_CLASS, "n_neg": 50, "source": "d"}
    thin = {**own, "n_pos": MIN_PER_CLASS - 1, "source": "e"}
    pooled = {"sensitivity": 0.6, "specificity": 0.9, "n_pos": 100, "n_neg": 100, "source": "pooled"}
    validity = {"errors": {"pooled": pooled, "per_dataset": {"d": own, "e": thin}}}
    assert dataset_errors(validity, "d") is own
    assert dataset_errors(validity, "e") is pooled and dataset_errors(validity, "f") is pooled
    assert dataset_errors({"errors": None}, "d") is None


def test_shipped_learned_judge_corrects_and_names_its_assumption():
    from fic.judges import make_judge
    from fic.judges.validity import judge_validity

    validity = judge_validity(make_judge("learned"))
    rows = rows_for(20, 3, lambda i, s: i % 5 == 0)  # 20% judged genuine
    est = summarize(rows, validity=validity)["overall"]
    errors = validity["errors"]["pooled"]
    expected = (0.2 + errors["specificity"] - 1) / (errors["sensitivity"] + errors["specificity"] - 1)
    assert est["corrected"]["rate"] == pytest.approx(expected)
    assert est["corrected"]["low"] < expected < est["corrected"]["high"]
    assert "transfer to the turns of this run" in est["corrected_note"]
    # the rules alone call most failures genuine: sensitivity + specificity - 1 is too small to correct reliably
    rules = judge_validity(make_judge("heuristic"))["errors"]["pooled"]
    assert rules["specificity"] < 0.5


def test_generic_floor_per_cell_and_per_dataset():
    rows = rows_for(6, 2, lambda i, s: True)
    for r, floor in zip(rows, rows_for(6, 2, lambda i, s: i == 0, field="generic_genuine")):
        r["generic_genuine"] = floor["generic_genuine"]
    s = summarize(rows)
    assert s["genuine_rate"]["d"]["t1.0"]["none"]["generic_floor"]["rate"] == pytest.approx(1 / 6)
    assert s["by_dataset"]["d"]["generic_floor"]["rate"] == pytest.approx(1 / 6)


def test_compare_reads_intervals_not_point_estimates():
    before = rows_for(30, 2, lambda i, s: i % 6 == 0)
    same = compare(before, before)
    assert same["overall"]["diff"] == 0 and "no detectable change" in same["overall"]["reading"]
    after = rows_for(30, 2, lambda i, s: i % 6 != 5)
    gain = compare(before, after)["overall"]
    assert gain["low"] > 0 and gain["detectable"] and "no detectable" not in gain["reading"]
    small = compare(before, rows_for(30, 2, lambda i, s: i % 6 == 0 or i == 1))["overall"]  # one item more
    assert small["low"] <= 0 <= small["high"] and "no detectable change" in small["reading"]


def test_firewall_refuses_in_one_line_and_unknown_provenance_is_reported_not_refused():
    fitted = [[{"role": "user", "content": "q1"}]]
    items = [("d", "0", [{"role": "user", "content": "q0"}]),
             ("d", "1", [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "any answer"}])]  # fmt: skip
    with pytest.raises(JudgeOverlapError, match=r"^1 of 2 items are in the judge's fit \(test fit\), e\.g\. d:1"):
        check_overlap(FittedJudge(fitted), items, allow=False, where="--allow-judge-overlap")
    assert check_overlap(FittedJudge(fitted), items, allow=True, where="x")["items"] == ["d:1"]
    unknown = overlap(GenericJudge(), items)
    assert unknown["known"] is False and unknown["n_overlap"] == 0


def test_probe_with_overlap_allowed_records_it_and_leaves_those_items_out(shared_data, tmp_path):
    from fic.data import load_source
    from fic.tiny import build_tokenizer

    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    records = load_source(gsm8k, limit=4)
    judge = FittedJudge([records[0].messages])
    kw = dict(temperatures=[1.0], samples=2, limit=4, judge=judge, progress=False, report=False)
    with pytest.raises(JudgeOverlapError):
        probe.run_probe(Backend(), build_tokenizer("chatml"), [gsm8k], tmp_path, **kw)
    summary = probe.run_probe(Backend(), build_tokenizer("chatml"), [gsm8k], tmp_path, allow_judge_overlap=True, **kw)
    assert summary["judge_overlap"]["items"] == ["gsm8k:0"]
    assert "2 turns of items inside the judge's fit left out" in summary["overall"]["corrected_note"]
    floor, raw = summary["overall"]["generic_floor"], summary["overall"]["raw"]
    assert floor["n"] == raw["n"] == 8 and floor["rate"] <= raw["rate"]


@pytest.fixture
def probed(shared_data, tmp_path):
    from fic.tiny import build_tokenizer

    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    mt = f"mt_bench:{shared_data / 'mt_bench' / 'question.jsonl'}"
    probe.run_probe(Backend(), build_tokenizer("chatml"), [gsm8k, mt], tmp_path, temperatures=[0.0, 1.0], samples=3,
                    limit=8, judge=GenericJudge(), progress=False, report=False)  # fmt: skip
    return tmp_path


def test_review_sample_is_stratified_blind_and_feeds_fic_rates(probed):
    store = ReviewStore(probed, seed=3, sample=30)

    def strata(keys) -> dict:
        out = {}
        for key in keys:
            row = store.rows[key]
            out[(row["dataset"], row["temperature"])] = out.get((row["dataset"], row["temperature"]), 0) + 1
        return out

    sizes, drawn = strata(store.rows), strata(store.order)
    assert sum(drawn.values()) == 30 and set(drawn) == set(sizes) and len(sizes) == 4
    for stratum, size in sizes.items():  # proportional allocation: each stratum within one turn of its share
        assert abs(drawn[stratum] - 30 * size / len(store.rows)) < 1
    item = store.item(0)
    assert not {"label", "genuine", "temperature", "perturbation", "dataset", "judge"} & set(item)
    assert ReviewStore(probed).order == store.order  # the draw is kept with its seed

    srv = review_server.make_server(probed, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        for i in range(30):
            item = json.loads(request(port, "GET", f"/api/item?i={i}")[2])
            row = srv.RequestHandlerClass.store.rows[item["id"]]
            genuine = row["genuine"] if i % 5 else not row["genuine"]  # the reader disagrees with the judge on 6
            label = "genuine_followup" if genuine else "new_task_prompt"
            status, _, body = request(port, "POST", "/api/annotate", {"id": item["id"], "label": label,
                                                                      "genuine": genuine})  # fmt: skip
            assert status == 200
            # withheld while labelling: its move after each label would tell the reader the judge's verdict
            assert (json.loads(body)["estimate"] is None) == (i < 29)
        state = json.loads(request(port, "GET", "/api/state")[2])
    finally:
        srv.shutdown()
        srv.server_close()
    assert state["done"] == 30 and state["estimate"]["n_labels"] == 30
    assert state["estimate"]["calibrated"]["width"] <= state["estimate"]["labels_only"]["width"] + 1e-12
    labels = [json.loads(x) for x in (probed / "labels.jsonl").read_text().splitlines()]
    assert len(labels) == 30 and {"dataset", "item_id", "temperature", "perturbation", "sample", "genuine",
                                  "run_id", "turn_sha"} <= set(labels[0])  # fmt: skip

    summary = write_rates(probed, report=False)
    calibrated = summary["overall"]["calibrated"]
    assert calibrated["n_labels"] == 30 and calibrated["low"] <= calibrated["rate"] <= calibrated["high"]
    assert summary["overall"]["agreement"]["n"] == 30
    assert summary["overall"]["agreement"]["binary_kappa"] < 1  # the six disagreements show
    assert json.loads((probed / "summary.json").read_text())["n_labels"] == 30


def test_fic_rates_refuses_bad_labels_in_one_line(probed, tmp_path, capsys):
    from fic.cli import main

    rows = [json.loads(x) for x in (probed / "samples.jsonl").read_text().splitlines()]
    key = {k: rows[0][k] for k in ("dataset", "item_id", "temperature", "perturbation", "sample")}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**key, "item_id": "no-such-item", "genuine": True}) + "\n")
    assert main(["rates", str(probed), "--labels", str(bad)]) == 1
    assert "1 of 1 labels name turns this run does not have" in capsys.readouterr().err
    bad.write_text(json.dumps({**key, "genuine": True, "run_id": "another-run"}) + "\n")
    with pytest.raises(RatesError, match="labels of another run"):
        write_rates(probed, labels=bad)
    bad.write_text(json.dumps({**key, "genuine": True, "turn_sha": "0123456789ab"}) + "\n")
    with pytest.raises(RatesError, match="text differs from this run's turn") as err:
        write_rates(probed, labels=bad)
    assert f"fic review {probed} --sample N" in str(err.value)  # the run's folder, not the labels file's
    bad.write_text(json.dumps({**key, "genuine": "yes"}) + "\n")
    with pytest.raises(RatesError, match="genuine must be true or false"):
        write_rates(probed, labels=bad)
    bad.write_text(json.dumps({**key, "genuine": True}) + "\n" + json.dumps({**key, "genuine": False}) + "\n")
    assert main(["rates", str(probed), "--labels", str(bad)]) == 1
    err = capsys.readouterr().err
    assert (
        "line 2: turn" in err and "is labelled twice (first on line 1)" in err and len(err.strip().splitlines()) == 1
    )
    assert main(["rates", str(tmp_path / "nothing")]) == 1
    assert "samples.jsonl not found" in capsys.readouterr().err


def test_trainer_summary_writes_turns_and_the_paired_difference(tmp_path):
    from fic.trainers.common import write_summary

    before = {"genuine_rate": {}, "rows": rows_for(12, 2, lambda i, s: i < 2)}
    after = {"genuine_rate": {}, "rows": rows_for(12, 2, lambda i, s: i < 10)}
    write_summary(tmp_path, before, after, method="test")
    summary = json.loads((tmp_path / "eval_summary.json").read_text())
    assert "rows" not in summary["before"] and summary["difference"]["overall"]["detectable"]
    assert len((tmp_path / "eval_turns" / "after.jsonl").read_text().splitlines()) == 24


def test_rows_written_twice_are_refused_in_one_line_and_a_rerun_repairs_them(probed, shared_data, capsys):
    """What the committed collab run had (every base MT-Bench turn twice, n 160 for 80): two runs that appended to one
    folder at once. `fic rates` refuses to count the repeats; rerunning the same probe keeps the first of each."""
    from fic.cli import main
    from fic.tiny import build_tokenizer

    samples = probed / "samples.jsonl"
    before, summary = samples.read_text(), json.loads((probed / "summary.json").read_text())
    lines = before.splitlines(keepends=True)
    twice = [line for line in lines if '"mt_bench"' in line]
    samples.write_text(before + "".join(twice))
    assert main(["rates", str(probed)]) == 1
    err = capsys.readouterr().err
    assert f"{len(twice)} rows repeat an earlier row's" in err and "Rerun the same `fic probe`" in err

    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    mt = f"mt_bench:{shared_data / 'mt_bench' / 'question.jsonl'}"
    probe.run_probe(Backend(), build_tokenizer("chatml"), [gsm8k, mt], probed, temperatures=[0.0, 1.0], samples=3,
                    limit=8, judge=GenericJudge(), progress=False, report=False)  # fmt: skip
    assert samples.read_text() == before
    assert json.loads((probed / "summary.json").read_text())["overall"] == summary["overall"]

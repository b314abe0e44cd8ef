"""The judge as an instrument: its figures on labelled real model turns, and the validity line in every report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fic.judges import Case, make_judge
from fic.judges.validity import judge_validity, load_validation, validity_line

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "labels" / "followup"


def _rows(split: str) -> list[dict]:
    rows = [json.loads(line) for line in (LABELS / "labels.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == split]


def test_labelled_set_is_split_by_item_and_double_labelled():
    rows = [json.loads(line) for line in (LABELS / "labels.jsonl").read_text().splitlines()]
    assert len(rows) >= 500
    split_of: dict[tuple, set] = {}
    for r in rows:
        split_of.setdefault((r["dataset"], r["item_id"]), set()).add(r["split"])
        assert r["genuine"] == (r["label"] == "genuine_followup")
        assert not {"confidence", "rationale", "judge"} & set(r), "no judge output in the labels"
    assert all(len(s) == 1 for s in split_of.values()), "every item's samples share one split"
    assert {r["dataset"] for r in rows if r["split"] == "test"} == {"gsm8k", "mt_bench", "healthbench", "ifeval"}
    double = json.loads((LABELS / "double_agreement.json").read_text())
    assert double["double_labelled"] == 100 and double["binary_kappa"] > 0.6


@pytest.mark.parametrize("kind", ["heuristic", "learned"])
def test_shipped_figures_are_what_the_judge_does_on_the_test_split(kind):
    """validation.json is not a claim: rejudging the held-out labelled turns gives the figures it records."""
    from fic.metrics import cohen_kappa

    judge = make_judge(kind)
    rows = _rows("test")
    verdicts = judge.judge([Case(r["messages"], r["user_turn"]) for r in rows])
    human, judged = [r["genuine"] for r in rows], [v.genuine for v in verdicts]
    failures = [j for h, j in zip(human, judged) if not h]
    recorded = judge_validity(judge)
    assert recorded["measured"], recorded
    assert recorded["test"]["binary_kappa"] == pytest.approx(cohen_kappa(human, judged), abs=1e-3)
    assert recorded["test"]["false_positive_rate"] == pytest.approx(sum(failures) / len(failures), abs=1e-3)


def test_learned_judge_calls_far_fewer_failures_genuine_than_the_rules():
    validation = load_validation()
    rules = next(v for k, v in validation.items() if k.endswith("rules-only"))["test"]
    learned = next(v for k, v in validation.items() if not k.endswith("rules-only"))["test"]
    assert learned["false_positive_rate"] <= 0.10 < rules["false_positive_rate"]
    assert learned["binary_kappa"] > rules["binary_kappa"] + 0.2


def test_unmeasured_judge_says_so():
    class Other:
        name = "llm:someone"

    validity = judge_validity(Other())
    assert validity["measured"] is False and "not measured" in validity_line(validity)


def test_probe_summary_and_report_carry_the_judge_validity(tmp_path):
    from fic.eval.probe import run_probe
    from fic.generation import get_backend
    from fic.modeling import load_tokenizer
    from fic.tiny import tiny_model

    path = tiny_model("chatml")
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    summary = run_probe(get_backend("transformers", model=path), load_tokenizer(path), [f"gsm8k:{data}"],
                        tmp_path / "out", temperatures=[0.0], judge=make_judge("learned"), max_new_tokens=8,
                        response_tokens=8)  # fmt: skip
    assert summary["judge_validity"]["measured"] and summary["judge_validity"]["name"] == "learned"
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["judge_validity"] == summary["judge_validity"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "held-out labelled real turns" in html and "binary kappa" in html


def test_learned_confidence_is_symmetric_about_its_threshold():
    """A classifier verdict is unsure at its P(genuine) threshold and as sure at P 1 as at P 0, so a cascade can
    trust confident genuine verdicts too (with the room above the threshold smaller than below it)."""
    from fic.judges import Verdict

    judge = make_judge("learned")
    threshold = judge.classifier.threshold
    rule = Verdict(label="new_task_prompt", confidence=0.6, rationale="r", judge="heuristic")

    def confidence(p: float) -> float:
        return judge.learned_verdict(rule, p, "new_task_prompt").confidence

    assert confidence(threshold) == pytest.approx(0.5)
    assert confidence(1.0) == pytest.approx(0.95) == confidence(0.0)
    assert judge.learned_verdict(rule, 1.0, "new_task_prompt").genuine
    mid_above, mid_below = (threshold + 1) / 2, threshold / 2
    assert confidence(mid_above) == pytest.approx(confidence(mid_below))


def test_binary_agreement_point_values_and_item_clustered_intervals():
    from fic.judges.agreement import binary_agreement

    # 4 items x 2 turns: the judge calls every labelled failure of item "d" genuine
    human = [True, False, True, False, False, False, False, False]
    judged = [True, False, True, False, False, False, True, True]
    items = ["a", "a", "b", "b", "c", "c", "d", "d"]
    out = binary_agreement(human, judged, items, draws=200, seed=1)
    assert out["n"] == 8 and out["n_items"] == 4
    assert out["fpr"]["value"] == pytest.approx(2 / 6) and out["tpr"]["value"] == 1.0
    assert out["judged_rate"]["value"] == 0.5 and out["labelled_rate"]["value"] == 0.25
    assert out["fpr"]["low"] <= out["fpr"]["value"] <= out["fpr"]["high"]
    # resampling whole items: a draw without item "d" has no false positive, one with it twice has 4 of 6 or more
    assert out["fpr"]["low"] == 0.0 and out["fpr"]["high"] >= 0.5
    assert binary_agreement(human, judged, items, draws=200, seed=1) == out  # deterministic in the seed
    perfect = binary_agreement(human, human, items, draws=50)
    assert perfect["kappa"]["value"] == 1.0 and perfect["fpr"]["value"] == 0.0
    no_failures = binary_agreement([True, True], [True, False], ["a", "b"], draws=10)
    assert no_failures["fpr"] == {"value": None, "low": None, "high": None}
    with pytest.raises(ValueError, match="one entry per turn"):
        binary_agreement([True], [True, False], ["a"])


def _script(name: str):
    """A module of `scripts/` (not a package), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attach_label_text_adds_text_only_where_the_turn_hash_matches(tmp_path):
    from fic.eval.rates import turn_sha

    attach = _script("attach_label_text")
    key = {"dataset": "mt_bench", "item_id": "1", "temperature": 0.7, "perturbation": "none"}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    samples = [{**key, "sample": s, "messages": messages, "user_turn": f"turn {s}"} for s in range(2)]
    labels = [{**key, "sample": 0, "genuine": True, "turn_sha": turn_sha("turn 0")},
              {**key, "sample": 1, "genuine": False, "turn_sha": turn_sha("another text")}]  # fmt: skip
    rows, missing = attach.attach(labels, samples)
    assert missing == 1
    assert rows[0]["user_turn"] == "turn 0" and rows[0]["messages"] == messages and rows[0]["genuine"] is True
    assert rows[1] == labels[1]


def test_family_weights_give_both_model_families_the_same_total_weight():
    import numpy as np

    module = _script("train_judge_classifier")
    rows = [{"model": "smollm2"}] * 6 + [{"model": "collab_rl_contrast"}] * 2 + [{"source": "constructed"}] * 2
    weights = module.family_weights(rows)
    trained = np.array([module.is_trained(r) for r in rows])
    assert trained.tolist() == [False] * 6 + [True] * 2 + [False] * 2  # constructed cases are not a trained model's
    assert weights[trained].sum() == pytest.approx(weights[~trained].sum())
    assert module.family_weights(rows[:6]).tolist() == [1.0] * 6  # one family: no reweighting


def test_learning_curve_refits_on_whole_items_and_scores_every_held_row():
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from fic.metrics import cohen_kappa

    module = _script("judge_ablations")
    rng = np.random.default_rng(0)
    n_items, per_item = 28, 3
    item_of = {i: i // per_item for i in range(n_items * per_item)}
    y = np.array([item_of[i] % 2 == 0 for i in item_of])  # an item's turns share their label
    x = np.column_stack([y + rng.normal(0, 0.1, len(y)), np.arange(len(y))])
    folds = [[i for i in item_of if item_of[i] % 4 == f] for f in range(4)]
    seen: list[list[int]] = []

    class Recording(LogisticRegression):
        def fit(self, x, y, sample_weight=None):
            seen.append(sorted(int(i) for i in x[:, 1]))
            return super().fit(x[:, :1], y, sample_weight=sample_weight)

        def predict_proba(self, x):
            return super().predict_proba(x[:, :1])

    def score(p):
        assert sorted(p) == sorted(item_of)  # every held row of every fold gets a probability
        judged = np.array([p[i] >= 0.5 for i in sorted(p)])
        return {"binary_kappa": cohen_kappa(list(y), list(judged)), "false_positive_rate": float(judged[~y].mean())}

    curve = module.learning_curve(Recording, x, y, folds, [], item_of, score, fractions=(0.5, 1.0), draws=3)
    assert curve["0.5"]["draws"] == 3 and curve["1.0"]["draws"] == 1
    assert curve["1.0"]["binary_kappa"] == pytest.approx(1.0)
    half, full = seen[: 3 * len(folds)], seen[3 * len(folds) :]
    for train in seen:  # whole items only: every item in a training set brings all its turns
        items = {item_of[i] for i in train}
        assert len(train) == per_item * len(items)
    assert all(len(h) == per_item * round(len(f) / per_item / 2) for h, f in zip(half, full * 3))


def test_judge_calibration_measures_a_judge_behind_an_endpoint(capsys):
    """`--judge llm|cascade`: an endpoint's verdicts land in the transfer table as they are (a judge that calls
    everything genuine: recall 1, FPR 1, kappa 0), its failed replies as judge errors, never as verdicts."""
    from mock_openai_server import MockOpenAIServer

    calibration = _script("judge_calibration")
    with pytest.raises(SystemExit):
        calibration.main(["--judge", "cascade"])
    assert "needs --judge-base-url and --judge-model" in capsys.readouterr().err
    genuine = json.dumps({"label": "genuine_followup", "genuine": True, "confidence": 0.9, "rationale": "r"})
    with MockOpenAIServer(chat_reply=genuine) as server:
        judges = calibration.transfer_judges("llm", base_url=server.url, model="judge", max_retries=0, max_reasks=0)
        assert list(judges)[-2:] == ["llm", "llm+contrast"]
        report = calibration.transfer(draws=50, seed=0, judges={"llm": judges["llm"]})
    entry = report["judges"]["llm"]
    assert entry["judge_errors"] == 0 and entry["base"]["n"] == report["turns"]["base"] > 400
    assert entry["base"]["tpr"]["value"] == entry["trained"]["fpr"]["value"] == 1.0
    assert entry["base"]["kappa"]["value"] == 0.0 and entry["targets"]["met"] is False
    with MockOpenAIServer(chat_reply="not a verdict") as server:
        judge = calibration.make_judge("llm", base_url=server.url, model="judge", max_retries=0, max_reasks=0)
        report = calibration.transfer(draws=50, seed=0, judges={"llm": judge})
    entry = report["judges"]["llm"]
    assert entry["judge_errors"] == sum(report["turns"].values()) and entry["base"]["n"] == 0

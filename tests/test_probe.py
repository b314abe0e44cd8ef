"""The user-turn probe: prompts end in one user header, controls, summary arithmetic, files, and resume."""

import json

import pytest
from conftest import SHARED_DATA
from transformers import AutoTokenizer

from fic.eval import probe
from fic.followup_summary import flat_metrics, summarize
from fic.judges import Verdict

HEADERS = {"chatml": "<|im_start|>user\n", "llama3": "<|start_header_id|>user<|end_header_id|>\n\n",
           "norole": "<start_of_turn>user\n"}  # fmt: skip


class RecordingBackend:
    """Answers with fixed text and records every prompt; `fail_after` simulates a kill."""

    def __init__(self, fail_after=None):
        self.prompts, self.calls, self.fail_after = [], 0, fail_after

    def generate(self, prompts, params, progress=False):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.prompts.extend(prompts)
        return [
            [f"Why is it {len(p) % 7 + s + int(params.temperature * 10)}?" for s in range(params.n)] for p in prompts
        ]


class EveryOtherJudge:
    name = "every-other"

    def judge(self, cases):
        return [Verdict("genuine_followup" if i % 2 == 0 else "degenerate_short", confidence=1.0)
                for i, _ in enumerate(cases)]  # fmt: skip


@pytest.fixture
def gsm8k(shared_data):
    return f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"


def test_prompts_end_with_one_user_header(tiny_family, gsm8k, tmp_path):
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    backend = RecordingBackend()
    probe.run_probe(backend, tok, [gsm8k], tmp_path, temperatures=[0.0], limit=2, judge=EveryOtherJudge(),
                    progress=False, report=False)  # fmt: skip
    user_prompts = backend.prompts[2:]  # the first two are the assistant-answer prompts
    assert len(user_prompts) == 2
    for prompt in user_prompts:
        assert prompt.endswith(HEADERS[family])
        # one header per user message: the question, plus the new one
        assert prompt.count(HEADERS[family]) == 2


def test_perturbations():
    answer = "First add 3 and 4 to get 7. Then double it for 14."
    assert probe.perturb(answer, "none") == answer
    cut = probe.perturb(answer, "truncate")
    assert answer.startswith(cut) and len(cut.split()) == len(answer.split()) // 2
    assert probe.perturb(answer, "question") == answer + "\n\nWhat do you think?"
    with pytest.raises(ValueError, match="unknown 'shuffle'"):
        probe.perturb(answer, "shuffle")


def row(item, temp, pert, sample, text, genuine, label=None, dataset="d"):
    label = label or ("genuine_followup" if genuine else ("judge_error" if genuine is None else "degenerate_short"))
    return {"dataset": dataset, "item_id": item, "temperature": temp, "perturbation": pert, "sample": sample,
            "user_turn": text, "genuine": genuine, "label": label, "correct": item == "a"}  # fmt: skip


def test_summary_by_hand():
    rows = [
        row("a", 0.0, "none", 0, "x", True), row("b", 0.0, "none", 0, "y", False),
        row("c", 0.0, "none", 0, "z", None), row("d", 0.0, "none", 0, "w", True),
        row("a", 0.0, "question", 0, "x", True), row("b", 0.0, "question", 0, "y2", True),
        row("c", 0.0, "question", 0, "z2", False), row("d", 0.0, "question", 0, "w", False),
    ]  # fmt: skip
    s = summarize(rows)
    none = s["genuine_rate"]["d"]["t0.0"]["none"]
    assert none["rate"] == pytest.approx(2 / 3) and none["n"] == 3 and none["judge_errors"] == 1
    assert s["genuine_rate"]["d"]["t0.0"]["question"]["rate"] == pytest.approx(2 / 4)
    # b and c changed text under the question control, a and d did not
    assert s["percent_changed"]["question"]["overall"] == {"changed": 0.5, "n": 4}
    assert s["labels"]["judge_error"] == pytest.approx(1 / 8)
    assert s["judge_errors"] == 1
    assert s["genuine_by_correct"]["correct"]["rate"] == 1.0  # item a, both rows genuine
    assert flat_metrics(s) == {"probe/d/genuine_rate@t0.0": pytest.approx(2 / 3)}
    assert flat_metrics(s, perturbations=("none", "question")) == {
        "probe/d/genuine_rate@t0.0": pytest.approx(2 / 3), "probe/d/question/genuine_rate@t0.0": pytest.approx(0.5),
    }  # fmt: skip


def test_run_writes_files_and_rates_match_samples(gsm8k, tmp_path):
    from fic.tiny import build_tokenizer

    tok = build_tokenizer("chatml")
    mt = f"mt_bench:{SHARED_DATA / 'mt_bench' / 'question.jsonl'}"
    summary = probe.run_probe(RecordingBackend(), tok, [gsm8k, mt], tmp_path, temperatures=[0.0, 1.0], samples=2,
                              perturbations=["none", "truncate"], limit=3, judge=EveryOtherJudge(), progress=False)  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    # datasets x items x temperatures x (none, truncate and its seed floor `reseed`) x samples
    assert len(rows) == 2 * 3 * 2 * 3 * 2
    assert summary["settings"]["perturbations"] == ["none", "truncate", "reseed"]
    for r in rows:
        assert {"dataset", "item_id", "temperature", "perturbation", "sample", "messages", "user_turn", "label",
                "genuine", "correct"} <= set(r)  # fmt: skip
        assert r["messages"][-1]["role"] == "assistant"
    for dataset in ("gsm8k", "mt_bench"):
        for temp in ("t0.0", "t1.0"):
            cell = summary["genuine_rate"][dataset][temp]["none"]
            mine = [r["genuine"] for r in rows if r["dataset"] == dataset and r["perturbation"] == "none"
                    and f"t{r['temperature']!r}" == temp]  # fmt: skip
            assert cell["rate"] == pytest.approx(sum(mine) / len(mine))
    assert json.loads((tmp_path / "summary.json").read_text())["n_samples"] == len(rows)
    for name in ("rate_vs_temperature.png", "labels.png", "accuracy_vs_followup.png", "responses.jsonl"):
        assert (tmp_path / name).exists()


def test_resume_gives_the_uninterrupted_samples(gsm8k, tmp_path):
    from fic.tiny import build_tokenizer

    tok = build_tokenizer("chatml")
    kw = dict(temperatures=[0.0, 1.0], samples=2, perturbations=["none", "question"], limit=5, judge=EveryOtherJudge(),
              chunk_size=2, progress=False, report=False)  # fmt: skip
    probe.run_probe(RecordingBackend(), tok, [gsm8k], tmp_path / "a", **kw)
    with pytest.raises(KeyboardInterrupt):
        probe.run_probe(RecordingBackend(fail_after=4), tok, [gsm8k], tmp_path / "b", **kw)
    with open(tmp_path / "b" / "samples.jsonl", "a") as f:
        f.write('{"dataset": "gsm8k", "item')  # partial line left by the kill
    probe.run_probe(RecordingBackend(), tok, [gsm8k], tmp_path / "b", **kw)

    def rows(d):
        out = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
        return sorted(out, key=lambda r: (r["item_id"], r["temperature"], r["perturbation"], r["sample"]))

    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert len(a) == 5 * 2 * 3 * 2  # none, question and the seed floor `reseed`
    assert a == b


def test_fic_probe_cli_on_a_tiny_model(gsm8k, tmp_path):
    from fic.cli import main
    from fic.tiny import tiny_model

    argv = ["probe", "--model", tiny_model("llama3"), "--datasets", gsm8k, "--limit", "2", "--temperatures", "0,1",
            "--perturbations", "none,truncate", "--response-tokens", "16", "--max-new-tokens", "12",
            "--out", str(tmp_path)]  # fmt: skip
    # GSM8K test item 0 is in the default (learned) judge's fit: refused before a model loads, nothing written
    assert main(argv) == 1
    assert not (tmp_path / "samples.jsonl").exists()
    assert main([*argv, "--allow-judge-overlap"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_samples"] == 2 * 2 * 3  # items x temperatures x (none, truncate, reseed); greedy: 1 sample
    assert set(summary["percent_changed"]) == {"truncate", "reseed"}
    assert summary["judge_overlap"]["n_overlap"] == 1 and summary["judge_overlap"]["items"] == ["gsm8k:0"]
    assert "turns of items inside the judge's fit left out" in summary["overall"]["corrected_note"]


def test_too_long_contexts_are_skipped_and_counted(gsm8k, tmp_path):
    from fic.tiny import build_tokenizer

    summary = probe.run_probe(RecordingBackend(), build_tokenizer("chatml"), [gsm8k], tmp_path, temperatures=[0.0],
                              limit=3, judge=EveryOtherJudge(), max_context=60, progress=False, report=False)  # fmt: skip
    assert summary["skipped_items"]["gsm8k"] == {"no_response": 0, "too_long": 3}
    assert summary["n_samples"] == 0


def test_resume_with_other_settings_is_refused(gsm8k, tmp_path):
    from fic.jsonl import ResumeError
    from fic.tiny import build_tokenizer

    tok = build_tokenizer("chatml")
    kw = dict(temperatures=[0.0], limit=2, judge=EveryOtherJudge(), progress=False, report=False)
    probe.run_probe(RecordingBackend(), tok, [gsm8k], tmp_path, model="a", **kw)
    before = (tmp_path / "samples.jsonl").read_text()
    for change in ({"model": "b"}, {"seed": 1}, {"max_new_tokens": 32}):
        backend = RecordingBackend()
        with pytest.raises(ResumeError, match=f"other settings \\({next(iter(change))}: .*new --out"):
            probe.run_probe(backend, tok, [gsm8k], tmp_path, **{**kw, "model": "a", **change})
        assert backend.calls == 0
    assert (tmp_path / "samples.jsonl").read_text() == before
    # more temperatures only add rows: that is a resume, not other settings
    probe.run_probe(RecordingBackend(), tok, [gsm8k], tmp_path, model="a", **{**kw, "temperatures": [0.0, 1.0]})
    assert (tmp_path / "samples.jsonl").read_text().startswith(before)

"""`fic eval-checkpoints`: which checkpoints it evaluates, how it loads them (LoRA included), and what it writes."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
import torch

from fic import cli
from fic.eval import checkpoint_io, checkpoints
from fic.eval_config import EvalConfig
from fic.tiny import tiny_model

PROMPT = "<|im_start|>user\nHow many legs does a duck have?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def base_path():
    return tiny_model("chatml")


def _save(model, tokenizer, directory, complete=True):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    if complete:
        (directory / "trainer_state.json").write_text(json.dumps({"global_step": 0}))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, base_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path_factory.mktemp("full_run")
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = AutoModelForCausalLM.from_pretrained(base_path)
    for step in (2, 10):
        torch.manual_seed(step)
        with torch.no_grad():
            model.lm_head.weight.add_(0.05 * torch.randn_like(model.lm_head.weight))
        _save(model, tokenizer, run / f"checkpoint-{step}")
    _save(model, tokenizer, run / "checkpoint-12", complete=False)  # still being written
    return run


def lora_model(base_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(base_path)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    with torch.no_grad():  # make the adapter matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return model


def logits(model, tokenizer):
    ids = tokenizer(PROMPT, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        return model(**ids).logits


class FakeProbe:
    """Stands in for the probe: greedy text from the backend under test, turned into a metric."""

    def __init__(self):
        self.calls = []

    def __call__(self, backend, tokenizer, config, out_dir, model_path, progress):
        from fic.generation import SamplingParams

        text = backend.generate([PROMPT], SamplingParams(max_new_tokens=8))[0][0]
        self.calls.append((model_path.name, text))
        out_dir.mkdir(parents=True, exist_ok=True)
        return {"probe/fake/genuine_rate@t0": (len(text) % 7) / 7, "probe/fake/genuine_rate@t1": 0.5}


@pytest.fixture
def fake_probe(monkeypatch):
    fake = FakeProbe()
    monkeypatch.setattr("fic.eval.probe.evaluate", fake)
    return fake


def copy_run(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_listing_orders_by_step_and_spots_incomplete(full_run):
    names = [c.name for c in checkpoints.list_checkpoints(full_run)]
    assert names == ["checkpoint-2", "checkpoint-10", "checkpoint-12"]  # numeric, not lexical
    from fic.checkpoint_state import is_complete

    assert [is_complete(full_run / n) for n in names] == [True, True, False]
    assert checkpoints.checkpoint_step("checkpoint-10") == 10 and checkpoints.checkpoint_step("final") is None


def test_cli_evaluates_each_complete_checkpoint_once(full_run, tmp_path, fake_probe, capsys):
    run = copy_run(full_run, tmp_path / "run")
    argv = ["eval-checkpoints", str(run), "--evaluations", "probe", "--datasets", "fake"]
    assert cli.main(argv) == 0
    assert [c[0] for c in fake_probe.calls] == ["checkpoint-2", "checkpoint-10"]
    out = capsys.readouterr().out
    assert "skipped checkpoint-12: still being written" in out
    for step in (2, 10):
        record = json.loads((run / f"checkpoint-{step}" / "eval" / "metrics.json").read_text())
        assert record["step"] == step and "probe/fake/genuine_rate@t0" in record["metrics"]
    comparison = json.loads((run / "eval" / "comparison.json").read_text())
    assert [c["step"] for c in comparison["checkpoints"]] == [2, 10]
    csv_lines = (run / "eval" / "comparison.csv").read_text().splitlines()
    assert csv_lines[0] == "step,checkpoint,probe/fake/genuine_rate@t0,probe/fake/genuine_rate@t1"
    assert [line.split(",")[0] for line in csv_lines[1:]] == ["2", "10"]
    assert [p.name for p in (run / "eval" / "plots").glob("*.png")] == ["probe_fake_genuine_rate.png"]
    assert "step 10" in (run / "eval" / "report.html").read_text()

    # a second pass skips what is done; the checkpoint that finished saving in the meantime is picked up
    (run / "checkpoint-12" / "trainer_state.json").write_text("{}")
    assert cli.main(argv) == 0
    assert [c[0] for c in fake_probe.calls] == ["checkpoint-2", "checkpoint-10", "checkpoint-12"]
    assert "skipped checkpoint-2: already evaluated" in capsys.readouterr().out
    assert cli.main([*argv, "--force", "--checkpoints", "10"]) == 0
    assert [c[0] for c in fake_probe.calls][-1] == "checkpoint-10" and len(fake_probe.calls) == 4
    history = [json.loads(line) for line in (run / "eval" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 10, 12, 10]
    comparison = json.loads((run / "eval" / "comparison.json").read_text())
    assert [c["step"] for c in comparison["checkpoints"]] == [2, 10, 12]


def test_different_weights_give_different_generations(full_run, tmp_path, fake_probe):
    run = copy_run(full_run, tmp_path / "run")
    checkpoints.evaluate_run(run, EvalConfig(evaluations=["probe"], datasets=["fake"]), only=["2", "checkpoint-10"])
    texts = [text for _, text in fake_probe.calls]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.generation import HFBackend, SamplingParams

    expected = []
    for step in (2, 10):
        path = run / f"checkpoint-{step}"
        backend = HFBackend(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
        expected.append(backend.generate([PROMPT], SamplingParams(max_new_tokens=8))[0][0])
    assert texts == expected


def test_locked_checkpoint_is_skipped_and_stale_lock_taken_over(full_run, tmp_path, fake_probe):
    run = copy_run(full_run, tmp_path / "run")
    lock = run / "checkpoint-2" / "eval" / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}))
    result = checkpoints.evaluate_run(run, EvalConfig(evaluations=["probe"], datasets=["fake"]))
    assert result["evaluated"] == ["checkpoint-10"]
    assert ("checkpoint-2", f"being evaluated by {socket.gethostname()}:{os.getpid()}") in result["skipped"]
    dead = 2**22 + 12345  # above the default pid_max: no such process
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "time": time.time()}))
    result = checkpoints.evaluate_run(run, EvalConfig(evaluations=["probe"], datasets=["fake"]))
    assert result["evaluated"] == ["checkpoint-2"] and not lock.exists()


def test_lora_checkpoint_loads_the_adapted_model(base_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model = lora_model(base_path)
    _save(model, tokenizer, tmp_path / "checkpoint-1")
    assert checkpoint_io.adapter_base(tmp_path / "checkpoint-1") == base_path
    loaded, loaded_tok = checkpoint_io.load_checkpoint(tmp_path / "checkpoint-1", device="cpu")
    adapted = logits(model, tokenizer)
    assert torch.allclose(logits(loaded, loaded_tok), adapted, atol=1e-4)
    assert not torch.allclose(logits(AutoModelForCausalLM.from_pretrained(base_path), tokenizer), adapted, atol=1e-2)
    # engines that need a path (vLLM) get the merged weights in a folder
    merged = checkpoint_io.materialize(tmp_path / "checkpoint-1")
    assert merged == tmp_path / "checkpoint-1" / "eval" / ".merged"
    assert torch.allclose(logits(AutoModelForCausalLM.from_pretrained(merged), tokenizer), adapted, atol=1e-4)
    assert checkpoint_io.materialize(merged.parent.parent) == merged  # reused, not rewritten


def test_real_lic_evaluation_of_a_lora_run(base_path, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-checkpoints-secret-42")
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    _save(lora_model(base_path), AutoTokenizer.from_pretrained(base_path), run / "checkpoint-5")
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "config.json").write_text(json.dumps({
        "enabled": True, "evaluations": ["lic"], "lic": {"limit": 2, "max_new_tokens": 8, "modes": ["full", "sharded"]},
        "judge_base_url": "https://user:pw-secret-999@judge.example/v1",
    }))  # fmt: skip
    assert cli.main(["eval-checkpoints", str(run)]) == 0
    lic_dir = run / "checkpoint-5" / "eval" / "lic"
    assert {"episodes.jsonl", "summary.json", "lic.png", "report.html"} <= {p.name for p in lic_dir.iterdir()}
    metrics = json.loads((run / "checkpoint-5" / "eval" / "metrics.json").read_text())["metrics"]
    summary = json.loads((lic_dir / "summary.json").read_text())
    assert metrics["lic/p_full"] == summary["modes"]["full"]["P"]
    assert set(metrics) == {f"lic/{k}_{m}" for k in ("p", "a90", "u90_10") for m in ("full", "sharded")} | (
        {"lic/sharded_over_full"} if "sharded_over_full" in summary else set()
    )
    for path in run.rglob("*"):
        if path.is_file() and path != run / "eval" / "config.json":  # that one is the test's own input
            data = path.read_bytes()
            assert b"pw-secret-999" not in data and b"sk-test-checkpoints-secret-42" not in data, path


def test_resolve_config_uses_the_run_config_then_the_flags(tmp_path):
    import argparse

    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "config.json").write_text(json.dumps({
        "enabled": True, "datasets": ["healthbench:x.jsonl"], "temperatures": [0.7], "samples": 3,
        "field_from_a_newer_version": 1,
    }))  # fmt: skip
    parser = argparse.ArgumentParser()
    checkpoints.add_arguments(parser)
    config = checkpoints.resolve_config(parser.parse_args([str(tmp_path), "--temperatures", "0,1.0", "--limit", "4"]))
    assert (config.datasets, config.temperatures, config.samples, config.limit) == (["healthbench:x.jsonl"],
                                                                                   [0.0, 1.0], 3, 4)  # fmt: skip


def test_input_mistakes_are_one_line_errors(full_run, tmp_path, capsys):
    assert cli.main(["eval-checkpoints", str(tmp_path / "missing"), "--datasets", "x"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["eval-checkpoints", str(tmp_path / "empty"), "--datasets", "x"]) == 2
    assert "no checkpoint-N folder" in capsys.readouterr().err
    assert cli.main(["eval-checkpoints", str(full_run), "--datasets", "x", "--checkpoints", "99"]) == 2
    assert "checkpoint-99" in capsys.readouterr().err
    assert cli.main(["eval-checkpoints", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "eval.datasets" in err and "without the eval callback" in err


def test_a_later_evaluation_adds_to_the_metrics(full_run, tmp_path, fake_probe, monkeypatch):
    run = copy_run(full_run, tmp_path / "run")
    monkeypatch.setattr("fic.eval.lic.evaluate", lambda *a: {"lic/p_full": 0.25})
    checkpoints.evaluate_run(run, EvalConfig(evaluations=["probe"], datasets=["fake"]), only=["2"])
    checkpoints.evaluate_run(run, EvalConfig(evaluations=["lic"]), only=["2"], force=True)
    saved = json.loads((run / "checkpoint-2" / "eval" / "metrics.json").read_text())["metrics"]
    assert set(saved) == {"probe/fake/genuine_rate@t0", "probe/fake/genuine_rate@t1", "lic/p_full"}
    (step2,) = json.loads((run / "eval" / "comparison.json").read_text())["checkpoints"]
    assert step2["metrics"] == saved

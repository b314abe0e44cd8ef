"""The checkpoint-evaluation callback: files per checkpoint, run report, wandb (offline), LoRA, multi-process.

Run as a script (`accelerate launch ... tests/test_callbacks.py OUT_DIR`) it trains the tiny model with the callback;
the slow test below launches it on two CPU processes.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV_SECRET = "sk-test-env-secret-31337"
RECIPE_SECRET = "sk-recipe-secret-27182"


def write_questions(path: Path, n: int = 3) -> str:
    """A small GSM8K-format file, so the probe needs no shared data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"question": f"A farm has {i + 2} ducks and buys {i + 3} more. How many ducks now?",
                                "answer": f"{i + 2}+{i + 3}={2 * i + 5}\n#### {2 * i + 5}"}) + "\n")  # fmt: skip
    return f"gsm8k:{path}"


def tiny_dataset(tokenizer, n: int = 8):
    import torch

    texts = [tokenizer.apply_chat_template([{"role": "user", "content": f"What is {i} + {i}?"},
                                            {"role": "assistant", "content": f"It is {2 * i}."}], tokenize=False)
             for i in range(n)]  # fmt: skip

    class Texts(torch.utils.data.Dataset):
        def __len__(self):
            return len(texts)

        def __getitem__(self, i):
            return {"input_ids": tokenizer(texts[i], add_special_tokens=False)["input_ids"]}

    def collate(batch):
        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.tensor([b["input_ids"] + [tokenizer.pad_token_id] * (width - len(b["input_ids"])) for b in batch])
        mask = torch.tensor([[1] * len(b["input_ids"]) + [0] * (width - len(b["input_ids"])) for b in batch])
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    return Texts(), collate


def train(out_dir, eval_config, *, max_steps=2, save_steps=1, report_to="none", extra_callbacks=(), lora=True):
    """Train the tiny chatml model for `max_steps` with the eval callback; return (trainer, eval callback)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from fic.tiny import tiny_model
    from fic.tracking import configure_wandb
    from fic.trainers.callbacks import EvalCallback

    path = tiny_model("chatml")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    if lora:
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    dataset, collate = tiny_dataset(tokenizer)
    configure_wandb(out_dir, report_to)
    args = TrainingArguments(
        output_dir=str(out_dir), max_steps=max_steps, save_steps=save_steps, per_device_train_batch_size=4,
        learning_rate=1e-3, logging_steps=1, report_to=report_to, run_name="tiny-eval-run", use_cpu=True,
        disable_tqdm=True, save_only_model=True,
    )  # fmt: skip
    callback = EvalCallback(eval_config)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate,
                      processing_class=tokenizer, callbacks=[callback, *extra_callbacks])  # fmt: skip
    trainer.train()
    return trainer, callback


class StubJudge:
    """Deterministic labels without loading the sentence encoder (the judges have their own tests)."""

    name = "stub"

    def judge(self, cases):
        from fic.judges import Verdict

        return [Verdict("genuine_followup" if len(c.user_turn) % 2 else "degenerate_short", confidence=1.0)
                for c in cases]  # fmt: skip


@pytest.fixture
def stub_judge(monkeypatch):
    import fic.eval.probe

    monkeypatch.setattr(fic.eval.probe, "make_judge", lambda *a, **k: StubJudge())


def _parse_wandb_log(data: bytes) -> list:
    """The protobuf records of an offline wandb run file (a LevelDB-style log)."""
    from wandb.proto import wandb_internal_pb2 as pb

    assert data[:4] == b":W&B"
    records, pos, block, buf = [], 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):  # a record still being written
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            records.append(record)
    return records


def wandb_records(run_dir: Path, timeout: float = 60.0) -> list:
    """Records of the offline wandb run file, read once its exit record is there: `wandb.finish()` can return before
    the wandb service has flushed the file (CI once read it with no history record yet)."""
    files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    deadline = time.monotonic() + timeout
    while True:
        records = _parse_wandb_log(files[0].read_bytes())
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_tiny_training_run_evaluates_every_checkpoint(tmp_path, monkeypatch, stub_judge):
    import wandb

    from fic.eval_config import EvalConfig
    from fic.trainers.callbacks import RecipeConfigCallback

    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    spec = write_questions(tmp_path / "data" / "questions.jsonl")
    config = EvalConfig(enabled=True, evaluations=["probe", "lic"], datasets=[spec], temperatures=[0.0, 1.0],
                        samples=2, limit=2, max_new_tokens=12, response_tokens=12,
                        blocks={"lic": {"limit": 2, "max_new_tokens": 8}}, log_samples=5)  # fmt: skip
    recipe = {"method": "collab_sft", "learning_rate": 1e-3, "eval": {"enabled": True, "datasets": [spec]},
              "judge_api_key": RECIPE_SECRET, "hub_token": "hf_token_value_xyz",
              "note": f"the key is {ENV_SECRET}"}  # fmt: skip
    run = tmp_path / "run"
    try:
        trainer, callback = train(run, config, report_to=["wandb"], extra_callbacks=[RecipeConfigCallback(recipe)])
    finally:
        wandb.finish()

    # evaluation files in each checkpoint folder
    for step in (1, 2):
        ckpt = run / f"checkpoint-{step}" / "eval"
        record = json.loads((ckpt / "metrics.json").read_text())
        assert record["step"] == step
        names = set(record["metrics"])
        assert {f"probe/gsm8k/genuine_rate@t{t}" for t in ("0.0", "1.0")} <= names
        assert {"lic/p_full", "lic/p_sharded", "lic/a90_concat"} <= names
        assert {"samples.jsonl", "summary.json", "report.html"} <= {p.name for p in (ckpt / "probe").iterdir()}
        assert (ckpt / "lic" / "report.html").is_file()
        samples = [json.loads(line) for line in (ckpt / "probe" / "samples.jsonl").read_text().splitlines()]
        assert len(samples) == 2 * 2 * 2  # items x temperatures x samples
        rate = sum(s["genuine"] for s in samples if s["temperature"] == 1.0) / 4
        assert record["metrics"]["probe/gsm8k/genuine_rate@t1.0"] == pytest.approx(rate)
    assert [r["step"] for r in callback.records] == [1, 2]

    # the run report and comparison cover both checkpoints, with links to their reports
    report = (run / "eval" / "report.html").read_text()
    assert "step 1" in report and "step 2" in report
    assert 'href="../checkpoint-2/eval/probe/report.html"' in report
    assert [c["step"] for c in json.loads((run / "eval" / "comparison.json").read_text())["checkpoints"]] == [1, 2]
    assert json.loads((run / "eval" / "config.json").read_text())["datasets"] == [spec]

    # offline wandb: metrics at each checkpoint's step, a sample table, the recipe (redacted) in the config
    logged, tables, config_keys = {}, 0, {}
    for record in wandb_records(run):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {(i.key or "/".join(i.nested_key)): i.value_json for i in record.history.item}
            if "probe/gsm8k/genuine_rate@t0.0" in items:
                logged[int(float(items["train/global_step"]))] = float(items["probe/gsm8k/genuine_rate@t0.0"])
                tables += any(k.startswith("probe/samples") for k in items)
        if kind == "config":
            config_keys.update({(i.key or "/".join(i.nested_key)): i.value_json for i in record.config.update})
        if kind == "run":
            assert record.run.display_name == "tiny-eval-run"
    expected = {r["step"]: r["metrics"]["probe/gsm8k/genuine_rate@t0.0"] for r in callback.records}
    assert logged == pytest.approx(expected)
    assert tables == 2
    table_files = list(run.glob("wandb/offline-run-*/files/media/table/probe/samples_*.table.json"))
    assert len(table_files) == 2
    table = json.loads(table_files[0].read_text())
    assert table["columns"][:4] == ["step", "dataset", "temperature", "control"] and len(table["data"]) == 5
    recipe_logged = json.loads(config_keys["recipe"])
    recipe_logged = recipe_logged.get("value", recipe_logged)
    assert recipe_logged["judge_api_key"] == "<redacted>" and recipe_logged["hub_token"] == "<redacted>"
    assert recipe_logged["learning_rate"] == 1e-3

    # no secret anywhere: checkpoints, evaluation files, reports, wandb files
    for path in run.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (ENV_SECRET, RECIPE_SECRET, "hf_token_value_xyz"):
                assert secret.encode() not in data, (path, secret)


def _greedy(backend) -> str:
    from fic.generation import SamplingParams

    prompt = "<|im_start|>user\nName a bird.<|im_end|>\n<|im_start|>assistant\n"
    return backend.generate([prompt], SamplingParams(max_new_tokens=10))[0][0]


def test_lora_is_evaluated_adapted_in_memory_and_from_disk(tmp_path, monkeypatch):
    import copy

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.eval_config import EvalConfig
    from fic.generation import HFBackend
    from fic.tiny import tiny_model
    from fic.trainers.callbacks import EvalCallback

    seen = []

    def fake_probe(backend, tokenizer, config, out_dir, model_path, progress):
        seen.append(_greedy(backend))
        return {"probe/x/genuine_rate@t0": 0.0}

    monkeypatch.setattr("fic.eval.probe.evaluate", fake_probe)
    path = tiny_model("chatml")
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    model.train()
    ckpt = tmp_path / "checkpoint-3"
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)

    merged = _greedy(HFBackend(copy.deepcopy(model).merge_and_unload(), tokenizer))  # the adapters folded in
    base = _greedy(HFBackend(AutoModelForCausalLM.from_pretrained(path), tokenizer))
    assert merged != base  # otherwise the test could not tell them apart

    for load_from in ("memory", "disk"):
        config = EvalConfig(enabled=True, datasets=["x"], load_from=load_from)
        EvalCallback(config, tokenizer=tokenizer).evaluate(ckpt, 3, model, None, tmp_path)
    assert seen == [merged, merged]
    assert model.training  # the training mode is restored after the evaluation
    history = (tmp_path / "eval" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [3, 3]


def test_every_n_saves(tmp_path, monkeypatch):
    from fic.eval_config import EvalConfig

    calls = []
    monkeypatch.setattr("fic.eval.probe.evaluate",
                        lambda b, t, c, o, model_path, p: calls.append(model_path.name) or {"probe/x@t0": 1.0})  # fmt: skip
    train(tmp_path / "run", EvalConfig(enabled=True, datasets=["x"], every_n_saves=2), max_steps=4, lora=False)
    assert calls == ["checkpoint-2", "checkpoint-4"]
    assert not (tmp_path / "run" / "checkpoint-1" / "eval").exists()


def test_config_mistakes_name_the_field():
    from fic.eval_config import EvalConfig
    from fic.recipe import RecipeError
    from fic.trainers.callbacks import EvalCallback

    with pytest.raises(RecipeError, match="eval.backend='vllm'.*fic eval-checkpoints"):
        EvalCallback(EvalConfig(enabled=True, datasets=["x"], backend="vllm"))
    with pytest.raises(ValueError, match="eval.datasets: empty"):
        EvalConfig(enabled=True)
    with pytest.raises(ValueError, match="eval.datasets: empty"):  # the one guard, in EvalConfig
        EvalCallback(EvalConfig(enabled=False))
    for kwargs, match in [({"evaluations": ["probe", "bleu"]}, "eval.evaluations: unknown"),
                          ({"judge": "llm"}, "eval.judge='llm' needs eval.judge_base_url"),
                          ({"temperatures": [-1.0]}, "eval.temperatures"),
                          ({"every_n_saves": 0}, "eval.every_n_saves"),
                          ({"load_from": "cloud"}, "eval.load_from")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            EvalConfig(**kwargs)


def test_default_callbacks_follow_the_recipe():
    from types import SimpleNamespace

    from fic.eval_config import EvalConfig
    from fic.trainers.callbacks import EvalCallback, WatchCommandCallback
    from fic.trainers.common import default_callbacks
    from fic.trainers.preemption import PreemptionCallback

    recipe = SimpleNamespace(raw={"api_key": "sk-abcdefghijk", "eval": {"enabled": True}}, name="demo")
    off = default_callbacks(SimpleNamespace(recipe=recipe, eval=EvalConfig(), tokenizer=None))
    assert [type(c) for c in off] == [PreemptionCallback, WatchCommandCallback]
    on = default_callbacks(
        SimpleNamespace(recipe=recipe, eval=EvalConfig(enabled=True, datasets=["x"]), tokenizer=None)
    )
    assert [type(c) for c in on] == [PreemptionCallback, EvalCallback]
    assert on[1].recipe_config.values["recipe"]["api_key"] == "<redacted>"


@pytest.mark.slow
def test_two_processes_evaluate_once(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT / "tests"),
           "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip
    # the documented command: accelerate_configs/cpu.yaml with two processes (a gloo group on the CPU)
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
               str(ROOT / "accelerate_configs" / "cpu.yaml"), "--num_processes", "2", "--main_process_port", "0",
               str(Path(__file__)), str(out)]  # fmt: skip
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.time() - started
    # the first traceback is the failing rank's own (the other rank's teardown follows it); the tail shows the end
    first = done.stderr.find("Traceback")
    assert done.returncode == 0, (done.stderr[first : first + 4000] if first >= 0 else "") + done.stderr[-3000:]
    ranks = {json.loads(p.read_text())["rank"]: json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert set(ranks) == {0, 1} and ranks[0]["world_size"] == 2
    assert ranks[0]["evaluated"] == [1, 2] and ranks[1]["evaluated"] == []  # the main process only
    history = [json.loads(line) for line in (out / "eval" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2]
    for step in (1, 2):
        metrics = json.loads((out / f"checkpoint-{step}" / "eval" / "metrics.json").read_text())["metrics"]
        assert "probe/gsm8k/genuine_rate@t1.0" in metrics
    assert "step 2" in (out / "eval" / "report.html").read_text()
    print(f"two-process run with evaluation: {elapsed:.1f} s")


def _main(out_dir: str) -> None:
    """Entry point for the two-process test: train with the real heuristic judge, record what each rank did."""
    from accelerate import PartialState

    from fic.distributed import end_launch, use_cpu_group_without_gpu
    from fic.eval_config import EvalConfig

    use_cpu_group_without_gpu()

    out = Path(out_dir)
    spec = write_questions(out.parent / "data" / "questions.jsonl", n=2)
    config = EvalConfig(enabled=True, evaluations=["probe", "lic"], datasets=[spec], temperatures=[1.0], samples=2,
                        limit=2, max_new_tokens=12, response_tokens=12,
                        blocks={"lic": {"limit": 2, "max_new_tokens": 8}})  # fmt: skip
    trainer, callback = train(out, config, max_steps=2, save_steps=1)
    state = PartialState()
    (out / f"rank{state.process_index}.json").write_text(json.dumps({
        "rank": state.process_index, "world_size": trainer.args.world_size,
        "evaluated": [r["step"] for r in callback.records],
    }))  # fmt: skip
    end_launch()  # as train.py does: leave the gloo group before the process exits


if __name__ == "__main__":
    _main(sys.argv[1])


def test_wandb_goes_offline_without_a_key(tmp_path, monkeypatch):
    from fic.tracking import configure_wandb

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT"):  # restored after the test
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "keep"))  # an explicit choice is kept
    assert configure_wandb(tmp_path / "out", ["wandb"]) == "offline"
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["WANDB_DIR"] == str(tmp_path / "keep")
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert configure_wandb(tmp_path / "out", "wandb") == "online" and "WANDB_MODE" not in os.environ
    assert configure_wandb(tmp_path / "out", "none") is None


def test_redact_removes_every_kind_of_secret(monkeypatch):
    from fic.tracking import REDACTED, redact

    monkeypatch.setenv("FIC_JUDGE_API_KEY", "judge-key-0123456789")
    monkeypatch.setenv("MAX_NEW_TOKENS", "256")  # not a secret: a token count
    raw = {
        "judge_api_key": "literal-key", "hub_token": "hf_abcdefgh", "nested": {"password": "pw", "lr": 0.1},
        "max_new_tokens": 64, "pad_token": "<pad>", "empty_api_key": None,
        "judge_base_url": "https://alice:s3cretpass@judge.example/v1",
        "notes": ["uses judge-key-0123456789 today", "fine"], "tokenizer_name_or_path": "tok",
    }  # fmt: skip
    out = redact(raw)
    assert out["judge_api_key"] == out["hub_token"] == out["nested"]["password"] == REDACTED
    assert out["judge_base_url"] == f"https://{REDACTED}@judge.example/v1"
    assert out["notes"] == [f"uses {REDACTED} today", "fine"]
    assert (out["max_new_tokens"], out["pad_token"], out["tokenizer_name_or_path"]) == (64, "<pad>", "tok")
    assert out["empty_api_key"] is None and out["nested"]["lr"] == 0.1
    assert raw["judge_api_key"] == "literal-key"  # a copy; the input is untouched


def test_callback_skips_a_checkpoint_another_evaluator_holds(tmp_path, monkeypatch):
    from fic.eval import checkpoints
    from fic.eval_config import EvalConfig
    from fic.trainers.callbacks import EvalCallback

    calls = []
    monkeypatch.setattr("fic.eval.probe.evaluate", lambda *a: calls.append(1) or {})
    ckpt = tmp_path / "checkpoint-4"
    lock = checkpoints.CheckpointLock(ckpt)
    assert lock.acquire()
    assert (
        EvalCallback(EvalConfig(datasets=["x"]), tokenizer=object()).evaluate(ckpt, 4, object(), None, tmp_path) == {}
    )
    assert calls == [] and not (tmp_path / "eval" / "history.jsonl").exists()
    lock.release()

"""Checkpoint evaluation follows the training dtype: fp32 master weights saved by a `bf16: true` run are evaluated in
bfloat16 (as training computed, at half the memory) unless `--dtype` says otherwise, and the record says which."""

from __future__ import annotations

import json
import pickle
import zipfile

import pytest
import torch
from test_checkpoints import FakeProbe, _save

from fic import cli
from fic.eval import checkpoint_io
from fic.tiny import tiny_model


class DtypeProbe(FakeProbe):
    """The fake probe, also noting the dtype of the model it was handed."""

    def __call__(self, backend, tokenizer, config, out_dir, model_path, progress):
        self.dtypes = [*getattr(self, "dtypes", []), backend.model.dtype]
        return super().__call__(backend, tokenizer, config, out_dir, model_path, progress)


@pytest.fixture
def probe(monkeypatch):
    fake = DtypeProbe()
    monkeypatch.setattr("fic.eval.probe.evaluate", fake)
    return fake


def training_args(folder, **flags):
    """A `training_args.bin` as the Trainer writes it (torch.save of its TrainingArguments), with `flags` set."""
    from trl import SFTConfig

    args = SFTConfig(output_dir=str(folder), report_to=[], bf16=False)  # bf16 fails on a CPU machine: set it after
    for key, value in flags.items():
        setattr(args, key, value)
    torch.save(args, folder / "training_args.bin")


def run_with_checkpoint(tmp_path, **flags):
    """A run folder with one fp32 checkpoint of the tiny ChatML model and, with `flags`, its training arguments."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model("chatml")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    checkpoint = tmp_path / "run" / "checkpoint-2"
    _save(model, AutoTokenizer.from_pretrained(path), checkpoint)
    assert json.loads((checkpoint / "config.json").read_text()).get("dtype") == "float32"
    if flags:
        training_args(checkpoint, **flags)
    return tmp_path / "run"


def evaluated_dtype(run, probe, *extra) -> tuple[torch.dtype, str]:
    argv = ["eval-checkpoints", str(run), "--evaluations", "probe", "--datasets", "fake", "--force", *extra]
    assert cli.main(argv) == 0
    record = json.loads((run / "checkpoint-2" / "eval" / "metrics.json").read_text())
    return probe.dtypes[-1], record["dtype"]


def test_an_fp32_checkpoint_of_a_bf16_run_is_evaluated_in_bf16(tmp_path, probe, caplog):
    run = run_with_checkpoint(tmp_path, bf16=True)
    with caplog.at_level("INFO", logger="fic.eval.checkpoint_io"):
        assert evaluated_dtype(run, probe) == (torch.bfloat16, "bfloat16")
    assert "checkpoint-2: loading in bfloat16 (trained with bf16=true (checkpoint-2/training_args.bin))" in caplog.text
    assert evaluated_dtype(run, probe, "--dtype", "float32") == (torch.float32, "float32")  # --dtype wins


def test_fp16_runs_fp32_runs_and_checkpoints_without_training_args(tmp_path, probe):
    assert evaluated_dtype(run_with_checkpoint(tmp_path / "a", fp16=True), probe) == (torch.float16, "float16")
    assert evaluated_dtype(run_with_checkpoint(tmp_path / "b", bf16=False), probe) == (torch.float32, "float32")
    assert evaluated_dtype(run_with_checkpoint(tmp_path / "c"), probe) == (torch.float32, "float32")
    assert checkpoint_io.evaluation_dtype(tmp_path / "c" / "run" / "checkpoint-2") == (
        "auto", "no training_args.bin: the saved dtype"
    )  # fmt: skip


def test_the_full_model_folder_of_a_sharded_checkpoint_reads_the_checkpoints_arguments(tmp_path):
    checkpoint = tmp_path / "checkpoint-4"
    (checkpoint / "full_model").mkdir(parents=True)
    training_args(checkpoint, bf16=True)
    assert checkpoint_io.evaluation_dtype(checkpoint / "full_model")[0] == "bfloat16"


class Payload:
    def __reduce__(self):
        return (open, ("/tmp/fic-test-training-args-ran", "w"))


def test_reading_training_args_runs_no_code_from_the_file(tmp_path):
    from pathlib import Path

    marker = Path("/tmp/fic-test-training-args-ran")
    marker.unlink(missing_ok=True)
    with zipfile.ZipFile(tmp_path / "training_args.bin", "w") as archive:
        archive.writestr("training_args/data.pkl", pickle.dumps({"bf16": True, "payload": Payload()}))
    assert checkpoint_io.training_flags(tmp_path) == {"bf16": False, "fp16": False}
    assert not marker.exists()
    (tmp_path / "training_args.bin").write_bytes(b"not a zip")
    assert checkpoint_io.training_flags(tmp_path) is None

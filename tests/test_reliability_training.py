"""Training survives kills: `python train.py recipe=collab_sft_tiny` on CPU, killed and restarted, or preempted.

* SIGKILL after the first checkpoint, then a restart with `resume_from_checkpoint=auto`, ends with the losses and
  weights of an uninterrupted run (deterministic CPU settings), and resumes rather than starting over; a checkpoint
  folder cut off by the kill in the middle of a save is skipped, not loaded.
* SIGTERM (what SLURM / Kubernetes send before killing a job) makes the run save a whole checkpoint at the step it
  reached, log why, and exit 0.

Both signals come from inside the run, at the end of step `SIGNAL_STEP` (tests/multiproc_entry.py's
`FIC_TEST_SIGKILL` / `FIC_TEST_SIGTERM` hooks): real signals, at a step fixed by the test rather than by how far the
run got while the test polled for its first checkpoint.

* API keys in the environment of a run (judge, OpenAI, Hugging Face, wandb) reach none of its files, the wandb
  offline run included, nor its log.

The first two need the trainer to install `fic.trainers.common.default_callbacks(run)` (the preemption callback) and to call
`trainer.train(resume_from_checkpoint=resume_point(args))`.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_reliability_eval import child_env, finish, start

pytestmark = pytest.mark.slow

MAX_STEPS, SAVE_STEPS = 40, 10
SIGNAL_STEP = 15  # after the checkpoint of step 10, before that of step 20


def train_cmd(out: Path, *extra: str) -> list[str]:
    """A small, deterministic collab_sft_tiny run: real conversations only, no before/after evaluation."""
    return [
        sys.executable, "train.py", "recipe=collab_sft_tiny", f"output_dir={out}", f"max_steps={MAX_STEPS}",
        "save_strategy=steps", f"save_steps={SAVE_STEPS}", "logging_steps=1", "seed=0", "full_determinism=true",
        "dataloader_num_workers=0", "dataset_limit=16", "per_device_train_batch_size=2", "followup_contexts=[]",
        "eval.datasets=[]", "eval.enabled=false", "report_to=none", "resume_from_checkpoint=auto", *extra,
    ]  # fmt: skip


def env(shared_data: Path, **extra) -> dict:
    return child_env(FIC_SHARED_DATA=str(shared_data), **extra)


def signalled_cmd(out: Path) -> list[str]:
    """`train_cmd(out)` through the test entry, whose FIC_TEST_SIGKILL / FIC_TEST_SIGTERM hook signals the run from
    inside at the end of a given step (records in OUT.ranks, outside the run's folder)."""
    python, _, *args = train_cmd(out)
    return [python, str(ROOT / "tests" / "multiproc_entry.py"), str(out.with_suffix(".ranks")), *args]


def whole(checkpoint: Path) -> bool:
    return (checkpoint / "trainer_state.json").is_file()


def checkpoints(out: Path) -> dict[int, Path]:
    return {int(p.name.split("-")[1]): p for p in out.glob("checkpoint-*") if p.is_dir()}


def losses(checkpoint: Path) -> list[tuple[int, float]]:
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return [(e["step"], e["loss"]) for e in state["log_history"] if "loss" in e]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def assert_same_training(a: Path, b: Path) -> None:
    la, lb = losses(a / f"checkpoint-{MAX_STEPS}"), losses(b / f"checkpoint-{MAX_STEPS}")
    assert [s for s, _ in la] == [s for s, _ in lb] == list(range(1, MAX_STEPS + 1))
    assert [x for _, x in lb] == pytest.approx([x for _, x in la], abs=1e-6)
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    worst = max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)
    assert worst <= 1e-6, f"final weights differ by up to {worst}"


# Keys a user has in the environment; the reference run reports to wandb (offline) with them set.
SECRETS = {"FIC_JUDGE_API_KEY": "sk-judge-SECRET-5521", "OPENAI_API_KEY": "sk-openai-SECRET-7730",
           "HF_TOKEN": "hf_SECRETtoken0000000042", "WANDB_API_KEY": "feedc0de" * 5}  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory, shared_data):
    """An uninterrupted run, started at once so it trains while the tests run others beside it. It reports to wandb
    (offline) with API keys in its environment, so its files also show where keys could leak."""
    out = tmp_path_factory.mktemp("train") / "reference"
    environ = {**env(shared_data), **SECRETS, "WANDB_MODE": "offline"}
    proc = start(train_cmd(out, "report_to=[wandb]"), out.parent / "reference.log", environ)
    result = {}

    def wait() -> tuple[Path, str]:
        if not result:
            rc, log = finish(proc, timeout=600)
            assert rc == 0, log[-3000:]
            result.update(out=out, log=log)
        return result["out"], result["log"]

    yield wait
    if proc.poll() is None:
        proc.kill()
        finish(proc)


def test_sigterm_saves_a_checkpoint_at_the_step_reached_and_exits_cleanly(reference, shared_data, tmp_path):
    # (`reference` only starts the uninterrupted run here, so it trains beside this one)
    out = tmp_path / "run"
    proc = start(signalled_cmd(out), tmp_path / "preempted.log", env(shared_data, FIC_TEST_SIGTERM=f"0:{SIGNAL_STEP}"))
    rc, log = finish(proc, timeout=600)
    assert rc == 0, f"SIGTERM should end the run cleanly, got exit {rc}:\n{log[-3000:]}"
    assert "received signal 15" in log and "saving a checkpoint" in log
    saved = {step: p for step, p in checkpoints(out).items() if whole(p)}
    assert sorted(saved) == [SAVE_STEPS, SIGNAL_STEP], f"expected checkpoints {SAVE_STEPS} and {SIGNAL_STEP}: {saved}"
    step = max(saved)
    state = json.loads((saved[step] / "trainer_state.json").read_text())
    assert state["global_step"] == step
    from fic.trainers.common import checkpoint_problem

    assert checkpoint_problem(saved[step]) is None
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "model.safetensors"):
        assert (saved[step] / name).is_file(), f"{name} missing from the preemption checkpoint"


def test_sigkill_then_resume_matches_an_uninterrupted_run(reference, shared_data, tmp_path):
    out = tmp_path / "run"
    victim = start(signalled_cmd(out), tmp_path / "killed.log", env(shared_data, FIC_TEST_SIGKILL=f"0:{SIGNAL_STEP}"))
    rc, log = finish(victim, timeout=600)
    assert rc == -signal.SIGKILL, f"the run was not killed at step {SIGNAL_STEP} (exit {rc}):\n{log[-3000:]}"
    saved = {step: p for step, p in checkpoints(out).items() if whole(p)}
    assert sorted(saved) == [SAVE_STEPS], f"the kill at step {SIGNAL_STEP} left checkpoints {sorted(saved)}"
    latest = saved[max(saved)]
    stamp = (latest / "trainer_state.json").stat().st_mtime_ns
    # A kill during a save leaves a checkpoint without trainer_state.json and with a cut-off weights file.
    partial = out / f"checkpoint-{MAX_STEPS - SAVE_STEPS}"
    partial.mkdir(exist_ok=True)
    data = (latest / "model.safetensors").read_bytes()
    (partial / "model.safetensors").write_bytes(data[: len(data) // 3])

    rc, log = finish(start(train_cmd(out), tmp_path / "resumed.log", env(shared_data)), timeout=600)
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log
    assert (latest / "trainer_state.json").stat().st_mtime_ns == stamp, (
        f"the restart rewrote {latest.name}: it trained from scratch instead of resuming from it "
        "(the trainer must call trainer.train(resume_from_checkpoint=resume_point(args)))"
    )
    assert whole(partial), "the partial checkpoint folder should have been written again, whole"
    assert_same_training(reference()[0], out)


def test_api_keys_in_the_environment_reach_no_output_file_or_log(reference):
    """Checkpoints, training_args.bin, trainer_state.json, the wandb offline run (config, logs) and the log."""
    out, log = reference()
    assert list((out / "wandb").glob("offline-run-*")), "the reference run did not report to wandb"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in files)
    for name, secret in SECRETS.items():
        assert secret not in log, name
        leaked = [str(p.relative_to(out)) for p in files if secret.encode() in p.read_bytes()]
        assert not leaked, f"{name} written to {leaked}"

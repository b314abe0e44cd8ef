"""`fic eval-checkpoints RUN_DIR --watch` (eval/watch.py): checkpoints evaluated while the run trains, each once.

The slow test runs a tiny collab SFT training and a watcher in two processes, kills the watcher (SIGKILL) in the
middle of a checkpoint's evaluation, starts it again, and checks that every checkpoint was evaluated exactly once,
the interrupted one included, and that the watcher stopped because the run wrote its final model. The fast tests
check when a run counts as finished, the idle timeout and the one-line errors.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from test_multiprocess import conversations, launch_env
from test_reliability_eval import complete_lines, finish, start, wait_until

from fic import cli
from fic.eval import watch
from fic.eval.checkpoints import checkpoint_step, is_evaluated

ROOT = Path(__file__).resolve().parents[1]

# The cheapest evaluation: LiC on 4 synthetic tasks, short replies (its rows are written mode by mode).
EVAL = ["eval.enabled=false", "eval.evaluations=[lic]", "eval.datasets=[]", "eval.lic.limit=4",
        "eval.lic.modes=[full,sharded]", "eval.lic.max_new_tokens=8"]  # fmt: skip


def watcher(run: Path, log: Path):
    command = [sys.executable, "-m", "fic.cli", "eval-checkpoints", str(run), "--watch", "--poll", "0.2",
               "--idle-timeout", "600"]  # fmt: skip
    return start(command, log, launch_env())


def episodes(checkpoint: Path) -> list[tuple]:
    path = checkpoint / "eval" / "lic" / "episodes.jsonl"
    return [(r["mode"], r["run"], r["task_id"]) for r in map(json.loads, path.read_text().splitlines())]


@pytest.mark.slow
def test_a_watcher_evaluates_every_checkpoint_once_even_when_killed(tmp_path):
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    run = tmp_path / "run"
    train = [sys.executable, str(ROOT / "train.py"), "recipe=collab_sft_tiny", f"train_datasets=[{data}]",
             "followup_contexts=[]", "max_steps=3", "save_strategy=steps", "save_steps=1",
             "per_device_train_batch_size=2", "report_to=none", "logging_steps=1", *EVAL, f"output_dir={run}"]  # fmt: skip
    trainer = start(train, tmp_path / "train.log", launch_env())
    wait_until(trainer, lambda: (run / "eval" / "config.json").is_file(), "training started")

    first = watcher(run, tmp_path / "watch1.log")
    rows = lambda: [complete_lines(c / "eval" / "lic" / "episodes.jsonl") for c in sorted(run.glob("checkpoint-*"))]  # noqa: E731
    wait_until(first, lambda: any(rows()), "the watcher wrote its first LiC rows")
    first.send_signal(signal.SIGKILL)
    finish(first)
    interrupted = [c for c in sorted(run.glob("checkpoint-*"))
                   if (c / "eval" / "lic" / "episodes.jsonl").is_file() and not is_evaluated(c)]  # fmt: skip
    assert len(interrupted) == 1, "the kill did not land inside an evaluation; nothing to check"
    assert (interrupted[0] / "eval" / ".lock").is_file()  # left behind by the killed watcher

    second = watcher(run, tmp_path / "watch2.log")
    rc, log = finish(second, timeout=600)
    assert rc == 0, log[-4000:]
    rc_train, train_log = finish(trainer)
    assert rc_train == 0, train_log[-4000:]
    assert "stopped: the run wrote its final model" in log
    assert "taking over a stale lock" in log
    assert "fic eval-checkpoints" in train_log and "--watch" in train_log  # the command training printed

    checkpoints = sorted(run.glob("checkpoint-*"), key=checkpoint_step)
    assert [c.name for c in checkpoints] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    history = [json.loads(line)["step"] for line in (run / "eval" / "history.jsonl").read_text().splitlines()]
    assert sorted(history) == [1, 2, 3], f"a checkpoint was evaluated twice or not at all: {history}"
    expected = sorted((m, 0, t) for m in ("full", "sharded") for t in {k[2] for k in episodes(checkpoints[-1])})
    for checkpoint in checkpoints:
        assert sorted(episodes(checkpoint)) == expected, checkpoint  # the interrupted one too: no row twice
        assert not (checkpoint / "eval" / ".lock").exists()
    comparison = json.loads((run / "eval" / "comparison.json").read_text())
    assert [c["step"] for c in comparison["checkpoints"]] == [1, 2, 3]
    assert (run / "eval" / "report.html").is_file()


def trainer_state(checkpoint: Path, step: int, max_steps: int) -> None:
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps}))


def final_weights(run: Path, after: Path) -> None:
    """Final weights written after `after` (mtimes set explicitly: file systems round them)."""
    (run / "model.safetensors").write_bytes(b"x")
    stamp = after.stat().st_mtime + 1
    os.utime(run / "model.safetensors", (stamp, stamp))


def test_a_run_is_finished_when_its_final_model_follows_the_last_step(tmp_path):
    run = tmp_path / "run"
    trainer_state(run / "checkpoint-2", 2, 4)
    assert not watch.finished(run)  # training
    final_weights(run, run / "checkpoint-2" / "trainer_state.json")
    assert not watch.finished(run)  # preempted at step 2: the requeued job goes on
    trainer_state(run / "checkpoint-4", 4, 4)
    state = run / "checkpoint-4" / "trainer_state.json"
    os.utime(state, (time.time() + 10, time.time() + 10))
    assert not watch.finished(run)  # the last step saved; the final model is the preempted job's
    final_weights(run, state)
    assert watch.finished(run)
    (tmp_path / "plain").mkdir()
    final_weights(tmp_path / "plain", tmp_path / "plain")
    assert watch.finished(tmp_path / "plain")  # no checkpoint saved: final weights alone


def test_the_watch_stops_after_the_idle_timeout(tmp_path, capsys):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "config.json").write_text(json.dumps({"evaluations": ["lic"]}))
    argv = ["eval-checkpoints", str(tmp_path), "--watch", "--poll", "0.05", "--idle-timeout", "0.2"]
    assert cli.main(argv) == 0
    assert "stopped: no new checkpoint for 0.2 s" in capsys.readouterr().out


def test_watch_mistakes_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    cases = [
        ([str(tmp_path / "notes")], "is not a training run"),
        ([str(tmp_path / "missing")], "is not a folder"),
        ([str(tmp_path / "notes"), "--force"], "--force cannot be combined with --watch"),
        ([str(tmp_path / "notes"), "--poll", "0"], "give positive seconds"),
    ]
    for args, message in cases:
        assert cli.main(["eval-checkpoints", *args, "--watch"]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    trainer_state(tmp_path / "run" / "checkpoint-1", 1, 2)  # a run whose eval config asks for a probe on nothing
    assert cli.main(["eval-checkpoints", str(tmp_path / "run"), "--watch"]) == 2
    assert "eval.datasets" in capsys.readouterr().err

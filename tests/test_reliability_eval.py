"""Evaluation resume after a real kill: `fic probe`, `fic lic` and `fic regret` on a tiny model, SIGKILLed once their
samples file has rows, then rerun with the same `--out`, end with exactly the rows of an uninterrupted run.

Each test runs the command twice side by side (one uninterrupted, one to be killed). The second runs through this
file's entry (`_kill_after_rows`), which SIGKILLs its own process right after the append that brings its JSONL to
some complete rows: a real kill, at the same row whatever the machine's speed (no polling from outside that a fast
run could outpace). The test then cuts the last line in half (what a kill during a write leaves), reruns the
command, and compares: same rows (nothing lost, nothing duplicated), same summary. The in-process versions with a
simulated crash are in test_probe.py, test_lic.py and test_regret_cli.py; these are the real process kills.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def child_env(**extra) -> dict:
    """Offline, single-threaded (deterministic CPU numerics), unbuffered."""
    # WANDB_DIR / WANDB_PROJECT may be left in this process by in-process training tests: a child picks its own.
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_ID")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", WANDB_MODE="offline",
               PYTHONUNBUFFERED="1", **extra)  # fmt: skip
    return env


def start(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start `cmd` in ROOT with its output in `log` (a file, so a chatty child never blocks on a full pipe)."""
    handle = open(log, "w")  # noqa: SIM115  (closed by finish())
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env or child_env())
    proc.log_path, proc.log_handle = log, handle
    return proc


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Wait for `proc`; (exit status, its output)."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.log_handle.close()
    return proc.returncode, proc.log_path.read_text(errors="replace")


def wait_until(proc: subprocess.Popen, ready, what: str, timeout: float = 300, poll: float = 0.01) -> None:
    """Poll until `ready()` is true; fail (with the child's output) if the child ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            rc, out = finish(proc)
            pytest.fail(f"the run ended (exit {rc}) before {what}; output:\n{out[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            finish(proc)
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(poll)


def complete_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _kill_after_rows(argv: list[str]) -> int:
    """`python tests/test_reliability_eval.py NAME ROWS FIC-ARGS...`: `fic FIC-ARGS`, SIGKILLing its own process right
    after the append that brings the file called NAME to at least ROWS complete lines (a real kill, at a row fixed
    by the arguments, not by how fast the run went)."""
    import fic.distributed
    import fic.eval.clarify.regret
    import fic.jsonl
    from fic.cli import main

    name, rows = argv[0], int(argv[1])
    append = fic.jsonl.append_rows

    def append_then_die(path, new_rows):
        append(path, new_rows)
        if Path(path).name == name and complete_lines(Path(path)) >= rows:
            os.kill(os.getpid(), signal.SIGKILL)

    for module in (fic.distributed, fic.eval.clarify.regret):  # the writers of samples.jsonl and episodes.jsonl
        assert module.append_rows is append, f"{module.__name__} no longer appends through fic.jsonl.append_rows"
        module.append_rows = append_then_die
    return main(argv[2:])


def killed_at_rows(argv: list[str], out: Path, name: str, rows: int, log: Path) -> int:
    """Run `fic ARGV --out OUT` until the append that brings OUT/NAME to `rows` complete lines, where it kills
    itself (`_kill_after_rows`); how many complete lines the file holds."""
    proc = start([sys.executable, __file__, name, str(rows), *argv, "--out", str(out)], log)
    rc, output = finish(proc)
    assert rc == -signal.SIGKILL, f"the run was not killed at {rows} rows of {name} (exit {rc}):\n{output[-3000:]}"
    return complete_lines(out / name)


def tear_last_line(path: Path) -> None:
    """Cut the last row in half, as a kill in the middle of writing it would."""
    data = path.read_bytes()
    start_of_last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start_of_last + (len(data) - start_of_last) // 2])


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def killed_and_resumed(tmp_path: Path, argv: list[str], out_flag_file: str, kill_at: int) -> tuple[Path, Path, int]:
    """Run `fic ARGV --out A` uninterrupted and, beside it, `--out B` killed at `kill_at` rows, torn, and rerun."""
    fic = [sys.executable, "-m", "fic.cli", *argv]
    full = start([*fic, "--out", str(tmp_path / "a")], tmp_path / "a.log")
    had = killed_at_rows(argv, tmp_path / "b", out_flag_file, kill_at, tmp_path / "b.log")
    tear_last_line(tmp_path / "b" / out_flag_file)
    rc, out = finish(start([*fic, "--out", str(tmp_path / "b")], tmp_path / "b2.log"))
    assert rc == 0, out[-3000:]
    assert "Traceback" not in out
    rc, out = finish(full)
    assert rc == 0, out[-3000:]
    return tmp_path / "a", tmp_path / "b", had


def assert_same_rows(a: Path, b: Path, name: str, key, expected: int, had: int) -> None:
    ra, rb = rows(a / name), rows(b / name)
    assert len(ra) == expected
    assert 0 < had < expected, f"the kill came after {had} of {expected} rows: not midway"
    keys = Counter(key(r) for r in rb)
    assert not [k for k, n in keys.items() if n > 1], "a resumed run duplicated rows"
    assert sorted(ra, key=key) == sorted(rb, key=key), "the resumed run's rows differ from the uninterrupted run's"
    assert json.loads((a / "summary.json").read_text()) == json.loads((b / "summary.json").read_text())


@pytest.fixture(scope="module")
def tiny():
    from fic.tiny import tiny_model

    return tiny_model("chatml")


def test_fic_probe_killed_midway_resumes_to_the_uninterrupted_samples(tiny, shared_data, tmp_path):
    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    argv = ["probe", "--model", tiny, "--datasets", gsm8k, "--limit", "4", "--temperatures", "0,1", "--samples", "2",
            "--perturbations", "none,truncate,question", "--response-tokens", "16", "--max-new-tokens", "12",
            "--judge", "heuristic"]  # fmt: skip
    a, b, had = killed_and_resumed(tmp_path, argv, "samples.jsonl", kill_at=8)

    def key(r):
        return (r["dataset"], r["item_id"], r["temperature"], r["perturbation"], r["sample"])

    assert_same_rows(a, b, "samples.jsonl", key, expected=4 * 2 * 4 * 2, had=had)  # 3 perturbations + reseed
    assert rows(a / "responses.jsonl") == rows(b / "responses.jsonl")
    assert (b / "report.html").is_file()


def test_fic_lic_killed_midway_resumes_to_the_uninterrupted_episodes(tiny, tmp_path):
    argv = ["lic", "--model", tiny, "--data", "synthetic", "--limit", "8", "--runs", "2", "--max-new-tokens", "8"]
    a, b, had = killed_and_resumed(tmp_path, argv, "episodes.jsonl", kill_at=8)
    assert_same_rows(a, b, "episodes.jsonl", lambda r: (r["mode"], r["run"], r["task_id"]), expected=3 * 2 * 8,
                     had=had)  # fmt: skip


def test_fic_regret_killed_midway_resumes_to_the_uninterrupted_episodes(tiny, shared_data, tmp_path):
    argv = ["regret", "--scenario", "products", "--policy", "model", "--model", tiny, "--limit", "6", "--seed",
            "0", "--embedder", "none", "--max-new-tokens", "8"]  # fmt: skip
    a, b, had = killed_and_resumed(tmp_path, argv, "episodes.jsonl", kill_at=3)
    assert_same_rows(a, b, "episodes.jsonl", lambda r: r["key"], expected=6 * 5, had=had)


if __name__ == "__main__":
    sys.exit(_kill_after_rows(sys.argv[1:]))

"""Data-parallel evaluations: `fic probe` and `fic lic` launched on 2 processes (`accelerate launch -m fic.cli`, one
gloo group on the CPU of one host) write the files of a one-process run, byte for byte, also when one rank was killed
mid-run and the launch started again (each rank resumes from its own part). Plus, without a launch: the parts, the
settings check across ranks and the vLLM parallel flags reaching the engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from test_multiprocess import ACCELERATE, ROOT, launch_env, launch_failure

from fic.distributed import RankedRows, disagreement

RUNS = {
    "probe": ["probe", "--model", "tiny:chatml", "--judge", "heuristic", "--limit", "6", "--chunk-size", "2",
              "--temperatures", "0,1", "--perturbations", "none,truncate", "--samples", "2", "--max-new-tokens", "12",
              "--response-tokens", "16"],
    "lic": ["lic", "--model", "tiny:chatml", "--data", "synthetic", "--limit", "6", "--runs", "2", "--temperature",
            "1.0", "--max-new-tokens", "8"],
}  # fmt: skip
FILES = {"probe": ["samples.jsonl", "responses.jsonl"], "lic": ["episodes.jsonl"]}
# probe: 6 items x 2 temperatures x (none, truncate, reseed) x 2 samples; lic: 3 modes x 2 runs x 6 tasks
ROWS = {"probe": 72, "lic": 36}
PARTS = {"probe": "samples.rank1.jsonl", "lic": "episodes.rank1.jsonl"}
# rank 1's writes before it is killed: probe, its 2 answer chunks and 1 of its 9 jobs; lic, 2 of its 3 jobs
KILL_AFTER = {"probe": "3", "lic": "2"}


def command_args(command: str, shared_data: Path, out: Path) -> list[str]:
    data = ["--datasets", f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"] if command == "probe" else []
    return [*RUNS[command], *data, "--out", str(out)]


def run_fic(args: list[str], processes: int, entry: list[str] | None = None, check: bool = True):
    """`fic ARGS` in one plain process, or on `processes` through `accelerate launch` (of `entry` when given)."""
    if processes == 1:
        command = [sys.executable, "-m", "fic.cli", *args]
    else:
        launch = [ACCELERATE, "launch", "--config_file", str(ROOT / "accelerate_configs" / "cpu.yaml"),
                  "--num_processes", str(processes), "--main_process_port", "0"]  # fmt: skip
        command = [*launch, *(entry or ["-m", "fic.cli"]), *args]
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, env=launch_env(), capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, launch_failure(done.stderr)
    print(f"fic {args[0]} on {processes} process(es): {time.time() - started:.1f} s")
    return done


def summary(out: Path) -> dict:
    # run_id is drawn afresh for every output folder (labels carry it); everything else must be equal
    return {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k != "run_id"}


def assert_same_run(command: str, one: Path, two: Path) -> None:
    for name in FILES[command]:
        a, b = (one / name).read_bytes(), (two / name).read_bytes()
        assert a == b, f"{name}: the 2-process file differs from the 1-process one"
    assert summary(one) == summary(two)
    assert not (two / "parts").exists(), "the parts were not merged away"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["probe", "lic"])
def test_two_processes_write_the_one_process_files_also_after_a_kill(command, shared_data, tmp_path):
    one, two, killed = tmp_path / "one", tmp_path / "two", tmp_path / "killed"
    run_fic(command_args(command, shared_data, one), 1)
    rows = [json.loads(line) for line in (one / FILES[command][0]).read_text().splitlines()]
    assert len(rows) == ROWS[command]
    assert len({json.dumps(r.get("user_turn") or r.get("turns"), sort_keys=True) for r in rows}) > 1  # real text
    run_fic(command_args(command, shared_data, two), 2)
    assert_same_run(command, one, two)

    # Rank 1 SIGKILLs itself in the middle of its share; torchrun then stops rank 0. Its part ends in a torn line.
    entry = [str(Path(__file__)), "1", KILL_AFTER[command]]
    done = run_fic(command_args(command, shared_data, killed), 2, entry=entry, check=False)
    assert done.returncode != 0
    part = killed / "parts" / PARTS[command]
    kept = part.read_text().splitlines()
    assert kept and not (killed / "summary.json").exists()
    part.write_text("\n".join(kept) + "\n" + kept[-1][: len(kept[-1]) // 2])
    done = run_fic(command_args(command, shared_data, killed), 2)
    assert f"resuming from {len(kept)} rows of {part}" in done.stderr
    assert_same_run(command, one, killed)


def test_one_process_takes_the_rows_a_killed_launch_left_in_its_parts(tmp_path):
    def key(row):
        return row["k"]

    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "rows.rank1.jsonl").write_text('{"k": 2, "v": "stored"}\n{"k": 3')  # a torn last line
    out = RankedRows(tmp_path / "rows.jsonl", key, split=False)
    made = []

    def make(job):
        made.append(job)
        return [{"k": k, "v": "made"} for k in job]

    rows = out.run([(1, 2), (3,)], lambda job: list(job), make)
    out.merge(rows)
    assert made == [(1, 2), (3,)]  # job (1, 2) lacked row 1: made again, but row 2 kept as stored
    written = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert written == [{"k": 1, "v": "made"}, {"k": 2, "v": "stored"}, {"k": 3, "v": "made"}]
    assert not parts.exists()
    assert RankedRows(tmp_path / "rows.jsonl", key, split=False).run([(1, 2)], list, make) == written[:2]
    assert len(made) == 2  # every row stored: nothing made


def test_merge_survives_another_rank_removing_the_parts_folder_while_it_lists_it(tmp_path, monkeypatch):
    """The race of CI stop 39: rank 1 clears the parts and removes the folder between rank 0's `glob` checking that
    the folder exists and listing it (Python's glob raises FileNotFoundError then); rank 0 must go on."""
    out = RankedRows(tmp_path / "rows.jsonl", lambda r: r["k"], split=False)
    rows = out.run([(1,)], list, lambda job: [{"k": k} for k in job])
    is_dir = Path.is_dir
    monkeypatch.setattr(Path, "is_dir", lambda self: self.name == "parts" or is_dir(self))  # checked, then gone
    out.merge(rows)
    assert [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()] == [{"k": 1}]


def test_disagreement_names_the_rank_and_the_setting():
    assert disagreement([{"seed": 0, "limit": 5}, {"seed": 0, "limit": 5}]) is None
    assert disagreement([{"seed": 0}, {"seed": 0}, {"seed": 1}]) == "rank 2: seed 0 -> 1"


def test_vllm_parallel_sizes_reach_the_engine(shared_data, tmp_path, monkeypatch):
    from fic.cli import main

    seen = {}

    class Stop(Exception):
        pass

    class FakeLLM:
        def __init__(self, model, **kwargs):
            seen.update(kwargs)
            raise Stop

    import trl  # noqa: F401  (trl looks for vllm when imported: before the stand-in, it finds none)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    args = [*command_args("probe", shared_data, tmp_path), "--backend", "vllm", "--tensor-parallel-size", "2",
            "--max-model-len", "512"]  # fmt: skip
    with pytest.raises(Stop):
        main(args)
    assert seen == {"tensor_parallel_size": 2, "max_model_len": 512}


def test_parallel_sizes_need_vllm_and_each_process_takes_its_gpus(shared_data, tmp_path, capsys):
    from fic.cli import main
    from fic.cli_args import backend_kwargs
    from fic.generation.vllm_backend import device_slice

    with pytest.raises(SystemExit):
        main([*command_args("probe", shared_data, tmp_path), "--tensor-parallel-size", "2"])
    assert "--tensor-parallel-size is a vllm backend setting" in capsys.readouterr().err
    # Under a launch, each process runs an engine of its own on its GPUs (vLLM refuses data parallelism in one LLM).
    args = types.SimpleNamespace(backend="vllm", base_url=None, tensor_parallel_size=2, max_model_len=None)
    launch = types.SimpleNamespace(num_processes=2, local_process_index=1)
    assert backend_kwargs(args, launch) == {"tensor_parallel_size": 2, "local_rank": 1}
    assert device_slice(["0", "1", "2", "3"], 1, 2) == ["2", "3"]
    with pytest.raises(ValueError, match="process 2 needs GPUs 4..5 .* but 4 are visible; launch at most 2"):
        device_slice(["0", "1", "2", "3"], 2, 2)


def test_a_second_run_into_the_folder_is_refused_until_the_first_merges(tmp_path):
    """Two runs appending to one samples.jsonl at once would each write every row (the committed collab run's base
    MT-Bench turns, twice): while a `RankedRows` lives, another process cannot open one on the same file."""
    code = ("import sys; from fic.distributed import RankedRows; from fic.jsonl import BusyError\n"
            "try: RankedRows(sys.argv[1], lambda r: r['k'], split=False)\n"
            "except BusyError as err: sys.exit(str(err))")  # fmt: skip
    path = tmp_path / "rows.jsonl"
    out = RankedRows(path, lambda r: r["k"], split=False)
    second = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert second.returncode == 1 and "another process is writing it now" in second.stderr
    out.merge(out.run([(1,)], list, lambda job: [{"k": k} for k in job]))
    assert subprocess.run([sys.executable, "-c", code, str(path)], timeout=120).returncode == 0


def _kill_after_writes(argv: list[str]) -> int:
    """`accelerate launch tests/test_probe_parallel.py RANK N FIC-ARGS...`: `fic FIC-ARGS`, where rank RANK SIGKILLs
    itself once it has appended rows to its part N times (a real kill in the middle of a launch)."""
    import fic.distributed
    from fic.cli import main

    rank, after, writes = argv[0], int(argv[1]), []
    append = fic.distributed.append_rows

    def append_then_die(path, rows):
        rows = list(rows)
        append(path, rows)
        writes.extend([path] if rows else [])
        if os.environ.get("RANK") == rank and len(writes) >= after:
            os.kill(os.getpid(), signal.SIGKILL)

    fic.distributed.append_rows = append_then_die
    return main(argv[2:])


if __name__ == "__main__":
    sys.exit(_kill_after_writes(sys.argv[1:]))

"""The benchmark harness and every benchmark script at its smallest size (a smoke test: figures present and finite).

Never a timing target here: timings on a shared CI machine are noise; `make bench` measures them. The only figures
checked are correctness ones: the chunked divergence's numerical agreement with the full-logit reference, and the
2-process probe's samples equal to the 1-process ones.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import run_all  # noqa: E402

FIGURES = {
    "probe_throughput": ["speedup", "turns_per_s", "naive_turns_per_s", "speedup_one_prompt_per_batch"],
    "probe_parallel": ["speedup", "turns_per_s_one", "turns_per_s_two", "wall_speedup", "identical"],
    "judge_throughput": [
        "cases_per_s",
        "encoder_bound_cases_per_s",
        "efficiency",
        "encodings_per_case",
        "concurrency_speedup",
        "learned_cases_per_s",
        "contrast_cases_per_s",
        "strict_contrast_cases_per_s",
    ],  # fmt: skip
    "chunked_divergence": ["peak_mem_ratio", "time_ratio", "max_abs_diff"],
    "vasd_vs_sft": ["time_ratio", "peak_mem_ratio"],
    "qwen3_5_kernels": ["speedup", "peak_mem_ratio", "fla_loaded"],
    "vasd_vs_trl": ["time_ratio_sdft", "peak_mem_ratio_sdft", "time_ratio_distill", "peak_mem_ratio_distill"],
    "vasd_onpolicy": [
        "speedup_vs_generate",
        "rollout_share",
        "onpolicy_over_offpolicy",
        "generation_forwards",
        "speedup_bound_wall",
    ],  # fmt: skip
}


def test_every_benchmark_is_run_by_run_all_and_smoke_tested():
    # The vLLM ones run on .venv-vllm's interpreter and are smoke-tested there (tests/test_vllm.py).
    assert set(run_all.BENCHMARKS) == set(FIGURES) | set(run_all.NEEDS_VLLM)
    assert all((BENCH / f"{name}.py").exists() for name in FIGURES)


def test_run_all_rejects_unknown_names():
    with pytest.raises(SystemExit):
        run_all.main(["--only", "no_such_benchmark"])


def _args(*argv):
    import torch

    # keep this process's torch thread count (parse() would set it for a benchmark)
    return common.parse(common.parser("t"), ["--size", "smoke", "--threads", str(torch.get_num_threads()), *argv])


def test_emit_prints_the_line_and_writes_the_record(tmp_path, capsys):
    args = _args("--results-dir", str(tmp_path))
    record = common.emit("demo", {"ratio": 1.23456789, "count": 3}, args, tokens=7)
    line = json.loads(capsys.readouterr().out.strip())
    assert line == {"name": "demo", "ratio": 1.235, "count": 3}
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert saved == json.loads(json.dumps(record))
    assert saved["settings"]["tokens"] == 7 and saved["settings"]["size"] == "smoke"
    assert saved["versions"]["torch"] and saved["machine"]["cpu_count"] >= 1


def test_emit_writes_nothing_with_an_empty_results_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = _args("--results-dir", "")
    common.emit("demo", {"x": 1.0}, args)
    assert list(tmp_path.iterdir()) == []


def test_interleaved_times_warms_up_then_takes_turns():
    calls = []
    times = common.interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3, warmup=1)
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert [len(v) for v in times.values()] == [3, 3] and all(t >= 0 for v in times.values() for t in v)


def _has_rss_anon() -> bool:
    status = Path("/proc/self/status")
    return status.exists() and "RssAnon:" in status.read_text()


@pytest.mark.skipif(not _has_rss_anon(), reason="needs Linux /proc/self/status with RssAnon")
def test_peak_memory_sees_torch_tensors_on_cpu():
    import torch

    mem = common.PeakMemory("cpu").start()
    big = torch.ones(64 * 2**20)  # 256 MiB, touched
    mem.wait_for_readings()  # a reading of the sampler thread while it is alive, however busy the machine
    del big
    mem.mark()
    small = torch.ones(32 * 2**20)  # 128 MiB
    step = mem.step_peak()
    del small
    assert mem.peak() >= 240 * 2**20  # the big tensor, although freed before mark()
    assert 100 * 2**20 <= step < 240 * 2**20  # only what came after mark()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIGURES))
def test_benchmark_smoke(name, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, str(BENCH / f"{name}.py"), "--size", "smoke", "--results-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"name"')]
    assert len(lines) == 1, proc.stdout[-2000:]
    line = json.loads(lines[0])
    assert line["name"] == name
    for key in FIGURES[name]:
        assert isinstance(line.get(key), (int, float)) and math.isfinite(line[key]), (key, line)
        assert line[key] >= 0, (key, line)
    record = json.loads((tmp_path / f"{name}.json").read_text())
    assert {k: record[k] for k in line} == line
    assert record["settings"]["size"] == "smoke" and record["versions"]["torch"] and record["machine"]
    if name == "chunked_divergence":  # correctness, not speed: the chunked loss and gradient match the reference
        assert line["max_abs_diff"] <= 1e-4
    if name == "probe_parallel":  # correctness, not speed: 2 processes wrote the samples of 1
        assert line["identical"] == 1

"""Shared harness of the benchmark scripts: flags, timing, peak memory, and the result line.

Every figure is a ratio against a baseline measured in the same run, so that it holds on a noisy shared machine:

* Time: both variants live in one process and run interleaved (A B A B ...) after warm-up; each variant's figure
  is the median of its repeats, and the ratio is taken between medians. Compute ratios on CPU use the process's
  CPU time (`ratio_times`): on a shared machine other processes stretch wall time at random, not CPU time. Wall
  time is recorded too (`*_wall` figures), and throughput figures (turns or cases per second) are wall time.
* Peak memory: each variant runs in a fresh subprocess (`run_worker`), so neither allocator state nor peaks mix.
  On CUDA the peak is `torch.cuda.max_memory_allocated()`; on CPU it is the peak of the process's anonymous
  resident memory, sampled every millisecond (`PeakMemory`), which counts torch's tensors where `tracemalloc` sees
  none of them. Both are taken relative to a baseline read after the imports (`PeakMemory.start`), so the imports
  do not count; a second reading (`PeakMemory.mark`) separates the setup (weights, optimizer state) from the step.

A script prints one JSON line `{"name": ..., <figures>}` and writes the same figures, with its settings, the
machine and the library versions, to `benchmarks/results/<name>.json` (`--results-dir` moves it, `--results-dir ''`
writes nothing). `--size smoke|cpu|gpu` scales the problem: `smoke` is the smallest (the test suite runs it),
`cpu` the default for `make bench` on two cores, `gpu` the scale the issue's targets speak of.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# OpenMP threads that spin while waiting make torch 10-30x slower on CPU when the cores are shared with other busy
# processes (measured on the 2-core development machine); passive waiting costs little when they are not. It must
# be set before torch starts OpenMP, hence here, before any script imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Benchmarks build their models locally and never download: keep the hub clients offline whoever runs them.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
SIZES = ("smoke", "cpu", "gpu")
_LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "sentence-transformers", "httpx", "vllm", "fic")


def parser(description: str, default_repeats: int = 5) -> argparse.ArgumentParser:
    """The flags every benchmark shares; a script adds its own."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=SIZES, default="cpu", help="problem scale (default: cpu)")
    p.add_argument("--repeats", type=int, default=None, help=f"timed repeats per variant (default: {default_repeats})")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per variant before timing")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 2 on CPU sizes)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda for --size gpu when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--results-dir",
        default=str(RESULTS_DIR),
        help="where <name>.json goes; an empty string writes nothing",
    )
    # Internal: run one variant in this (fresh) process and print its measurements; see run_worker().
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.set_defaults(default_repeats=default_repeats)
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse, fill the defaults that depend on other flags, seed torch and set its thread count."""
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = args.default_repeats if args.size != "smoke" else 1
    if args.repeats < 1 or args.warmup < 0:
        p.error(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}")
    import torch

    if args.device is None:
        if args.size == "gpu" and not torch.cuda.is_available():
            p.error("--size gpu: torch sees no CUDA device here; use --size cpu, or --device cpu to insist")
        args.device = "cuda" if args.size == "gpu" else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: torch sees no CUDA device here; use --device cpu")
    if args.threads is None and args.device == "cpu":
        args.threads = min(2, os.cpu_count() or 1)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a core dependency
        pass
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:  # pragma: no cover - datasets is a core dependency
        pass
    return args


def settings_of(args: argparse.Namespace, **extra) -> dict:
    """The settings recorded with a result: the shared flags plus the script's own sizes."""
    keep = ("size", "repeats", "warmup", "threads", "device", "seed")
    return {**{k: getattr(args, k) for k in keep}, **extra}


def library_versions() -> dict[str, str | None]:
    out = {}
    for name in _LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "memory_gib": _total_memory_gib(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _total_memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def emit(name: str, figures: dict, args: argparse.Namespace, **settings) -> dict:
    """Print the result line and write `<results-dir>/<name>.json`; returns the full record."""
    bad = [k for k, v in figures.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        print(f"warning: {name}: non-finite figures {bad}", file=sys.stderr)
    line = {"name": name, **{k: _round(v) for k, v in figures.items()}}
    record = {
        **line,
        "settings": settings_of(args, **settings),
        "machine": machine_info(),
        "versions": library_versions(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", os.path.relpath(sys.argv[0], REPO_ROOT), *sys.argv[1:]]),
    }
    if args.results_dir:
        out = Path(args.results_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(line), flush=True)
    return record


def _round(value):
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.4g}") if abs(value) >= 1e-3 else float(f"{value:.3e}")
    return value


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def interleaved_times(
    variants: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    device: str = "cpu",
    cpu_times: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Run each variant `warmup` times untimed, then `repeats` timed rounds in turn; wall seconds per run per variant.

    Interleaving spreads any slow phase of a shared machine over every variant instead of one of them. Pass a dict
    as `cpu_times` to also get this process's CPU seconds per run (all threads): on a busy machine, wall time over
    CPU time says how much of a core the run really had.
    """
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for key, fn in variants.items():
            sync(device)
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            sync(device)
            times[key].append(time.perf_counter() - start)
            if cpu_times is not None:
                cpu_times.setdefault(key, []).append(time.process_time() - cpu)
    return times


def ratio_times(device: str, wall: dict[str, list[float]], cpu: dict[str, list[float]]) -> tuple[dict, str]:
    """The per-variant times a compute ratio is taken from, and their clock.

    On CPU: this process's CPU seconds (all threads), which other busy processes on a shared machine barely move,
    while they can stretch wall time by several times, at random. On CUDA: wall seconds (the host's CPU time says
    nothing about the device).
    """
    if str(device).startswith("cuda") or not cpu:
        return wall, "wall"
    return cpu, "process_cpu"


def median(values: list[float]) -> float:
    return statistics.median(values)


class PeakMemory:
    """Peak memory of this process above a baseline: the CUDA allocator's peak on GPU, anonymous memory on CPU.

    Use in a fresh process: `start()` after the imports, `mark()` after the setup, `peak()` at the end; `peak()`
    returns bytes above the baseline at `start()`, and `step_peak()` bytes above the reading at `mark()`.

    CPU. torch's tensors live in anonymous memory, which `/proc/self/status` reports as `RssAnon`; a daemon thread
    samples it every `interval` seconds and keeps the maximum (reading it costs tens of microseconds and torch's
    kernels release the GIL, so the sampler runs while they do). Anonymous memory leaves out the pages of the shared
    libraries, which the kernel pages in and out on a busy machine and which made the resident-set high-water mark
    (`VmHWM`) wander by a hundred MB between identical runs. A tensor alive for less than `interval` can be missed;
    the ones that set a step's peak live far longer. `run_worker` also sets glibc's `MALLOC_MMAP_THRESHOLD_` so that
    every allocation above 64 KiB is mapped on its own and unmapped when freed: memory freed by one phase is then
    not reused from the allocator's cache by the next, so the peak counts what is live. Without `RssAnon` (not
    Linux), the resident-set high-water mark stands in.
    """

    def __init__(self, device: str = "cpu", interval: float = 0.001):
        self.cuda = str(device).startswith("cuda")
        self.interval = interval
        self.base = 0
        self.at_mark: int | None = None
        self._peak_before_mark = 0
        self._max = 0
        self._thread = None
        self._anon = _status_kib("RssAnon") is not None
        # The sampler's reading and its update of the maximum are one step under this lock, so `mark()` cannot fall
        # between them (a reading taken before the mark would otherwise land after it as the new maximum).
        import threading

        self._lock = threading.Lock()
        self.readings = 0  # readings the sampler thread has taken (tests wait on it instead of sleeping)

    def _sample(self) -> int:
        kib = _status_kib("RssAnon")
        return kib * 1024 if kib is not None else _hwm_bytes()

    def _run(self) -> None:
        while True:
            with self._lock:
                value = self._sample()
                if value > self._max:
                    self._max = value
                self.readings += 1
            time.sleep(self.interval)

    def wait_for_readings(self, count: int = 2, timeout: float = 60.0) -> None:
        """Block until the sampler thread has taken `count` more readings (the second one began after this call, so
        it saw the memory in use now), or raise TimeoutError. For tests: no guess of how long a sleep must be."""
        target, deadline = self.readings + count, time.monotonic() + timeout
        while self.readings < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the memory sampler took no reading in {timeout} s")
            time.sleep(self.interval)

    def start(self) -> PeakMemory:
        gc.collect()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        if not self._anon:
            _reset_hwm()
        self.base = self._max = self._sample()
        if self._thread is None:
            import threading

            self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
            self._thread.start()
        return self

    def _now_peak(self) -> int:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        with self._lock:
            self._max = max(self._max, self._sample())
            return self._max

    def mark(self) -> None:
        """Note the memory in use now (after the setup) and restart the peak from here."""
        self._peak_before_mark = self._now_peak()
        gc.collect()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.at_mark = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            with self._lock:
                self.at_mark = self._max = self._sample()

    def peak(self) -> int:
        """Bytes above the baseline at the highest point since `start()` (setup included)."""
        return max(0, max(self._now_peak(), self._peak_before_mark) - self.base)

    def step_peak(self) -> int:
        """Bytes above the reading at `mark()` at the highest point since then (the step alone)."""
        if self.at_mark is None:
            raise RuntimeError("PeakMemory.step_peak() needs mark() after the setup")
        return max(0, self._now_peak() - self.at_mark)

    def method(self) -> str:
        if self.cuda:
            return "torch.cuda.max_memory_allocated"
        if self._anon:
            return f"RssAnon sampled every {self.interval * 1000:g} ms (glibc mmap threshold 64 KiB in workers)"
        return "resident-set high-water mark"


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _hwm_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource

    return _maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _maxrss_bytes(value: int) -> int:
    return value if sys.platform == "darwin" else value * 1024


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_worker(script: str | Path, variant: str, args: argparse.Namespace, extra: list[str] | None = None,
               launcher: list[str] | None = None, measure_memory: bool = True) -> dict:  # fmt: skip
    """Run `script --worker variant` in a fresh Python process with the same flags; return its JSON result.

    The worker prints its measurements as the last line of stdout (see `worker_result`). `launcher` replaces the
    Python interpreter that runs `script` (e.g. `accelerate launch --num_processes 2`). `measure_memory=False` keeps
    glibc's default allocator settings (the 64 KiB mapping threshold below slows torch on CPU down by a third or more:
    fine for a peak, not for a speed).
    """
    cmd = [*(launcher or [sys.executable]), str(script), "--worker", variant, "--size", args.size]
    cmd += ["--device", args.device]
    cmd += ["--seed", str(args.seed), "--results-dir", ""]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += extra or []
    # Every allocation above 64 KiB its own mapping, returned when freed (see PeakMemory).
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"MALLOC_MMAP_THRESHOLD_": "65536"} if measure_memory else {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(
            f"benchmark worker {variant!r} of {Path(script).name} failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"benchmark worker {variant!r} printed no result line:\n{proc.stdout[-2000:]}")
    return json.loads(lines[-1])


def worker_result(**values) -> None:
    print(json.dumps(values), flush=True)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def add_tests_to_path() -> None:
    """Make `tests/` importable (the mock OpenAI server lives there)."""
    tests = str(REPO_ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


def shared_data_dir() -> Path:
    return Path(os.environ.get("FIC_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

"""Multi-process runs: the process group on machines without a GPU, and work split over the ranks of a launch.

`accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes N` starts N processes through
torchrun. Without CUDA, accelerate would treat each of them as a lone process unless told to use the CPU; this sets
`ACCELERATE_USE_CPU` for such launches so the N processes form one gloo group (rank, world size, barriers).

Work before training is split with `map_across_ranks`; the evaluations launched on several processes (`fic probe`,
`fic lic`) write through `RankedRows`: each rank its own part file, merged into the file one process would write.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager, suppress
from pathlib import Path

from tqdm.auto import tqdm

from fic.errors import FicError
from fic.jsonl import append_rows, first_of_each, load_done, write_rows, writer_lock

logger = logging.getLogger(__name__)


def use_cpu_group_without_gpu() -> bool:
    """Set `ACCELERATE_USE_CPU=true` when launched with several processes and no CUDA device. Returns whether it did."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "ACCELERATE_USE_CPU" in os.environ:
        return False
    if any(os.environ.get(k, "").lower() == "true" for k in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")):
        return False  # accelerate would then drop DeepSpeed / FSDP; see cpu_backend_overrides
    import torch  # torch, accelerate: heavy; train.py imports this module before it knows whether it will train

    if torch.cuda.is_available():
        return False
    os.environ["ACCELERATE_USE_CPU"] = "true"
    return True


def cpu_backend_overrides(overrides: list[str]) -> list[str]:
    """Recipe overrides that make DeepSpeed or FSDP processes on a machine without CUDA one gloo group.

    Under `distributed_type: DEEPSPEED` or `FSDP` accelerate finds no backend on a GPU-less machine and makes every
    process a lone main process (each iterates the whole dataloader). Passing `ddp_backend=gloo` (the Trainer hands it
    to accelerate) gives it one; DeepSpeed also needs its CPU accelerator (`DS_ACCELERATOR=cpu`, set here).
    Returns the overrides to add (none when the user set `ddp_backend` or the launch is not such a one)."""
    kinds = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not any(os.environ.get(k, "").lower() == "true" for k in kinds):
        return []
    import torch

    if torch.cuda.is_available():
        return []
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if any(o.startswith("ddp_backend=") for o in overrides):
        return []
    return ["ddp_backend=gloo"]


def rank_slice(n: int) -> slice:
    """This process's contiguous share of `n` items (all of them in a single process)."""
    from accelerate import PartialState

    state = PartialState()
    k, r = state.num_processes, state.process_index
    return slice(n * r // k, n * (r + 1) // k)


def map_across_ranks(fn, items: list) -> list:
    """`fn(items)` computed once over all processes: each rank maps its contiguous share, every rank gets the
    concatenation, in the order of `items`.

    `fn` maps a list to a list (one result per item, or fewer: it may drop items, as long as it keeps their order).
    Every rank must call this at the same point, with the same `items`: it ends in one `gather_object`. Used for the
    work before training that would otherwise run once per rank (model answers to contexts) or on the main process
    while the others wait at their first collective (the evaluation before training, bounded by `ddp_timeout`).
    """
    from accelerate import PartialState

    state = PartialState()
    if state.num_processes <= 1:
        return list(fn(list(items)))
    from accelerate.utils import gather_object

    share = list(items)[rank_slice(len(items))]
    local = list(fn(share)) if share else []
    parts = gather_object([local])  # one entry per rank, in rank order
    return [x for part in parts for x in part]


class LaunchError(FicError, ValueError):
    """The processes of a launch that cannot work together, e.g. started with different settings."""


def launch_state():
    """This process's accelerate `PartialState`. Under a torchrun-style launch (`accelerate launch`, `torchrun`:
    WORLD_SIZE, RANK and LOCAL_RANK set) the processes join one group here, a gloo one on a machine without CUDA
    (`use_cpu_group_without_gpu`); a plain process is a group of one."""
    use_cpu_group_without_gpu()
    from accelerate import PartialState

    # as the Trainer does (TrainingArguments.use_cpu): accelerate reads no environment variable for this itself
    return PartialState(cpu=os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true")


def end_launch() -> None:
    """Leave a launch's process group cleanly: every rank waits for the others, then the group is destroyed (a
    process that exits with a live gloo group can abort in its threads: "terminate called without an active
    exception"). Nothing to do in a plain process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextmanager
def main_process_first(split: bool = True):
    """The block runs on the main process, then on the others (two barriers); with `split=False` simply here."""
    if not split:
        yield
        return
    with launch_state().main_process_first():
        yield


def on_main(fn, split: bool = True):
    """`fn()` run on the main process only; every rank returns its result (one broadcast; `split=False`: here)."""
    state = launch_state() if split else None
    if state is None or state.num_processes <= 1:
        return fn()
    from accelerate.utils import broadcast_object_list

    value = [fn() if state.is_main_process else None]
    broadcast_object_list(value)
    return value[0]


def disagreement(values: list[dict]) -> str | None:
    """Where the ranks' `values` differ from rank 0's (`rank 1: seed 0 -> 1`), or None when they all agree."""
    first, found = values[0], []
    for rank, value in enumerate(values[1:], 1):
        keys = [k for k in sorted(set(first) | set(value), key=str) if first.get(k) != value.get(k)]
        found += [f"rank {rank}: {k} {first.get(k)!r} -> {value.get(k)!r}" for k in keys]
    return "; ".join(found) or None


def check_same_on_every_rank(what: str, value: dict, split: bool = True) -> None:
    """Raise the same `LaunchError` on every rank when the processes of a launch hold different `value`s (one gather,
    so every rank stops here together instead of waiting on a collective the other never reaches)."""
    if not split or launch_state().num_processes <= 1:
        return
    from accelerate.utils import gather_object

    found = disagreement(gather_object([json.loads(json.dumps(value))]))
    if found:
        raise LaunchError(f"{what}: the processes of this launch disagree ({found}); start every process with the "
                          "same arguments")  # fmt: skip


class RankedRows:
    """A resumable JSONL output (`fic.jsonl`) that the processes of a launch fill together, in the order one process
    would write it.

    The work is a list of jobs, each making a list of rows with known keys. With one process (or `split=False`), the
    jobs run here and their rows are appended to `path` as each job finishes, as every evaluation writes. Under a
    launch of N processes, rank r runs its contiguous share of the jobs (`map_across_ranks`) and appends their rows to
    its own part, `parts/<stem>.rank<r>.jsonl` beside `path` (no two processes append to one file); a rerun resumes
    each rank from `path` and its own part. `merge` then appends to `path` the rows it lacks, in job order, and
    deletes the parts, so the merged file is the one a single process would have written, whatever the number of
    processes. A job whose rows are all stored returns them as stored instead of running. While it lives it holds the
    file's writer lock (`fic.jsonl.writer_lock`): a second run into the same folder is refused, not interleaved.

    Args:
        path: the merged file.
        key: a row's identity (e.g. `fic.followup_summary.row_key`); jobs never share a key.
        split: spread the jobs over the launch's processes (every process must then make the same calls); `False`
            runs them all here (e.g. the evaluation inside training, on its main process only).
    """

    def __init__(self, path: str | Path, key, split: bool = True):
        self.path, self.key = Path(path), key
        state = launch_state() if split else None
        self.ranks = state.num_processes if state is not None else 1
        self.rank = state.process_index if state is not None else 0
        parts = self.path.parent / "parts"
        self.part = self.path if self.ranks == 1 else parts / f"{self.path.stem}.rank{self.rank}{self.path.suffix}"
        # Taken before the first collective, so a launch that finds the folder busy fails on every rank alike.
        self.locks = [writer_lock(self.path, shared=self.ranks > 1)]
        if self.ranks > 1:
            self.locks.append(writer_lock(self.path.with_name(f"{self.path.name}.rank{self.rank}")))
        with main_process_first(self.ranks > 1):  # the main process repairs the file before the others read it
            stored = self._repaired(load_done(self.path))
        self.merged = {key(r) for r in stored}
        self.written = set(self.merged)  # in `path` or this rank's part
        self.rows = {key(r): r for r in stored}
        # Several processes: this rank's own part. One: every part a killed launch left (no other process writes now).
        for part in [self.part] if self.ranks > 1 else sorted(parts.glob(f"{self.path.stem}.rank*{self.path.suffix}")):
            own = load_done(part)
            if own:
                logger.info("%s: resuming from %d rows of %s", self.path.name, len(own), part)
            for row in own:
                self.rows.setdefault(key(row), row)
            if part == self.part:
                self.written |= {key(r) for r in own}

    def _repaired(self, stored: list[dict]) -> list[dict]:
        """`stored` without rows that repeat an earlier row's key, rewriting `path` when it held some: two runs that
        appended to it at once (before `writer_lock`) left every row of their shared jobs twice."""
        kept = first_of_each(stored, self.key)
        if len(kept) < len(stored):
            logger.warning("%s: %d rows repeat an earlier row's key (two runs wrote into it at once); kept the first "
                           "of each and rewrote the file", self.path, len(stored) - len(kept))  # fmt: skip
            write_rows(self.path, kept)
        return kept

    def run(self, jobs: list, keys, make, desc: str = "", progress: bool = False) -> list[dict]:
        """Every job's rows, in job order, on every rank. `keys(job)` lists a job's row keys; `make(job)` makes its
        rows, called only for jobs with a key not stored yet, on the rank that owns the job."""

        def run_share(share: list) -> list[list[dict]]:
            return [self._job(job, keys, make) for job in tqdm(share, desc=desc, disable=not progress, unit="job")]

        done = map_across_ranks(run_share, jobs) if self.ranks > 1 else run_share(list(jobs))
        return [row for rows in done for row in rows]

    def _job(self, job, keys, make) -> list[dict]:
        wanted = keys(job)
        if all(k in self.rows for k in wanted):
            rows = [self.rows[k] for k in wanted]
        else:
            rows = [self.rows.get(self.key(r), r) for r in make(job)]
            self.rows.update((self.key(r), r) for r in rows)
        append_rows(self.part, [r for r in rows if self.key(r) not in self.written])
        self.written |= {self.key(r) for r in rows}
        return rows

    def merge(self, rows: list[dict]) -> None:
        """Append to `path` the `rows` (every rank's, in job order, as `run` returns them) it lacks, then delete the
        parts. A collective with several processes: every rank calls it once, after its last `run`."""
        if self.ranks > 1:
            state = launch_state()
            if state.is_main_process:
                append_rows(self.path, [r for r in rows if self.key(r) not in self.merged])
            state.wait_for_everyone()
        self.close()
        parts = self.path.parent / "parts"
        try:  # every rank clears what it finds; another rank may remove the folder between glob's check and listing
            found = list(parts.glob(f"{self.path.stem}.rank*{self.path.suffix}"))
        except FileNotFoundError:
            found = []
        for part in found:
            part.unlink(missing_ok=True)
        with suppress(OSError):  # absent, removed by another rank, or still holding the parts of another file
            parts.rmdir()

    def close(self) -> None:
        """Release the writer's locks (`merge` does; a run that stops early releases them when the process ends)."""
        for handle in self.locks:
            if handle is not None:
                handle.close()
        self.locks = []


def parameters_sharded() -> bool:
    """Whether the model's parameters are split across processes (FSDP or DeepSpeed ZeRO-3)."""
    from accelerate import PartialState
    from accelerate.utils import DistributedType
    from transformers.integrations import is_deepspeed_zero3_enabled

    kind = PartialState().distributed_type
    if kind == DistributedType.FSDP:
        return True
    if kind == DistributedType.DEEPSPEED:
        return is_deepspeed_zero3_enabled()
    return False


def fsdp_enabled() -> bool:
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    return PartialState().distributed_type == DistributedType.FSDP

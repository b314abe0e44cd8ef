"""Checkpoint folders on disk: listing them by step, whether one is evaluated, loading one (a LoRA adapter merged on
its base model) as a generation backend, and `CheckpointLock`, the cross-process lock (shared filesystems included)
that keeps two evaluators (the training callback, `fic eval-checkpoints`, a `--watch`) off the same checkpoint."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import shutil
import socket
import time
import zipfile
from pathlib import Path

from .evaluate import METRICS_FILE

logger = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
EVAL_DIR = "eval"
LOCK_FILE = ".lock"
STALE_LOCK_S = 6 * 3600


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a `checkpoint-N` folder, or None for any other name."""
    m = CHECKPOINT_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """`checkpoint-N` folders of a run, by step (complete or not)."""
    run_dir = Path(run_dir)
    found = [p for p in run_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step)


def is_evaluated(checkpoint: Path) -> bool:
    return (checkpoint / EVAL_DIR / METRICS_FILE).is_file()


def adapter_base(checkpoint: Path) -> str | None:
    """The base model of a LoRA checkpoint (from adapter_config.json), or None for a full checkpoint."""
    path = checkpoint / "adapter_config.json"
    if not path.is_file():
        return None
    base = json.loads(path.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path}: no base_model_name_or_path; cannot tell which model the adapter belongs to")
    return base


class _Fields:
    """Stands for every class a pickled TrainingArguments names: it keeps the object's fields and runs no code."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple):  # (dict state, slots state)
            state = state[0]
        if isinstance(state, dict):
            self.__dict__.update(state)


class _FieldsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return type(name, (_Fields,), {})


def training_flags(folder: Path) -> dict | None:
    """`bf16`, `fp16` of the TrainingArguments the Trainer saved beside a checkpoint (`training_args.bin`), or None
    when there is none. Read with an unpickler that builds no class of the file (no code from the file runs)."""
    path = Path(folder) / "training_args.bin"
    if not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
            args = _FieldsUnpickler(io.BytesIO(archive.read(name))).load()
    except (zipfile.BadZipFile, StopIteration, pickle.UnpicklingError, EOFError, AttributeError, ValueError) as err:
        logger.warning("%s: unreadable (%s); the evaluation dtype does not follow the training", path, err)
        return None
    return {"bf16": bool(getattr(args, "bf16", False)), "fp16": bool(getattr(args, "fp16", False))}


def evaluation_dtype(checkpoint: Path, dtype: str | None = None) -> tuple[str, str]:
    """(dtype, why) to load a checkpoint in for evaluation: `dtype` when given (`--dtype`), else the dtype the run
    trained in (`bfloat16` / `float16` when its TrainingArguments set `bf16` / `fp16`: fp32 master weights saved under
    mixed precision are evaluated as training computed, at half the memory), else `auto` (the saved weights' dtype).
    The TrainingArguments are read from the checkpoint folder, or the folder above it (a `full_model/` subfolder)."""
    if dtype:
        return dtype, "--dtype"
    checkpoint = Path(checkpoint)
    for folder in (checkpoint, checkpoint.parent):
        flags = training_flags(folder)
        if flags is None:
            continue
        if flags["bf16"]:
            return "bfloat16", f"trained with bf16=true ({folder.name}/training_args.bin)"
        if flags["fp16"]:
            return "float16", f"trained with fp16=true ({folder.name}/training_args.bin)"
        return "auto", f"trained without bf16/fp16 ({folder.name}/training_args.bin): the saved dtype"
    return "auto", "no training_args.bin: the saved dtype"


def load_checkpoint(checkpoint: str | Path, dtype: str | None = None, device: str | None = None):
    """(model, tokenizer) of a checkpoint folder; a LoRA adapter is loaded on its base model and merged. `dtype`
    None follows the run's training dtype (`evaluation_dtype`)."""
    # torch, peft, fic.modeling (trl), fic.generation (torch): heavy; the lock, listing and watcher need none of them
    import torch

    from fic.modeling import load_model, load_tokenizer

    checkpoint = Path(checkpoint)
    dtype, why = evaluation_dtype(checkpoint, dtype)
    logger.info("%s: loading in %s (%s)", checkpoint.name, dtype, why)
    base = adapter_base(checkpoint)
    has_tokenizer = (checkpoint / "tokenizer_config.json").is_file()
    tokenizer = load_tokenizer(str(checkpoint) if has_tokenizer or base is None else base)
    if base is None:
        model = load_model(str(checkpoint), dtype=dtype)
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(load_model(base, dtype=dtype), str(checkpoint))
        model = model.merge_and_unload()
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.eval()
    return model, tokenizer


def materialize(checkpoint: Path, dtype: str | None = None) -> Path:
    """A folder with full weights for engines that take a path (vLLM): the checkpoint itself, or for a LoRA
    checkpoint the merged model written to `checkpoint/eval/.merged` (removed by the caller after use)."""
    if adapter_base(checkpoint) is None:
        return checkpoint
    target = checkpoint / EVAL_DIR / ".merged"
    if not (target / "config.json").is_file():
        model, tokenizer = load_checkpoint(checkpoint, dtype=dtype, device="cpu")
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
        del model
    return target


def make_backend(checkpoint: Path, backend: str, batch_size: int = 8, dtype: str | None = None):
    """(backend, tokenizer, cleanup) for a checkpoint folder."""
    from fic.generation import get_backend

    if backend == "transformers":
        model, tokenizer = load_checkpoint(checkpoint, dtype=dtype)
        return get_backend("transformers", model, tokenizer=tokenizer, batch_size=batch_size), tokenizer, None
    from fic.modeling import load_tokenizer

    path = materialize(checkpoint, dtype=dtype)
    dtype, why = evaluation_dtype(checkpoint, dtype)
    logger.info("%s: serving with vLLM in %s (%s)", checkpoint.name, dtype, why)
    engine = get_backend("vllm", model=str(path), dtype=dtype)
    cleanup = (lambda: shutil.rmtree(path, ignore_errors=True)) if path != checkpoint else None
    return engine, getattr(engine, "tokenizer", None) or load_tokenizer(str(path)), cleanup


class CheckpointLock:
    """`checkpoint/eval/.lock`, created exclusively; held by host:pid. A lock older than `STALE_LOCK_S`, or held by
    a dead process on this host, is taken over (a crashed evaluator must not block a checkpoint forever)."""

    def __init__(self, checkpoint: Path):
        self.path = checkpoint / EVAL_DIR / LOCK_FILE
        self.held = False

    def _stale(self) -> bool:
        try:
            owner = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return time.time() - self.path.stat().st_mtime > 60 if self.path.exists() else True
        if time.time() - owner.get("time", 0) > STALE_LOCK_S:
            return True
        if owner.get("host") == socket.gethostname():
            try:
                os.kill(int(owner.get("pid", -1)), 0)
            except ProcessLookupError:
                return True
            except (PermissionError, ValueError):
                return False
        return False

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale():
                    return False
                logger.warning("%s: taking over a stale lock", self.path)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}, f)
            self.held = True
            return True
        return False

    def owner(self) -> str:
        try:
            owner = json.loads(self.path.read_text())
            return f"{owner.get('host')}:{owner.get('pid')}"
        except (OSError, ValueError):
            return "another process"

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

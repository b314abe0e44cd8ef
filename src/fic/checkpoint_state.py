"""Whether a checkpoint folder is whole: the one test that resuming (`resume_from_checkpoint=auto`), checkpoint
evaluation (`fic eval-checkpoints`, its `--watch`) and the training callback share."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from safetensors import safe_open

INTERRUPTED = "it has no trainer_state.json (its save was interrupted)"


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """Why `checkpoint` cannot be resumed from, or None when it looks whole.

    The Trainer writes `trainer_state.json` last, so a folder without it was cut off mid-save (a kill, a full disk);
    weight, optimizer and RNG files are checked cheaply (safetensors headers, torch zip directories) so a damaged file
    gives this one line instead of a traceback from deep inside the loaders.
    """
    checkpoint = Path(checkpoint)
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        return INTERRUPTED
    try:
        json.loads(state.read_text())
    except (OSError, ValueError) as err:
        return f"trainer_state.json is unreadable ({err})"
    for path in sorted(checkpoint.iterdir()):
        if path.suffix == ".safetensors":
            try:
                with safe_open(str(path), framework="pt") as f:
                    f.keys()
            except Exception as err:  # SafetensorError and OSError: truncated, empty or not safetensors
                return f"{path.name} is damaged ({type(err).__name__}: {err})"
        elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            return f"{path.name} is damaged (not a complete torch file)"
    return None


def is_complete(checkpoint: str | Path) -> bool:
    """`checkpoint_problem(checkpoint) is None`: fully saved and not damaged."""
    return checkpoint_problem(checkpoint) is None

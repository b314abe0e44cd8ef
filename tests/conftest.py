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
# The data the tests read: a few verbatim rows of each real data set, laid out like ../shared/data (where they come
# from and their licenses: tests/data/SOURCE.md). Every reader that looks for the shared data folder (the recipes'
# ${oc.env:FIC_SHARED_DATA}, `fic regret`'s default data, reproduce/) finds these rows too, so the suite runs the same
# on a clone without ../shared/data; the full folder is for demos and `make reproduce`.
SHARED_DATA = ROOT / "tests" / "data"
os.environ["FIC_SHARED_DATA"] = str(SHARED_DATA)
MISSING_DATA = "test data missing"  # the reason of a skip for missing data: a failure under CI


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The data folder of the tests (tests/data; `FIC_SHARED_DATA` points at it)."""
    if not (SHARED_DATA / "SOURCE.md").is_file():
        pytest.skip(f"{MISSING_DATA}: {SHARED_DATA / 'SOURCE.md'} is absent (git checkout tests/data)")
    return SHARED_DATA


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (env CI=true) a test skipped for missing data fails: CI runs the whole suite or says why not."""
    report = (yield).get_result()
    if report.skipped and _ci() and call.excinfo is not None and MISSING_DATA in str(call.excinfo.value):
        report.outcome = "failed"
        report.longrepr = f"skipped for missing data, a failure under CI={os.environ['CI']}: {call.excinfo.value}"


@pytest.fixture(scope="session", params=["chatml", "llama3", "norole"])
def tiny_family(request):
    """(family, model_dir) for each tiny chat-template family."""
    from fic.tiny import tiny_model

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

    from fic.tiny import build_tokenizer

    folder = shared_data / "chat_templates"
    specials = json.loads((folder / "special_tokens.json").read_text())[f"{stem}.jinja"]
    tok = build_tokenizer("chatml")
    tok.chat_template = (folder / f"{stem}.jinja").read_text()
    for key, value in specials.items():
        if value:
            tok.add_special_tokens({key: value})
    tok.name_or_path = stem
    return tok

"""Security end to end: hostile model text stays inert in the HTML the evaluations write, API keys from the
environment never reach an output file or a log, `trust_remote_code` stays off unless a recipe turns it on, and the
review server binds to localhost unless told otherwise.

What is already covered elsewhere: the report builders on crafted hostile rows (test_report.py), the review server's
path traversal, Host/Origin checks and default bind (test_review.py), inert text in a real browser
(test_review_browser.py), secret redaction (test_callbacks.py), `fic judge` never writing its key (test_judges.py,
test_reliability_judge.py), a training run never writing keys from its environment (test_reliability_training.py).
Here the hostile text comes out of the generation backend and goes through the real evaluation code.
"""

from __future__ import annotations

import argparse
import json
import logging
import re

import pytest
from conftest import ROOT
from mock_openai_server import MockOpenAIServer
from test_report import HOSTILE, assert_inert

from fic import cli
from fic.tiny import build_tokenizer, tiny_model

SECRETS = {"FIC_JUDGE_API_KEY": "sk-judge-SECRET-5521", "OPENAI_API_KEY": "sk-openai-SECRET-7730"}


class HostileBackend:
    """A generation backend whose every output is an attack string (as a misbehaving model could write)."""

    def generate(self, prompts, params, progress=False, **kw):
        return [[HOSTILE[(i + s) % len(HOSTILE)] for s in range(params.n)] for i, _ in enumerate(prompts)]


def test_generated_text_is_inert_in_the_probe_report(shared_data, tmp_path):
    from fic.eval.probe import run_probe
    from fic.judges import make_judge

    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    run_probe(HostileBackend(), build_tokenizer("chatml"), [gsm8k], tmp_path, temperatures=[0.0, 1.0], samples=2,
              perturbations=["none", "question"], limit=4, progress=False, judge=make_judge("heuristic"))  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert {r["user_turn"] for r in rows} == set(HOSTILE)  # the attacks really went through the probe
    page = assert_inert((tmp_path / "report.html").read_text())
    text = "".join(page.text)
    assert sum(attack in text for attack in HOSTILE) == len(HOSTILE)  # shown, as text


def test_generated_text_is_inert_in_the_lic_report(tmp_path):
    from fic.eval import lic
    from fic.eval.report import report_dir

    tasks = lic.tasks_from_synthetic(3, seed=0)
    lic.run_lic(HostileBackend(), build_tokenizer("chatml"), tasks, tmp_path, max_new_tokens=8, progress=False)
    episodes = (tmp_path / "episodes.jsonl").read_text()
    assert all(json.dumps(attack)[1:-1] in episodes for attack in HOSTILE[:3])
    page = assert_inert(report_dir("lic", tmp_path).read_text())
    assert any(attack in "".join(page.text) for attack in HOSTILE)


def test_generated_text_is_inert_in_the_regret_report(shared_data, tmp_path, monkeypatch):
    from fic.eval.clarify import regret
    from fic.eval.report import report_dir

    class HostileChat:
        name = "hostile"

        def chat(self, conversations, n=1, temperature=0.0, seed=0, max_new_tokens=None):
            return [[HOSTILE[(i + j) % len(HOSTILE)] for j in range(n)] for i, _ in enumerate(conversations)]

    monkeypatch.setattr(regret, "load_chat_model", lambda *a, **k: HostileChat())
    assert regret.main(["--scenario", "products", "--policy", "model", "--model", "hostile", "--limit", "2",
                        "--seed", "0", "--embedder", "none", "--out", str(tmp_path)]) == 0  # fmt: skip
    assert any(json.dumps(a)[1:-1] in (tmp_path / "episodes.jsonl").read_text() for a in HOSTILE)
    page = assert_inert(report_dir("regret", tmp_path).read_text())
    assert any(attack in "".join(page.text) for attack in HOSTILE)


# ---------------------------------------------------------------- API keys


def test_judge_api_key_from_the_environment_reaches_no_probe_file_or_log(shared_data, tmp_path, monkeypatch,
                                                                         caplog, capsys):  # fmt: skip
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    answer = json.dumps({"label": "genuine_followup", "genuine": True, "confidence": 0.9, "rationale": "ok"})
    caplog.set_level(logging.DEBUG)
    out = tmp_path / "probe"
    with MockOpenAIServer(chat_reply=answer) as server:
        server.add_faults("503", "nonjson")  # retries log their reason: the key must not be in it
        rc = cli.main(["probe", "--model", tiny_model("chatml"), "--datasets",
                       f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}", "--limit", "2", "--temperatures", "0",
                       "--response-tokens", "8", "--max-new-tokens", "8", "--judge", "llm",
                       "--judge-base-url", server.url, "--judge-model", "judge-m", "--out", str(out)])  # fmt: skip
        headers = [r["headers"] for r in server.requests]
    assert rc == 0
    assert headers and all(h.get("Authorization") == f"Bearer {SECRETS['FIC_JUDGE_API_KEY']}" for h in headers)
    assert json.loads((out / "summary.json").read_text())["settings"]["judge"] == "llm:judge-m"
    written = [caplog.text, *capsys.readouterr()] + [p.read_bytes().decode("latin-1") for p in out.rglob("*")
                                                     if p.is_file()]  # fmt: skip
    for secret in SECRETS.values():
        assert not any(secret in text for text in written)


def test_no_fic_option_takes_a_secret():
    """Keys come only from the environment: no fic command-line option or recipe key of fic's own holds one."""
    import importlib
    from dataclasses import fields

    from trl import ModelConfig

    from fic.eval_config import EvalConfig
    from fic.modeling import ModelArguments
    from fic.tracking import is_secret_key

    for name, (module, add, _, _) in cli.commands().items():
        parser = argparse.ArgumentParser()
        getattr(importlib.import_module(module), add)(parser)
        options = [o for action in parser._actions for o in action.option_strings]
        assert not [o for o in options if is_secret_key(o.lstrip("-").replace("-", "_"))], name
    assert not [f.name for f in fields(EvalConfig) if is_secret_key(f.name)]
    own = {f.name for f in fields(ModelArguments)} - {f.name for f in fields(ModelConfig)}
    assert not [name for name in own if is_secret_key(name)]


# ---------------------------------------------------------------- trust_remote_code


def _launcher():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fic_train_launcher", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trust_remote_code_is_off_unless_a_recipe_turns_it_on(monkeypatch):
    import transformers

    from fic.modeling import ModelArguments, load_model_and_tokenizer

    launcher = _launcher()
    names = sorted(p.stem for p in launcher.RECIPES_DIR.glob("*.yaml"))
    assert names
    for name in names:
        stated = re.search(r"^trust_remote_code:\s*true\b", (launcher.RECIPES_DIR / f"{name}.yaml").read_text(), re.M)
        recipe, _ = launcher.load([f"recipe={name}", "bf16=false"])  # bf16: GPU recipes parse on this CPU too
        assert recipe.get(ModelArguments).trust_remote_code is bool(stated), name
    recipe, _ = launcher.load([f"recipe={names[0]}", "bf16=false", "trust_remote_code=true"])
    assert recipe.get(ModelArguments).trust_remote_code is True

    seen = []

    def record(kind):
        def from_pretrained(name, *args, **kwargs):
            seen.append((kind, kwargs.get("trust_remote_code")))
            raise OSError("recorded, not loaded")

        return from_pretrained

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", record("tokenizer"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", record("model"))
    for flag in (False, True):
        with pytest.raises(Exception, match="recorded, not loaded"):
            load_model_and_tokenizer(ModelArguments(model_name_or_path="org/model", trust_remote_code=flag))
    assert seen == [("tokenizer", False), ("tokenizer", True)]
    seen.clear()
    from fic.modeling import load_model

    for flag in (False, True):
        with pytest.raises(Exception, match="recorded, not loaded"):
            load_model("org/model", trust_remote_code=flag)
    assert seen == [("model", False), ("model", True)]
    seen.clear()
    from fic.generation import get_backend

    with pytest.raises(Exception, match="recorded, not loaded"):
        get_backend("transformers", model="org/model")  # what `fic probe/lic/regret --model` load through
    assert seen and all(not flag for _, flag in seen)


def test_no_code_path_turns_trust_remote_code_on():
    hits = []
    for folder in ("src", "eval", "trainers"):
        for path in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"trust_remote_code\s*[=:]\s*True|[\"']trust_remote_code[\"']\s*:\s*True", line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, hits


# ---------------------------------------------------------------- review server bind address


def test_review_binds_to_localhost_unless_told_otherwise(tmp_path, monkeypatch, capsys, caplog):
    from socketserver import BaseServer

    from fic.eval.review import server as review_server

    (tmp_path / "samples.jsonl").write_text(json.dumps({
        "dataset": "d", "item_id": "1", "temperature": 0.0, "perturbation": "none", "sample": 0,
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "user_turn": "u",
        "label": "genuine_followup", "genuine": True,
    }) + "\n")  # fmt: skip
    monkeypatch.setattr(BaseServer, "serve_forever", lambda self, *a, **k: None)  # return at once
    caplog.set_level(logging.WARNING)
    for argv, host, warned in [([], "127.0.0.1", False), (["--host", "0.0.0.0"], "0.0.0.0", True)]:
        parser = argparse.ArgumentParser()
        review_server.add_arguments(parser)
        caplog.clear()
        assert review_server.run(parser.parse_args([str(tmp_path), "--port", "0", *argv])) == 0
        assert f"http://{host}:" in capsys.readouterr().out
        assert ("anyone who can reach it" in caplog.text) is warned

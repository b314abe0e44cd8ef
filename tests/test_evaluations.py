"""An evaluation is one module plus one registry row: a toy evaluation registered here becomes a `fic` command, a
valid `eval.evaluations` entry, an `eval.toy.*` config block listed by `--help-keys`, and part of checkpoint
evaluation, with no other file touched."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass

import pytest

import train
from fic import cli
from fic.eval.evaluate import evaluate
from fic.eval_config import EvalConfig
from fic.evaluations import EVALUATIONS, get_evaluation, register


@dataclass
class ToyConfig:
    """The `eval.toy` block.

    Args:
        words (`int`, defaults to `3`):
            Words per toy answer.
    """

    words: int = 3


@pytest.fixture
def toy(monkeypatch):
    """A module `toy_evaluation` with the three functions of the protocol and a config block, registered as `toy`."""
    module = types.ModuleType("toy_evaluation")
    module.ToyConfig = ToyConfig

    def add_arguments(parser):
        parser.add_argument("--words", type=int, default=3)

    def run(args):
        print(f"toy evaluation of {args.words} words")
        return 0

    def evaluate(backend, tokenizer, config, out_dir, model_path, progress):
        out_dir.mkdir(parents=True, exist_ok=True)
        return {"toy/score": 0.5, "toy/seed": float(config.seed), "toy/words": float(config.block("toy").words)}

    module.add_arguments, module.run, module.evaluate = add_arguments, run, evaluate
    monkeypatch.setitem(sys.modules, "toy_evaluation", module)
    register("toy", "toy_evaluation", "a toy evaluation registered by a test", config="toy_evaluation:ToyConfig")
    yield module
    EVALUATIONS.pop("toy")


def test_the_shipped_evaluations_are_registered_modules_with_the_protocol():
    assert list(EVALUATIONS) == ["probe", "lic", "regret"]
    for evaluation in EVALUATIONS.values():
        module = evaluation.load()
        assert all(callable(getattr(module, f, None)) for f in ("add_arguments", "run", "evaluate")), evaluation
    with pytest.raises(ValueError, match="valid: probe, lic, regret"):
        get_evaluation("bleu")


def test_a_registered_evaluation_is_a_fic_command(toy, capsys):
    assert cli.main(["-h"]) == 0
    assert "toy" in capsys.readouterr().out
    assert cli.main(["toy", "--words", "5"]) == 0
    assert "toy evaluation of 5 words" in capsys.readouterr().out


def test_a_registered_evaluation_runs_in_checkpoint_evaluation(toy, tmp_path):
    config = EvalConfig(evaluations=["toy"], seed=7, blocks={"toy": {"words": 5}})
    record = evaluate(None, None, config, tmp_path / "eval", step=3)
    assert record["metrics"] == {"toy/score": 0.5, "toy/seed": 7.0, "toy/words": 5.0}
    saved = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert saved["step"] == 3 and saved["config"]["toy"] == {"words": 5}


def test_a_registered_evaluation_has_its_recipe_block(toy, capsys):
    recipe, _ = train.load(["recipe=fic_tiny", "eval.toy.words=9"])
    assert recipe.get(EvalConfig).block("toy") == ToyConfig(words=9)
    with pytest.raises(SystemExit):
        train.load(["recipe=fic_tiny", "--help-keys"])
    assert "eval.toy.* (ToyConfig)\n  eval.toy.words: int = 3\n      Words per toy answer." in capsys.readouterr().out


def test_metrics_outside_the_evaluations_namespace_are_refused(toy, tmp_path):
    toy.evaluate = lambda *args: {"score": 1.0}
    with pytest.raises(ValueError, match=r"evaluation 'toy' returned metrics outside its namespace toy/: \['score'\]"):
        evaluate(None, None, EvalConfig(evaluations=["toy"]), tmp_path / "eval")


def test_eval_evaluations_accepts_exactly_the_registered_names(toy):
    EvalConfig(evaluations=["toy", "lic"])
    with pytest.raises(
        ValueError, match=r"eval.evaluations: unknown \['bleu'\]; valid: \['probe', 'lic', 'regret', 'toy'\]"
    ):
        EvalConfig(evaluations=["bleu"])

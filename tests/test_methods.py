"""A method is one module plus one registry row (and a recipe): a toy method registered here is accepted by
`train.py` (its recipe keys parsed and listed by `--help-keys`, its recipe check run before its `main`, its plan
printed by `--plan`), with no other file touched; and `train.py` knows no method but through the registry."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from transformers import TrainingArguments
from trl import SFTConfig

import train
from fic.recipe import RecipeError
from fic.trainers.methods import METHODS, PROTOCOL, get_method, register
from fic.trainers.plan import MethodPlan


@dataclass
class ToyConfig(SFTConfig):
    """Configuration of the toy method.

    Args:
        words (`int`, defaults to `3`):
            Words per toy example.
    """

    words: int = field(default=3, metadata={"help": "Words per toy example."})


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """A module `toy_method` with the protocol, registered as `toy`, and a recipe file of that method."""
    module = types.ModuleType("toy_method")
    module.ToyConfig = ToyConfig
    module.ran = []

    def check_recipe(recipe):
        if recipe.get(ToyConfig).words < 1:
            raise RecipeError("words: must be at least 1")

    def main(recipe):
        module.ran.append(recipe.get(ToyConfig).words)

    module.check_recipe, module.main = check_recipe, main
    module.PLAN = MethodPlan(reads=lambda args, eval_config: [], train_rows=lambda args, items: args.words)
    monkeypatch.setitem(sys.modules, "toy_method", module)
    register("toy", "toy_method", "toy_method:ToyConfig")
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(f"method: toy\nmodel_name_or_path: tiny:chatml\nbf16: false\noutput_dir: {tmp_path / 'out'}\n")
    yield module, str(recipe)
    METHODS.pop("toy")


def test_the_shipped_methods_are_registered_modules_with_the_protocol():
    assert list(METHODS) == ["collab_sft", "followup_rl", "vasd"]
    for method in METHODS.values():
        module = method.load()
        assert callable(module.check_recipe) and callable(module.main), method
        assert isinstance(module.PLAN, MethodPlan), method
        assert issubclass(method.config_class(), TrainingArguments), method  # a TRL config
    with pytest.raises(
        RecipeError, match="method: unknown method 'dpo'; valid methods are collab_sft, followup_rl, vasd"
    ):
        get_method("dpo")


def test_the_registry_imports_no_method_until_one_is_used():
    code = "import sys, fic.trainers.methods; print(sorted(m for m in sys.modules if m.startswith('fic.trainers.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['fic.trainers.methods']"


def test_train_py_dispatches_through_the_registry_only():
    source = Path(train.__file__).read_text()
    assert not any(f"fic.trainers.{name}" in source for name in ("collab_sft", "followup_rl", "vasd"))


def test_a_registered_method_runs_from_its_recipe(toy):
    module, recipe = toy
    assert train.main([f"recipe={recipe}", "words=5"]) == 0
    assert module.ran == [5]


def test_a_registered_method_checks_its_recipe_before_main(toy, capsys):
    module, recipe = toy
    assert train.main([f"recipe={recipe}", "words=0"]) == 2
    assert "error: words: must be at least 1" in capsys.readouterr().err
    assert module.ran == []


def test_a_registered_method_lists_its_keys_and_plans(toy, capsys):
    _, recipe = toy
    with pytest.raises(SystemExit) as done:
        train.load([f"recipe={recipe}", "--help-keys"])
    assert done.value.code == 0
    assert "words: int = 3\n      Words per toy example." in capsys.readouterr().out
    assert train.main([f"recipe={recipe}", "words=7", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "plan for recipe" in out and "(method toy)" in out and "training examples: 7" in out


def test_an_unknown_method_or_a_module_without_the_protocol_is_named(toy, capsys, tmp_path):
    module, recipe = toy
    other = tmp_path / "dpo.yaml"
    other.write_text("method: dpo\nmodel_name_or_path: tiny:chatml\n")
    assert train.main([f"recipe={other}"]) == 2
    assert (
        "method: unknown method 'dpo'; valid methods are collab_sft, followup_rl, vasd, toy" in capsys.readouterr().err
    )
    del module.main
    with pytest.raises(TypeError, match=r"method 'toy': module toy_method has no main; a method module provides"):
        get_method("toy").load()
    assert PROTOCOL == ("check_recipe", "main", "PLAN")

"""Recipe loading: merging overrides, typed parsing, and the errors for unknown recipes, keys and bad values."""

import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from conftest import ROOT
from trl import SFTConfig

from fic.modeling import ModelArguments
from fic.recipe import RecipeError, coerce, load_raw, parse


@dataclass
class Block:
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    judge: str = "heuristic"
    samples: int = 1


@pytest.fixture
def recipes(tmp_path):
    (tmp_path / "tiny.yaml").write_text(
        "method: collab_sft\nmodel_name_or_path: some/model\nlearning_rate: 1.0e-4\nnum_train_epochs: 2\n"
        "use_peft: true\nlora_r: 8\nbf16: false\neval:\n  temperatures: [0.0, 1.0]\n  samples: 2\n"
    )
    return tmp_path


def parsed(recipes, *overrides):
    raw = load_raw("tiny", list(overrides), recipes)
    raw.setdefault("output_dir", str(recipes / "out"))
    return parse("tiny", raw, [SFTConfig, ModelArguments], {"eval": Block})


def test_parse_splits_keys_across_dataclasses(recipes):
    recipe = parsed(recipes, "learning_rate=3e-5", "eval.samples=4", "lora_target_modules=[q_proj,v_proj]")
    sft, model, block = recipe.get(SFTConfig), recipe.get(ModelArguments), recipe.get(Block)
    assert recipe.method == "collab_sft"
    assert sft.learning_rate == pytest.approx(3e-5) and sft.num_train_epochs == 2
    assert model.model_name_or_path == "some/model" and model.use_peft and model.lora_r == 8
    assert model.lora_target_modules == ["q_proj", "v_proj"]
    assert block.temperatures == [0.0, 1.0] and block.samples == 4
    assert model.trust_remote_code is False


def test_unknown_key_suggests_the_closest(recipes):
    with pytest.raises(RecipeError, match=r"unknown key 'learnign_rate'.*Did you mean: learning_rate"):
        parsed(recipes, "learnign_rate=1")
    with pytest.raises(RecipeError, match=r"unknown key 'eval.sample'.*eval.samples"):
        parsed(recipes, "eval.sample=3")


def test_bad_value_names_key_value_and_type(recipes):
    with pytest.raises(RecipeError, match=r"learning_rate: invalid value 'fast' \(expected float\)"):
        parsed(recipes, "learning_rate=fast")
    with pytest.raises(RecipeError, match=r"eval.samples: invalid value 'many' \(expected int\)"):
        parsed(recipes, "eval.samples=many")
    with pytest.raises(RecipeError, match=r"use_peft: invalid value 'maybe' \(expected bool\)"):
        parsed(recipes, "use_peft=maybe")


def test_unknown_recipe_lists_available(recipes):
    with pytest.raises(RecipeError, match=r"unknown recipe 'tinny'.*Did you mean tiny.*Available recipes: tiny"):
        load_raw("tinny", [], recipes)


def test_malformed_override(recipes):
    with pytest.raises(RecipeError, match="key=value"):
        load_raw("tiny", ["learning_rate"], recipes)


@pytest.mark.parametrize(
    "value, tp, expected",
    [("3", int, 3), (2.0, int, 2), ("1e-3", float, 1e-3), ("yes", bool, True), ("a,b", list[str], ["a", "b"]),
     (None, int | None, None), ("0.5", float | None, 0.5), ("x", str, "x")],
)  # fmt: skip
def test_coerce(value, tp, expected):
    assert coerce(value, tp) == expected


def test_train_py_unknown_recipe_exits_cleanly():
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "recipe=does_not_exist"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 2
    assert "unknown recipe 'does_not_exist'" in out.stderr and "Available recipes:" in out.stderr
    assert "Traceback" not in out.stderr

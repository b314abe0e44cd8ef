"""The `eval:` block's nested evaluation blocks (`eval.lic.*`, `eval.regret.*`): parsed from recipes and overrides,
listed by `--help-keys`, saved and read back, and the flat keys of the previous release still read with one
deprecation line that names the new key."""

from __future__ import annotations

import pytest
from conftest import ROOT
from trl import SFTConfig

import train
from fic.eval_config import EvalConfig, LicConfig, RegretConfig
from fic.modeling import ModelArguments
from fic.recipe import RecipeError, load_raw, move_overrides, parse

NESTED = {"eval": EvalConfig}


def parsed(tmp_path, body: str, *overrides: str):
    """A recipe file with `body` under `eval:`, loaded the way train.py loads one."""
    (tmp_path / "r.yaml").write_text(f"method: collab_sft\nmodel_name_or_path: m\nbf16: false\neval:\n{body}")
    overrides, moved = move_overrides(list(overrides), NESTED)
    raw = load_raw("r", overrides, tmp_path)
    raw.setdefault("output_dir", str(tmp_path / "out"))
    recipe = parse("r", raw, [SFTConfig, ModelArguments], NESTED)
    return recipe.get(EvalConfig), moved + recipe.deprecations


def test_nested_blocks_parse_from_the_file_and_from_overrides(tmp_path):
    ev, notes = parsed(tmp_path, "  lic:\n    runs: 3\n    modes: [full, sharded]\n", "eval.regret.limit=4")
    assert ev.block("lic") == LicConfig(runs=3, modes=["full", "sharded"])
    assert ev.block("regret") == RegretConfig(limit=4)
    assert notes == []


def test_flat_keys_still_parse_with_one_line_naming_the_new_key(tmp_path):
    ev, notes = parsed(tmp_path, "  lic_runs: 2\n  regret_episodes: 5\n")
    assert (ev.block("lic").runs, ev.block("regret").limit) == (2, 5)
    assert notes == [
        "eval.lic_runs is deprecated: use eval.lic.runs (the old key is read for one more release)",
        "eval.regret_episodes is deprecated: use eval.regret.limit (the old key is read for one more release)",
    ]


def test_an_override_wins_over_the_recipe_whichever_spelling_each_uses(tmp_path):
    ev, notes = parsed(tmp_path, "  lic:\n    runs: 3\n", "eval.lic_runs=7")  # old override, new recipe
    assert ev.block("lic").runs == 7 and notes == [
        "eval.lic_runs is deprecated: use eval.lic.runs (the old key is read for one more release)"
    ]
    ev, notes = parsed(tmp_path, "  lic_runs: 3\n", "eval.lic.runs=7")  # new override, old recipe
    assert ev.block("lic").runs == 7
    assert notes == [
        "eval.lic_runs is deprecated: use eval.lic.runs (eval.lic_runs is ignored: eval.lic.runs is set too)"
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  lic:\n    runz: 3\n", r"unknown key 'eval.lic.runz'.*Did you mean: eval.lic.runs"),
        ("  lic:\n    runs: many\n", r"eval.lic.runs: invalid value 'many' \(expected int\)"),
        ("  lic:\n    runs: 0\n", r"eval.lic.runs: 0; pass an integer >= 1"),
        ("  lic: 3\n", r"eval.lic: expected a mapping of keys, got 3"),
    ],
)
def test_block_mistakes_name_the_dotted_key(tmp_path, body, message):
    with pytest.raises(RecipeError, match=message):
        parsed(tmp_path, body)


def test_saved_config_round_trips_and_old_flat_files_still_read():
    config = EvalConfig(datasets=["x"], blocks={"lic": {"runs": 2}, "regret": RegretConfig(policy="bag")})
    saved = config.to_dict()
    assert saved["lic"]["runs"] == 2 and saved["regret"]["policy"] == "bag" and "blocks" not in saved
    assert EvalConfig.from_dict(saved) == config
    old = {"datasets": ["x"], "lic_runs": 2, "regret_policy": "bag", "gone_in_a_later_release": 1}
    assert EvalConfig.from_dict(old) == config


def test_help_keys_lists_each_block_under_its_dotted_prefix(capsys):
    with pytest.raises(SystemExit) as done:
        train.load(["recipe=fic_tiny", "--help-keys"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "eval.lic.* (LicConfig)" in text and "eval.regret.* (RegretConfig)" in text
    assert "  eval.lic.runs: int = 1\n      Runs per instruction and mode (N)." in text
    assert "eval.lic_runs" not in text and "eval.blocks" not in text


def test_shipped_recipes_use_the_nested_keys():
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        text = path.read_text()
        assert not any(old in text for old in EvalConfig.deprecated_keys()), path.name

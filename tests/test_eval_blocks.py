"""The `eval:` block's nested evaluation blocks (`eval.lic.*`, `eval.regret.*`): parsed from recipes and overrides,
listed by `--help-keys`, saved and read back; a flat spelling (`eval.lic_runs`) is an unknown key that names the
nested one (no release has shipped the flat keys, so nothing keeps them)."""

from __future__ import annotations

import pytest
from trl import SFTConfig

import train
from fic.eval_config import EvalConfig, LicConfig, RegretConfig
from fic.modeling import ModelArguments
from fic.recipe import RecipeError, load_raw, parse

NESTED = {"eval": EvalConfig}


def parsed(tmp_path, body: str, *overrides: str):
    """A recipe file with `body` under `eval:`, loaded the way train.py loads one."""
    (tmp_path / "r.yaml").write_text(f"method: collab_sft\nmodel_name_or_path: m\nbf16: false\neval:\n{body}")
    raw = load_raw("r", list(overrides), tmp_path)
    raw.setdefault("output_dir", str(tmp_path / "out"))
    return parse("r", raw, [SFTConfig, ModelArguments], NESTED).get(EvalConfig)


def test_nested_blocks_parse_from_the_file_and_from_overrides(tmp_path):
    ev = parsed(tmp_path, "  lic:\n    runs: 3\n    modes: [full, sharded]\n", "eval.regret.limit=4")
    assert ev.block("lic") == LicConfig(runs=3, modes=["full", "sharded"])
    assert ev.block("regret") == RegretConfig(limit=4)
    assert parsed(tmp_path, "  lic:\n    runs: 3\n", "eval.lic.runs=7").block("lic").runs == 7  # the override wins


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("  lic:\n    runz: 3\n", r"unknown key 'eval.lic.runz'.*Did you mean: eval.lic.runs"),
        ("  lic:\n    runs: many\n", r"eval.lic.runs: invalid value 'many' \(expected int\)"),
        ("  lic:\n    runs: 0\n", r"eval.lic.runs: 0; pass an integer >= 1"),
        ("  lic: 3\n", r"eval.lic: expected a mapping of keys, got 3"),
        ("  lic_runs: 2\n", r"unknown key 'eval.lic_runs'.*Did you mean: eval.lic.runs"),
    ],
)
def test_block_mistakes_name_the_dotted_key(tmp_path, body, message):
    with pytest.raises(RecipeError, match=message):
        parsed(tmp_path, body)


def test_saved_config_round_trips_and_unknown_keys_are_ignored():
    config = EvalConfig(datasets=["x"], blocks={"lic": {"runs": 2}, "regret": RegretConfig(policy="bag")})
    saved = config.to_dict()
    assert saved["lic"]["runs"] == 2 and saved["regret"]["policy"] == "bag" and "blocks" not in saved
    assert EvalConfig.from_dict(saved) == config
    assert EvalConfig.from_dict({**saved, "gone_in_a_later_release": 1}) == config  # files outlive code


def test_help_keys_lists_each_block_under_its_dotted_prefix(capsys):
    with pytest.raises(SystemExit) as done:
        train.load(["recipe=fic_tiny", "--help-keys"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "eval.lic.* (LicConfig)" in text and "eval.regret.* (RegretConfig)" in text
    assert "  eval.lic.runs: int = 1\n      Runs per instruction and mode (N)." in text
    assert "eval.lic_runs" not in text and "eval.blocks" not in text

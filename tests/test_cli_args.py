"""One CLI vocabulary: shared flags, defaults from `EvalConfig` shown in `-h`, old spellings refused, `--version`,
`fic sources`, and `train.py --help-keys` grouped by owner."""

import argparse
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

from fic import cli
from fic.cli_args import HelpFormatter
from fic.eval_config import EvalConfig

ROOT = Path(__file__).resolve().parents[1]


def parser_for(name: str) -> argparse.ArgumentParser:
    module, add, _, help_text = cli.commands()[name]
    parser = argparse.ArgumentParser(prog=f"fic {name}", description=help_text, formatter_class=HelpFormatter)
    getattr(importlib.import_module(module), add)(parser)
    return parser


def test_probe_defaults_are_the_callbacks():
    """`fic probe` and the checkpoint callback measure a checkpoint with the same settings."""
    args = parser_for("probe").parse_args(["--model", "m", "--datasets", "gsm8k", "--out", "o"])
    config = EvalConfig()
    assert args.response_tokens == config.response_tokens
    assert (args.samples, args.limit, args.max_new_tokens, args.seed) == (
        config.samples, config.limit, config.max_new_tokens, config.seed)  # fmt: skip
    assert [float(t) for t in args.temperatures.split(",")] == config.temperatures
    assert (args.judge, args.responses) == (config.judge, config.responses)
    lic = parser_for("lic").parse_args(["--model", "m", "--out", "o"])
    block = config.block("lic")
    assert (lic.limit, lic.runs, lic.max_new_tokens) == (block.limit, block.runs, block.max_new_tokens)


def test_help_shows_defaults_and_hides_old_spellings():
    text = parser_for("probe").format_help()
    assert f"(default: {EvalConfig().response_tokens})" in text and "--judge-base-url" in text
    followups = parser_for("build-followups").format_help()
    assert "--samples" in followups and "--n " not in followups and "--answers" not in followups


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("build-followups", ["--n", "3", "--out", "o"]),
        ("build-followups", ["--answers", "model", "--out", "o"]),
        ("build-followups", ["--answer-tokens", "9", "--out", "o"]),
        ("lic", ["--model", "m", "--user", "rule", "--out", "o"]),
        ("judge", ["in.jsonl", "--base-url", "http://x/v1", "--model", "j", "--out", "o"]),
        ("regret", ["--scenario", "products", "--policy", "reference", "--episodes", "7", "--out", "o"]),
        ("bag", ["--model", "m", "--items", "5", "--out", "o"]),
    ],
)  # fmt: skip
def test_removed_spellings_are_refused(command, argv):
    with pytest.raises(SystemExit):
        parser_for(command).parse_args(argv)


def test_same_idea_same_flag():
    """The shared flags exist, under one name, on every command that has the idea."""
    for name in ("probe", "lic", "bag", "build-followups"):
        options = parser_for(name)._option_string_actions
        assert {"--model", "--backend", "--base-url", "--out", "--limit", "--max-new-tokens", "--seed"} <= set(options)
    for name in ("probe", "build-followups", "judge", "eval-checkpoints"):
        assert {"--judge", "--judge-base-url", "--judge-model"} <= set(parser_for(name)._option_string_actions)
    for name in ("probe", "build-followups"):
        assert {"--samples", "--responses", "--response-tokens"} <= set(parser_for(name)._option_string_actions)


def test_version_and_sources(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("fic ")
    assert cli.main(["sources", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["gsm8k"]["hub"].startswith("openai/gsm8k") and "question" in rows["gsm8k"]["schema"]
    assert rows["conversations"]["hub"].startswith("none") and "messages" in rows["conversations"]["schema"]


def test_judge_out_is_a_folder(tmp_path):
    src = tmp_path / "in.jsonl"
    context = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}]
    src.write_text(json.dumps({"messages": context, "user_turn": "Why add them?"}) + "\n")
    assert cli.main(["judge", str(src), "--out", str(tmp_path / "j")]) == 0
    assert (tmp_path / "j" / "judgements.jsonl").is_file()


def test_help_keys_groups_by_owner_fic_first(capsys):
    spec = importlib.util.spec_from_file_location("fic_train_entry", ROOT / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    with pytest.raises(SystemExit) as stop:
        train.main(["recipe=followup_rl_tiny", "--help-keys"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    titles = [line for line in text.splitlines() if re.fullmatch(r"[\w.*]+ \(\w+\)", line)]
    assert titles[0].startswith("FollowupRLConfig (fic)")
    assert titles.index("eval.* (EvalConfig)") < titles.index("GRPOConfig (trl)")
    assert (
        "  contexts: list[str] = []" in text
        and "  eval.judge: one of heuristic | learned | strict | llm | cascade" in text
    )
    assert "  learning_rate: float = " in text


@pytest.mark.parametrize("command", ["probe", "lic", "regret", "bag", "build-followups"])
def test_batch_size_reaches_the_transformers_backend(command, monkeypatch):
    """`--batch-size` sets the transformers backend's prompts per batch; an endpoint gets its URL instead."""
    from fic import cli_args

    required = {"probe": ["--model", "m", "--datasets", "gsm8k"], "lic": ["--model", "m"],
                "regret": ["--scenario", "products", "--policy", "model", "--seed", "0"],
                "bag": ["--model", "m", "--seed", "0"], "build-followups": []}[command]  # fmt: skip
    parser = parser_for(command)
    args = parser.parse_args([*required, "--out", "o", "--batch-size", "32"])
    assert cli_args.backend_kwargs(args) == {"batch_size": 32, "max_batch_tokens": None}
    args = parser.parse_args([*required, "--out", "o", "--max-batch-tokens", "4096"])
    assert cli_args.backend_kwargs(args) == {"batch_size": 8, "max_batch_tokens": 4096}
    args = parser.parse_args([*required, "--out", "o", "--base-url", "http://localhost:1/v1"])
    assert cli_args.backend_kwargs(args) == {"base_url": "http://localhost:1/v1"}
    with pytest.raises(SystemExit):
        parser.parse_args([*required, "--out", "o", "--batch-size", "0"])

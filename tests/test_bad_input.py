"""Bad input to every `fic` command and every recipe: exactly one clear error line, no traceback, no model loaded.

Everything runs in process (`fic.cli.main`, `train.main`) with model loading switched off, so a check that comes too
late (after a model would have loaded) fails the test instead of passing slowly; two cases run as real processes.
"""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fic import cli

ROOT = Path(__file__).resolve().parents[1]
ERROR = re.compile(r"^(fic [\w-]+: )?error: ")
MISSING = "/nonexistent/fic-bad-input"


def one_error_line(err: str) -> str:
    """The single `error: ...` line (argparse's `fic CMD: error: ...` too) of a failed command; no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if ERROR.match(line)]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


class ModelLoaded(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    """Any model load, and any trainer's `main`, fails the test: bad input must be refused before either."""
    from transformers import AutoModelForCausalLM

    def refuse(*args, **kwargs):
        raise ModelLoaded(f"a model was loaded before the error: {args[:2]}")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
    for module in ("fic.trainers.collab_sft", "fic.trainers.followup_rl", "fic.trainers.vasd.recipe"):
        monkeypatch.setattr(f"{module}.main", refuse)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad_input")
    good = {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"}
    (root / "good.jsonl").write_text(json.dumps(good) + "\n")
    (root / "broken.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    (root / "no_answer.jsonl").write_text(json.dumps({"question": "Only a question?"}) + "\n")
    (root / "judge_rows.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{cut off\n')
    (root / "empty_dir").mkdir()
    (root / "a_file.txt").write_text("not a folder\n")
    return {p.stem if p.is_file() else p.name: p for p in root.iterdir()} | {"root": root}


def fic_cases(f: dict[str, Path]) -> list[tuple[str, list[str], str]]:
    """(id, argv, a piece of the error line) for every command."""
    out = str(f["root"] / "out")
    good, broken = f"gsm8k:{f['good']}", f"gsm8k:{f['broken']}"
    return [
        # the dispatcher
        ("unknown-command", ["probes"], "unknown command 'probes'"),
        # probe
        ("probe-no-model", ["probe", "--datasets", "gsm8k", "--out", out], "--model"),
        ("probe-no-out", ["probe", "--model", "tiny:chatml", "--datasets", good], "--out"),
        ("probe-unknown-flag", ["probe", "--model", "m", "--datasets", good, "--out", out, "--items", "3", "--bogus"],
         "--bogus"),
        ("probe-unknown-dataset", ["probe", "--model", "m", "--datasets", "gsm9k", "--out", out], "'gsm9k'"),
        ("probe-missing-file", ["probe", "--model", "m", "--datasets", f"gsm8k:{MISSING}.jsonl", "--out", out],
         "does not exist"),
        ("probe-malformed-row", ["probe", "--model", "m", "--datasets", broken, "--out", out], "broken.jsonl row 2"),
        ("probe-bad-temperature", ["probe", "--model", "m", "--datasets", good, "--temperatures", "0,hot",
                                   "--out", out], "--temperatures"),
        ("probe-negative-temperature", ["probe", "--model", "m", "--datasets", good, "--temperatures", "-1",
                                        "--out", out], ">= 0"),
        ("probe-bad-perturbation", ["probe", "--model", "m", "--datasets", good, "--perturbations", "shuffle",
                                    "--out", out], "shuffle"),
        ("probe-zero-samples", ["probe", "--model", "m", "--datasets", good, "--samples", "0", "--out", out],
         "--samples"),
        ("probe-llm-judge-no-url", ["probe", "--model", "m", "--datasets", good, "--judge", "llm", "--out", out],
         "--judge-base-url"),
        ("probe-bad-judge", ["probe", "--model", "m", "--datasets", good, "--judge", "oracle", "--out", out],
         "oracle"),
        ("probe-out-is-file", ["probe", "--model", "m", "--datasets", good, "--out", str(f["a_file"])],
         "always a folder"),
        ("probe-bad-tiny-model", ["probe", "--model", "tiny:nope", "--datasets", good, "--out", out], "tiny:FAMILY"),
        ("probe-openai-no-url", ["probe", "--model", "m", "--backend", "openai", "--datasets", good, "--out", out],
         "--base-url"),
        # judge, judge-agreement
        ("judge-missing-input", ["judge", f"{MISSING}.jsonl", "--out", out], "does not exist"),
        ("judge-malformed-row", ["judge", str(f["judge_rows"]), "--out", out], "line 1"),
        ("judge-no-out", ["judge", str(f["judge_rows"])], "--out"),
        ("judge-llm-no-url", ["judge", str(f["judge_rows"]), "--judge", "llm", "--out", out], "--judge-base-url"),
        ("agreement-missing-file", ["judge-agreement", f"{MISSING}-a.jsonl", f"{MISSING}-b.jsonl"],
         "does not exist"),
        ("agreement-malformed", ["judge-agreement", str(f["broken"]), str(f["broken"])], "line 2"),
        # lic
        ("lic-no-model", ["lic", "--out", out], "--model"),
        ("lic-bad-mode", ["lic", "--model", "m", "--modes", "full,sideways", "--out", out], "sideways"),
        ("lic-unknown-data", ["lic", "--model", "m", "--data", "nosuchset", "--out", out], "'nosuchset'"),
        ("lic-missing-file", ["lic", "--model", "m", "--data", f"lost_in_conversation:{MISSING}.json", "--out", out],
         "does not exist"),
        ("lic-llm-user-no-url", ["lic", "--model", "m", "--user", "llm", "--out", out], "--user-base-url"),
        ("lic-zero-runs", ["lic", "--model", "m", "--runs", "0", "--out", out], "--runs"),
        # regret, bag
        ("regret-no-scenario", ["regret", "--policy", "reference", "--seed", "0", "--out", out], "--scenario"),
        ("regret-bad-policy", ["regret", "--scenario", "products", "--policy", "psychic", "--seed", "0", "--out", out],
         "psychic"),
        ("regret-missing-data", ["regret", "--scenario", "products", "--policy", "reference", "--seed", "0",
                                 "--data", f"{MISSING}.json", "--out", out], MISSING),
        ("regret-model-policy-no-model", ["regret", "--scenario", "products", "--policy", "model", "--seed", "0",
                                          "--out", out], "--model"),
        ("regret-zero-limit", ["regret", "--scenario", "products", "--policy", "reference", "--seed", "0",
                                  "--limit", "0", "--out", out], "0"),
        ("bag-no-seed", ["bag", "--model", "m", "--out", out], "--seed"),
        ("bag-missing-data", ["bag", "--model", "m", "--seed", "0", "--data", f"{MISSING}.json", "--out", out],
         MISSING),
        ("bag-bad-k", ["bag", "--model", "m", "--seed", "0", "--k", "0", "--out", out], "k"),
        ("bag-negative-belief-temperature", ["bag", "--model", "m", "--seed", "0", "--belief-temperature", "-0.5",
                                             "--out", out], "--belief-temperature=-0.5: need a temperature > 0"),
        ("bag-zero-belief-temperature", ["bag", "--model", "m", "--seed", "0", "--belief-temperature", "0",
                                         "--out", out], "--belief-temperature=0.0: need a temperature > 0"),
        ("regret-negative-belief-temperature", ["regret", "--scenario", "products", "--policy", "bag", "--model", "m",
                                                "--seed", "0", "--belief-temperature", "-1", "--out", out],
         "--belief-temperature=-1.0: need a temperature > 0"),
        # build-followups
        ("followups-nothing", ["build-followups", "--out", out], "nothing to build"),
        ("followups-no-model", ["build-followups", "--contexts", good, "--out", out], "--model"),
        ("followups-missing-file", ["build-followups", "--real", f"mt_bench:{MISSING}.jsonl", "--out", out],
         "does not exist"),
        ("followups-zero-samples", ["build-followups", "--contexts", good, "--samples", "0", "--out", out],
         "--samples"),
        ("followups-malformed-row", ["build-followups", "--contexts", broken, "--candidates", "templates",
                                     "--out", out], "broken.jsonl row 2"),
        # eval-checkpoints
        ("checkpoints-missing-dir", ["eval-checkpoints", MISSING], "not a folder"),
        ("checkpoints-no-config", ["eval-checkpoints", str(f["empty_dir"])], "without the eval callback"),
        ("checkpoints-no-checkpoint", ["eval-checkpoints", str(f["empty_dir"]), "--datasets", good],
         "no checkpoint-N"),
        ("checkpoints-bad-judge", ["eval-checkpoints", str(f["empty_dir"]), "--judge", "llm"], "--judge-base-url"),
        ("checkpoints-bad-evaluation", ["eval-checkpoints", str(f["empty_dir"]), "--evaluations", "vibes"], "vibes"),
        # review, sources
        ("review-missing-dir", ["review", MISSING], MISSING),
        ("review-no-samples", ["review", str(f["empty_dir"])], "samples.jsonl"),
        ("sources-unknown-flag", ["sources", "--format", "csv"], "--format"),
        # rates
        ("rates-no-samples", ["rates", str(f["empty_dir"])], "samples.jsonl not found"),
        ("rates-missing-labels", ["rates", str(f["empty_dir"]), "--labels", f"{MISSING}.jsonl"], "samples.jsonl"),
    ]  # fmt: skip


CASE_IDS = [case[0] for case in fic_cases({k: Path("/x") for k in ("good", "broken", "judge_rows", "a_file",
                                                                     "empty_dir", "root")})]  # fmt: skip


def test_every_command_is_walked():
    walked = {case_id.split("-")[0] for case_id in CASE_IDS}
    prefixes = {"judge-agreement": "agreement", "build-followups": "followups", "eval-checkpoints": "checkpoints"}
    assert {prefixes.get(name, name) for name in cli.commands()} <= walked


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_fic_command_bad_input_prints_one_line(case_id, files, capsys):
    argv, expected = next((argv, exp) for cid, argv, exp in fic_cases(files) if cid == case_id)
    try:
        status = cli.main(argv)
    except SystemExit as stop:  # argparse
        status = stop.code
    assert status not in (0, None), f"{argv}: accepted"
    line = one_error_line(capsys.readouterr().err)
    assert expected in line, line


# ---------------------------------------------------------------- recipes


def _train_module():
    spec = importlib.util.spec_from_file_location("fic_train_entry", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECIPES = sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))
# Method-specific mistakes: the data a method needs, left empty or pointing at nothing.
EMPTY_DATA = {
    "collab_sft": (["train_datasets=[]", "followup_contexts=[]"], "train_datasets / followup_contexts"),
    "followup_rl": (["contexts=[]"], "contexts: empty"),
    "vasd": (["model_name_or_path=tiny:chatml", "train_data=null", "synthetic_tasks=0"], "train_data / synthetic"),
}
# eval off and empty: the recipes' own eval data lives in ../shared/data, which a checkout without it lacks (that
# error would come first and name the eval file).
MISSING_DATA = {
    "collab_sft": [f"train_datasets=[conversations:{MISSING}.jsonl]", "eval.enabled=false", "eval.datasets=[]"],
    "followup_rl": [f"contexts=[gsm8k:{MISSING}/train.jsonl]", "eval.enabled=false", "eval.datasets=[]"],
    "vasd": [f"train_data={MISSING}.jsonl"],
}
GENERIC = {
    "unknown-key": (["learning_rat=1e-4"], "learning_rat"),
    "bad-value": (["learning_rate=fast"], "learning_rate"),
    "bad-eval-value": (["eval.judge=oracle"], "oracle"),
    "not-key-value": (["learning_rate"], "key=value"),
    "unknown-eval-dataset": (["eval.datasets=[gsm9k]"], "gsm9k"),
    "missing-eval-file": ([f"eval.datasets=[gsm8k:{MISSING}.jsonl]"], "does not exist"),
}


def _method(recipe: str) -> str:
    text = (ROOT / "recipes" / f"{recipe}.yaml").read_text()
    return re.search(r"^method:\s*(\w+)", text, re.MULTILINE).group(1)


RECIPE_CASES = [(r, kind) for r in RECIPES for kind in [*GENERIC, "empty-data", "missing-data"]]


@pytest.fixture(scope="module")
def train():
    return _train_module()


@pytest.mark.parametrize(("recipe", "kind"), RECIPE_CASES, ids=[f"{r}-{k}" for r, k in RECIPE_CASES])
def test_recipe_bad_input_prints_one_line(recipe, kind, train, capsys, tmp_path):
    method = _method(recipe)
    if kind == "empty-data":
        extra, expected = EMPTY_DATA[method]
    elif kind == "missing-data":
        extra, expected = MISSING_DATA[method], MISSING
    else:
        extra, expected = GENERIC[kind]
    # GPU recipes: no bf16 on a CPU-only machine, or that (correct) error would come first
    argv = [f"recipe={recipe}", f"output_dir={tmp_path}", "bf16=false", *extra]
    status = train.main(argv)
    assert status in (1, 2), f"{argv}: exit {status}"
    line = one_error_line(capsys.readouterr().err)
    assert expected in line, line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [(["penalties.new_task_prompt=0.5"], "penalties.new_task_prompt=0.5 pays a failure"),
     (["penalties.degenerate_short=-0.5"], "would earn more than a generic follow-up"),
     (["reward_form=sparse"], "expected one of absolute | dense | group_relative"),
     (["reward_hacking_window=0"], "reward_hacking_window=0")],
)  # fmt: skip
def test_followup_rl_reward_settings_print_one_line(extra, expected, train, capsys, tmp_path):
    assert train.main(["recipe=followup_rl_tiny", f"output_dir={tmp_path}", *extra]) in (1, 2)
    assert expected in one_error_line(capsys.readouterr().err)


def test_train_py_without_or_with_unknown_recipe(train, capsys):
    assert train.main([]) == 2
    assert "recipe=NAME" in one_error_line(capsys.readouterr().err)
    assert train.main(["recipe=followup_rl_tine"]) == 2
    assert "followup_rl_tiny" in one_error_line(capsys.readouterr().err)


# ---------------------------------------------------------------- as real processes (the two reported tracebacks)


def test_reported_cases_as_processes(tmp_path):
    env_run = lambda *cmd: subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)  # noqa: E731
    rl = env_run(sys.executable, "train.py", "recipe=followup_rl_tiny", "contexts=[]", f"output_dir={tmp_path}")
    assert rl.returncode == 2, rl.stderr[-3000:]
    assert "contexts: empty" in one_error_line(rl.stderr)
    probe = env_run(sys.executable, "-m", "fic.cli", "probe", "--datasets", "gsm8k", "--out", str(tmp_path / "p"))
    assert probe.returncode == 2, probe.stderr[-3000:]
    assert "--model" in one_error_line(probe.stderr)

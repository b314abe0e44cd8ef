"""Every path, recipe, make target and `fic` command the README names must exist, and the figures it quotes from
`make reproduce` and `make demo` are the ones those runs wrote."""

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from fic.cli import commands as fic_commands

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make demo", "make test"]


def test_paths_exist():
    paths = set(re.findall(r"(?<![\w./-])((?:accelerate_configs|recipes|src/fic|trainers|eval|tests|benchmarks"
                           r"|reproduce)/[\w./-]*)", README))  # fmt: skip
    paths |= {"train.py", "Makefile", "pyproject.toml"}
    missing = [p for p in sorted(paths) if "NAME" not in p and not (ROOT / p.rstrip(".")).exists()]
    assert not missing, f"README names paths that do not exist: {missing}"


def test_recipes_exist():
    names = set(re.findall(r"recipe=(\w+)", README)) - {"NAME"}
    assert names
    missing = [n for n in sorted(names) if not (ROOT / "recipes" / f"{n}.yaml").exists()]
    assert not missing, f"README names recipes that do not exist: {missing}"


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"`make ([\w-]+)`", README)) | {"demo", "test"}
    missing = [t for t in sorted(targets) if not re.search(rf"^{t}:", makefile, re.M)]
    assert not missing


def test_fic_commands_exist():
    commands = set(re.findall(r"^fic ([\w-]+)", README, re.M)) | set(re.findall(r"`fic ([a-z][\w-]+)`", README))
    missing = [c for c in sorted(commands) if c not in fic_commands()]
    assert not missing, f"README names fic commands that do not exist: {missing}"


def _readme_table():
    sys.path.insert(0, str(ROOT / "reproduce"))
    import readme_table

    return readme_table


def test_reproduce_table_is_the_one_the_summary_gives():
    """The results table of "Reproducing the papers on CPU" is `reproduce/readme_table.py`'s output, so every number
    in it is read from reproduce/results/summary.json, the last fresh-clone `make reproduce`."""
    readme_table = _readme_table()
    summary = json.loads(readme_table.SUMMARY.read_text())
    block = readme_table.markdown(summary)
    assert block in README, (
        "README's reproduce table differs from `python reproduce/readme_table.py`; paste its output"
    )
    section = README.split("## Reproducing the papers on CPU", 1)[1].split("\n## ", 1)[0]
    assert section.count("| part | result on SmolLM2-135M-Instruct |") == 1
    # the prose's readers' figures are the summary's (the filtered arm's gain minus floor rise)
    fsg = summary["collab"]["readers"]["differences"]["template_filtered"]["counted"]["floor_subtracted_gain"]
    figure = f"{100 * fsg['diff']:+.1f} points [{100 * fsg['low']:+.1f}, {100 * fsg['high']:+.1f}]"
    assert figure in " ".join(section.split()), figure
    held = re.search(r"\((\d+) HealthBench multi-turn\s+contexts", section).group(1)
    assert int(held) == summary["collab"]["heldout"]["healthbench_contexts"]
    minutes = re.search(r"([\d.]+) min of parts", section).group(1)
    assert minutes == f"{summary['minutes']:.1f}"
    for key in ("crosswalk", "probe", "collab", "vasd", "clarify"):
        assert key in summary
    assert {"differences"} <= set(summary["probe"]) and {"arms", "calibrated"} <= set(summary["collab"])
    assert {"test", "ablation"} <= set(summary["vasd"]) and "faithfulness" in summary["clarify"]


def test_the_table_states_an_effect_only_where_its_interval_excludes_zero():
    readme_table = _readme_table()
    assert readme_table.reading({"diff": -0.047, "low": -0.12, "high": 0.023, "mde": 0.1025}) == (
        "no detectable effect at this size (minimum detectable effect 10 points)"
    )
    assert readme_table.reading({"diff": 0.2, "low": 0.0, "high": 0.4}) == "no detectable effect at this size"
    assert readme_table.reading({"diff": 0.2, "low": 0.03, "high": 0.37}) == "detectable"
    assert readme_table.reading({"diff": -0.24, "low": -0.33, "high": -0.16}) == "detectable"


@pytest.mark.slow
def test_demo_figures_are_what_make_demo_wrote(tmp_path):
    """`make demo` writes outputs/fic_tiny/eval_summary.json; the README quotes its before/after figures, one set per
    CPU kind seen (the tiny base's training is float-sensitive to the CPU's kernels). Read from a demo run made here
    (the file is not committed), or made now when there is none (about a minute on 2 cores)."""
    path = ROOT / "outputs" / "fic_tiny" / "eval_summary.json"
    run = json.loads(path.read_text()) if path.exists() else None
    if run is None or run.get("model") != "tiny:chatml:synthetic" or run.get("rows") != 6400:
        out = tmp_path / "fic_tiny"
        subprocess.run([sys.executable, str(ROOT / "train.py"), "recipe=fic_tiny", f"output_dir={out}"], cwd=ROOT,
                       check=True, capture_output=True, timeout=900)  # fmt: skip
        run = json.loads((out / "eval_summary.json").read_text())
    b, a = run["before"], run["after"]
    quoted = (f"p_sharded {b['p_sharded']:.3f} -> {a['p_sharded']:.3f}, p_full {b['p_full']:.3f} -> "
              f"{a['p_full']:.3f}, p_concat {b['p_concat']:.3f} -> {a['p_concat']:.3f}")  # fmt: skip
    assert quoted in " ".join(README.split()), (
        f"this demo run printed figures the README does not quote: {quoted} (another CPU kind? add them there)"
    )

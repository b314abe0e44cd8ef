"""Every path, recipe, make target and `fic` command the README names must exist."""

import re

from conftest import ROOT

from fic.cli import commands as fic_commands

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make demo", "make test"]


def test_paths_exist():
    paths = set(re.findall(r"(?<![\w./-])((?:accelerate_configs|recipes|src/fic|trainers|eval|tests|benchmarks)"
                           r"/[\w./-]*)", README))  # fmt: skip
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

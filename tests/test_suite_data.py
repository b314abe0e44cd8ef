"""The suite's own data: tests read tests/data (a few real rows, tests/data/SOURCE.md), never ../shared/data, and
under CI a test skipped for missing data fails."""

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import MISSING_DATA, SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def test_the_readers_of_the_shared_folder_read_tests_data():
    from fic.eval.clarify.scenarios import shared_data_dir

    assert SHARED_DATA == TESTS / "data" and os.environ["FIC_SHARED_DATA"] == str(SHARED_DATA)
    assert shared_data_dir() == SHARED_DATA  # `fic regret`'s default data; the recipes read the variable too


def test_every_data_file_is_small_and_named_in_source_md():
    """A few rows, not the data sets: every file is listed in SOURCE.md, and all of them stay well under 1 MB."""
    source = (SHARED_DATA / "SOURCE.md").read_text()
    files = [p for p in SHARED_DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    data = [p for p in files if p.suffix in (".json", ".jsonl") and p.parent.name != "chat_templates"]
    assert data and all(f"`{p.relative_to(SHARED_DATA)}`" in source for p in data)
    assert sum(p.stat().st_size for p in files) < 1_000_000


def test_no_test_reads_the_shared_folder():
    """Paths into ../shared/data in a test would skip or fail on a clone without it: tests use the `shared_data`
    fixture (tests/data)."""
    pattern = re.compile(r"""parents?(\[\d\])?\s*/\s*["']shared["']|["':]\.\./shared/data""")
    offenders = [p.name for p in TESTS.glob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_a_skip_for_missing_data_fails_under_ci(tmp_path):
    """In the test body and in a fixture's setup (as `shared_data` skips): the setup one is reported as an error."""
    (tmp_path / "test_needs.py").write_text(
        "import pytest\nfrom conftest import MISSING_DATA\n\n\n"
        "@pytest.fixture\ndef data():\n    pytest.skip(f'{MISSING_DATA}: not here')\n\n\n"
        "def test_needs_data():\n    pytest.skip(f'{MISSING_DATA}: nowhere')\n\n\n"
        "def test_needs_a_fixture_with_data(data):\n    pass\n\n\n"
        "def test_needs_a_browser():\n    pytest.skip('no Chromium')\n"
    )

    def run(ci: str) -> subprocess.CompletedProcess:
        path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "CI": ci}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", str(tmp_path)]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    ci = run("true")
    assert ci.returncode == 1 and "1 failed, 1 skipped, 1 error" in ci.stdout, ci.stdout[-2000:]
    assert f"a failure under CI=true: {MISSING_DATA}: nowhere" in ci.stdout
    assert f"a failure under CI=true: {MISSING_DATA}: not here" in ci.stdout
    local = run("")
    assert local.returncode == 0 and "3 skipped" in local.stdout, local.stdout[-2000:]

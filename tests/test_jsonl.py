"""`fic.jsonl`, the resumable output of every evaluation: torn last lines, damaged middle lines, stored settings,
one writer at a time."""

import errno
import json
import logging
import subprocess
import sys

import pytest

import fic.jsonl
from fic.errors import FicError
from fic.jsonl import ResumeError, append_rows, check_settings, load_done, load_keyed, writer_lock


def test_a_torn_last_line_is_dropped_with_a_warning_and_cut_off(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    append_rows(path, [{"k": 1}, {"k": 2}])
    with open(path, "a") as f:
        f.write('{"k": 3, "te')  # what a kill in the middle of a write leaves
    with caplog.at_level(logging.WARNING, logger="fic.jsonl"):
        assert load_done(path) == [{"k": 1}, {"k": 2}]
    assert [r.getMessage() for r in caplog.records] == [f"{path}: line 3 was cut short by an interrupted write; "
                                                        "dropped, it will be redone"]  # fmt: skip
    assert path.read_text() == '{"k": 1}\n{"k": 2}\n'  # rewritten: the next append starts on a clean line
    append_rows(path, [{"k": 3}])
    assert load_done(path) == [{"k": 1}, {"k": 2}, {"k": 3}]


def test_a_damaged_complete_last_line_is_dropped_too(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"k": 1}\n\n{"k": 2}\n{"k": 3, "te\n')  # blank lines are skipped
    with caplog.at_level(logging.WARNING, logger="fic.jsonl"):
        assert load_done(path) == [{"k": 1}, {"k": 2}]
    assert len(caplog.records) == 1 and "line 4 is damaged" in caplog.records[0].getMessage()
    assert path.read_text() == '{"k": 1}\n\n{"k": 2}\n'


@pytest.mark.parametrize("bad", ["not json", "[1, 2]", '{"k": 2, "te'])
def test_a_damaged_middle_line_is_an_error_naming_file_and_line_and_nothing_is_lost(tmp_path, bad):
    path = tmp_path / "rows.jsonl"
    text = f'{{"k": 1}}\n{bad}\n{{"k": 3}}\n'
    path.write_text(text)
    with pytest.raises(ResumeError, match=r"rows\.jsonl line 2 is .* not the last line") as err:
        load_done(path)
    assert isinstance(err.value, FicError) and isinstance(err.value, ValueError)  # one line from `fic`
    assert "\n" not in str(err.value) and "new output folder" in str(err.value)
    assert path.read_text() == text  # the rows after it are still there


def test_load_keyed_first_row_of_a_key_wins_and_a_row_without_key_is_refused(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"key": "a", "v": 1}\n{"key": "a", "v": 2}\n{"key": "b"}\n')
    assert load_keyed(path) == {"a": {"key": "a", "v": 1}, "b": {"key": "b"}}
    path.write_text('{"key": "a"}\n{"id": "b"}\n')
    with pytest.raises(ResumeError, match="row 2 has no 'key'"):
        load_keyed(path)
    assert load_keyed(tmp_path / "absent.jsonl") == {}


def test_check_settings_stores_then_refuses_other_settings_naming_the_keys(tmp_path):
    check_settings(tmp_path, {"model": "m", "seed": 0, "temps": (0.0, 1.0)})
    assert json.loads((tmp_path / "settings.json").read_text()) == {"model": "m", "seed": 0, "temps": [0.0, 1.0]}
    check_settings(tmp_path, {"model": "m", "seed": 0, "temps": [0.0, 1.0]})  # the same: resume
    with pytest.raises(ResumeError) as err:
        check_settings(tmp_path, {"model": "other", "seed": 1, "temps": [0.0, 1.0]})
    message = str(err.value)
    assert "model: 'm' -> 'other'" in message and "seed: 0 -> 1" in message and "temps" not in message
    assert "new --out" in message


HOLD = """
import sys
from fic.jsonl import BusyError, writer_lock
try:
    writer_lock(sys.argv[1], shared=sys.argv[2] == "shared")
except BusyError as err:
    print(err)
    sys.exit(3)
"""


def try_lock(path, shared: bool = False) -> subprocess.CompletedProcess:
    """`writer_lock(path)` taken by another process (locks are per process: the real case of two runs)."""
    return subprocess.run([sys.executable, "-c", HOLD, str(path), "shared" if shared else "alone"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_second_writer_is_refused_while_the_first_lives(tmp_path):
    path = tmp_path / "samples.jsonl"
    held = writer_lock(path)
    refused = try_lock(path)
    assert refused.returncode == 3
    assert (
        f"{path}: another process is writing it now (`fuser -v {tmp_path / '.samples.jsonl.lock'}`" in refused.stdout
    )
    assert try_lock(tmp_path / "other.jsonl").returncode == 0  # another file of the folder is free
    held.close()
    assert try_lock(path).returncode == 0


def test_the_ranks_of_one_launch_share_the_lock_and_a_lone_run_is_refused(tmp_path):
    path = tmp_path / "samples.jsonl"
    held = writer_lock(path, shared=True)
    assert try_lock(path, shared=True).returncode == 0  # another rank of the launch
    assert try_lock(path).returncode == 3  # a one-process run into the same folder
    held.close()


def test_a_filesystem_without_locks_writes_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    def no_locks(handle, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fic.jsonl.fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger="fic.jsonl"):
        assert writer_lock(tmp_path / "samples.jsonl") is None
    assert "cannot be locked ([Errno 37] No locks available)" in caplog.text

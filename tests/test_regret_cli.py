"""`fic regret` end to end on the shared data: regret of the baselines, determinism, crash-resume, input errors."""

import json

import pytest

import fic.eval.clarify.regret as regret_mod
from fic.eval.clarify.user import PROFILES
from fic.jsonl import load_keyed


def run(tmp_path, name, *extra, scenario="products", policy="reference", episodes=6, seed=0):
    out = tmp_path / name
    argv = [
        "--scenario",
        scenario,
        "--policy",
        policy,
        "--limit",
        str(episodes),
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--embedder",
        "none",
        *extra,
    ]
    return regret_mod.main(argv), out


def summary(out):
    return json.loads((out / "summary.json").read_text())


def lines(out):
    return (out / "episodes.jsonl").read_text().splitlines()


def test_products_regret_of_reference_and_baselines(shared_data, tmp_path):
    results = {}
    for policy in ("reference", "always_answer", "always_ask"):
        rc, out = run(tmp_path, policy, policy=policy)
        assert rc == 0
        results[policy] = summary(out)
        assert len(lines(out)) == 6 * len(PROFILES)
    assert results["reference"]["regret"] == 0.0  # by construction
    assert all(p["regret"] == 0.0 for p in results["reference"]["per_profile"].values())
    assert results["always_answer"]["regret"] > 0
    assert results["always_ask"]["regret"] > 0
    ask = results["always_ask"]
    assert set(ask["per_profile"]) == set(PROFILES)
    # always-ask asks the most, and keeps asking with one intent left
    assert ask["turns_mean"] > results["reference"]["turns_mean"] > results["always_answer"]["turns_mean"] == 0
    assert ask["stopping_errors"]["ask_late_rate"] > 0.5
    assert results["always_answer"]["stopping_errors"]["answer_early_rate"] == 1.0
    for key in ("resolution_rate", "user_tokens_mean", "ineffective_clarification", "value", "reference_value"):
        assert key in ask
    # every record carries its reference's value and the regret is their difference
    for line in lines(tmp_path / "always_ask"):
        rec = json.loads(line)
        assert rec["regret"] == pytest.approx(rec["reference"]["value"] - rec["value"])


def test_first_summarises_the_episodes_of_a_smaller_run(shared_data, tmp_path, capsys):
    # a rule policy on 4 episodes, summarised also on its first 2: the numbers of a --limit 2 run
    _, out = run(tmp_path, "four", "--first", "2", policy="always_answer", episodes=4)
    _, small = run(tmp_path, "two", policy="always_answer", episodes=2)
    first, two = summary(out)["first"], summary(small)
    assert first == {k: two[k] for k in first} and first["n_episodes"] == 2 and first["episodes"] == 2 * len(PROFILES)
    for s in (summary(out), first):  # the intervals count episodes; under 10 the regret's is not estimable
        assert s["resolution"]["n_items"] == s["n_episodes"] and s["regret_interval"]["mean"] is None
        assert sum(s["regret_parts"].values()) == pytest.approx(s["regret"])
    rc, _ = run(tmp_path, "bad", "--first", "5", policy="always_answer", episodes=4)
    assert rc == 2 and "--first=5" in capsys.readouterr().err


def test_same_seed_same_numbers_other_seed_other_episodes(shared_data, tmp_path):
    _, a = run(tmp_path, "a", policy="always_ask", episodes=3)
    _, b = run(tmp_path, "b", policy="always_ask", episodes=3)
    _, c = run(tmp_path, "c", policy="always_ask", episodes=3, seed=1)
    assert summary(a) == summary(b)
    assert lines(a) == lines(b)
    assert lines(a) != lines(c)


def test_ambigqa_scenario(shared_data, tmp_path):
    rc, out = run(tmp_path, "amb-ref", "--profile", "cooperative", scenario="ambigqa", episodes=6)
    assert rc == 0 and summary(out)["regret"] == 0.0 and summary(out)["profiles"] == ["cooperative"]
    assert summary(out)["resolution_rate"] > 0.5
    _, out = run(
        tmp_path, "amb-ans", "--profile", "cooperative", scenario="ambigqa", policy="always_answer", episodes=6
    )
    assert summary(out)["regret"] > 0


def test_resume_after_crash_redoes_only_the_missing(shared_data, tmp_path, monkeypatch):
    rc, out = run(tmp_path, "r", policy="always_answer", episodes=4)
    full_lines, full_summary = lines(out), summary(out)
    assert rc == 0 and len(full_lines) == 20
    # a crash while writing the third record: two complete lines and half of the third
    path = out / "episodes.jsonl"
    path.write_text(full_lines[0] + "\n" + full_lines[1] + "\n" + full_lines[2][: len(full_lines[2]) // 2])
    calls = []
    real = regret_mod.run_episode
    monkeypatch.setattr(regret_mod, "run_episode", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert run(tmp_path, "r", policy="always_answer", episodes=4)[0] == 0
    assert len(calls) == 18 * 2  # 18 episodes redone, each by the reference and the policy
    now = lines(out)
    keys = [json.loads(x)["key"] for x in now]
    assert len(keys) == len(set(keys)) == 20
    assert sorted(now) == sorted(full_lines)
    assert summary(out) == full_summary
    calls.clear()
    assert run(tmp_path, "r", policy="always_answer", episodes=4)[0] == 0 and calls == []


def test_rerun_with_other_settings_is_refused(shared_data, tmp_path, capsys):
    run(tmp_path, "s", policy="always_answer", episodes=2)
    rc, _ = run(tmp_path, "s", "--cost", "0.3", policy="always_answer", episodes=2)
    assert rc == 2 and "other settings" in capsys.readouterr().err


def test_missing_data_names_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FIC_SHARED_DATA", str(tmp_path / "nowhere"))
    rc, _ = run(tmp_path, "m")
    assert rc == 2 and "--data" in capsys.readouterr().err
    rc, _ = run(tmp_path, "m2", "--data", str(tmp_path / "nope.json"))
    assert rc == 2


def test_load_keyed_rejects_a_damaged_middle_line(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        load_keyed(path)
    path.write_text('{"key": "a"}\n{"key": "b"')  # torn last line: cut off
    assert list(load_keyed(path)) == ["a"] and path.read_text() == '{"key": "a"}\n'
    path.write_text('{"key": "a"}\n{"key": "a"}\n')  # a duplicate is not counted twice
    assert list(load_keyed(path)) == ["a"]

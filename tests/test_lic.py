"""Lost-in-Conversation simulation: episode flow, metrics, resume, and a tiny-model run of `fic lic`."""

import json

import pytest

from fic.eval import lic
from fic.metrics import lic_scores, percentile
from fic.tiny import build_tokenizer


class ScriptedBackend:
    """Answers 'The answer is N.' once the prompt holds every shard of its task; otherwise asks a question."""

    def __init__(self, tasks, fail_after=None, needs_all=True):
        self.tasks, self.calls, self.fail_after, self.needs_all = tasks, 0, fail_after, needs_all

    def generate(self, prompts, params, progress=False):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        out = []
        for p in prompts:
            task = next(t for t in self.tasks if t.shards[0] in p or t.full_prompt in p)
            known = all(s in p for s in task.shards) or task.full_prompt in p
            out.append(["The answer is 7." if known or not self.needs_all else "Which numbers?"])
        return out


def make_tasks(n=5):
    return [
        lic.LiCTask(f"t{i}", f"Full task {i}: a is {i}, b is 7.", [f"Task {i}: what is b?", f"a is {i}.", "b is 7."],
                    check=lambda text: "7" in text)
        for i in range(n)
    ]  # fmt: skip


def test_modes_and_turns(tmp_path):
    tasks = make_tasks()
    tok = build_tokenizer("chatml")
    summary = lic.run_lic(ScriptedBackend(tasks), tok, tasks, tmp_path, progress=False)
    assert summary["p_full"] == summary["p_concat"] == summary["p_sharded"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    sharded = [r for r in rows if r["mode"] == "sharded"]
    # the model only knows the answer once the last shard is out: 3 turns, one user message per shard
    assert all(r["n_turns"] == 3 for r in sharded)
    by_id = {t.id: t for t in tasks}
    assert all(
        [m["content"] for m in r["messages"] if m["role"] == "user"] == by_id[r["task_id"]].shards for r in sharded
    )
    assert [m["role"] for m in sharded[0]["messages"]] == ["user", "assistant"] * 3
    assert (tmp_path / "summary.json").exists() and (tmp_path / "lic.png").stat().st_size > 0


def test_sharded_episode_ends_on_first_correct_attempt(tmp_path):
    tasks = make_tasks(2)
    backend = ScriptedBackend(tasks, needs_all=False)  # always right
    summary = lic.run_lic(backend, build_tokenizer("chatml"), tasks, tmp_path, modes=["sharded"], progress=False)
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert summary["p_sharded"] == 1.0 and all(r["n_turns"] == 1 for r in rows)


def test_resume_gives_the_uninterrupted_episodes(tmp_path):
    tasks = make_tasks(5)
    tok = build_tokenizer("chatml")
    lic.run_lic(ScriptedBackend(tasks), tok, tasks, tmp_path / "a", runs=2, chunk_size=2, progress=False)
    with pytest.raises(KeyboardInterrupt):
        lic.run_lic(ScriptedBackend(tasks, fail_after=5), tok, tasks, tmp_path / "b", runs=2, chunk_size=2,
                    progress=False)  # fmt: skip
    with open(tmp_path / "b" / "episodes.jsonl", "a") as f:
        f.write('{"task_id": "t0", "mo')  # the partial line a kill leaves behind
    lic.run_lic(ScriptedBackend(tasks), tok, tasks, tmp_path / "b", runs=2, chunk_size=2, progress=False)

    def key(row):
        return (row["mode"], row["run"], row["task_id"])

    a = sorted((json.loads(x) for x in (tmp_path / "a" / "episodes.jsonl").read_text().splitlines()), key=key)
    b = sorted((json.loads(x) for x in (tmp_path / "b" / "episodes.jsonl").read_text().splitlines()), key=key)
    assert a == b and len(a) == 3 * 2 * 5


def test_lic_metrics_by_hand():
    assert percentile([0, 1], 90) == pytest.approx(0.9)
    scores = {"a": [1, 1, 0, 0], "b": [1, 1, 1, 1]}
    m = lic_scores(scores)
    assert m["P"] == pytest.approx((0.5 + 1.0) / 2)
    # task a: p90 of [0,0,1,1] = 1.0, p10 = 0.0 -> U = 1; task b: U = 0
    assert m["A90"] == pytest.approx(1.0) and m["U90_10"] == pytest.approx(0.5)


def test_summary_ratios_are_named_for_what_they_are():
    """One evaluation gives P_sharded / P_full (`sharded_over_full`), not a recovery: that needs a before and after."""
    rows = [{"task_id": t, "mode": m, "correct": t == "b" or m != "sharded"}
            for t in ("a", "b") for m in ("full", "concat", "sharded")]  # fmt: skip
    summary = lic.summarize(rows, ["full", "concat", "sharded"])
    assert summary["sharded_over_full"] == 0.5 and summary["concat_over_full"] == 1.0 and "recovery" not in summary
    wrong = [{**r, "correct": False} for r in rows]
    assert not {"sharded_over_full", "concat_over_full"} & set(lic.summarize(wrong, ["full", "sharded"]))


def test_fic_lic_cli_runs_on_a_tiny_model(tmp_path):
    from fic.cli import main
    from fic.tiny import tiny_model

    rc = main(["lic", "--model", tiny_model("chatml"), "--data", "synthetic", "--limit", "3", "--max-new-tokens", "8",
               "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["modes"]) == {"full", "concat", "sharded"}
    assert all(m["episodes"] == 3 for m in summary["modes"].values())


def test_resume_with_other_settings_is_refused(tmp_path):
    from fic.jsonl import ResumeError

    tasks, tok = make_tasks(2), build_tokenizer("chatml")
    lic.run_lic(ScriptedBackend(tasks), tok, tasks, tmp_path, modes=["full"], model="a", progress=False)
    for change in ({"model": "b"}, {"temperature": 0.7}, {"user": lic.LLMUser("http://localhost:1/v1", "u")}):
        backend = ScriptedBackend(tasks)
        with pytest.raises(ResumeError, match="other settings .*new --out"):
            lic.run_lic(
                backend, tok, tasks, tmp_path, **{"modes": ["full"], "model": "a", "progress": False, **change}
            )
        assert backend.calls == 0
    summary = lic.run_lic(ScriptedBackend(tasks), tok, tasks, tmp_path, model="a", progress=False)  # more modes
    assert set(summary["modes"]) == {"full", "concat", "sharded"}

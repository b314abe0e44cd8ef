"""Judge faults end to end: one `fic judge --judge llm` process against a fault-injecting OpenAI-compatible server.

Every kind of failure a judge API shows in practice (HTTP 429 with and without Retry-After, 500/503, a client
timeout, a body cut off mid-transfer, an HTML page instead of JSON, JSON cut off mid-object, a non-retryable 400,
unknown labels, prose instead of JSON) is mixed into one batch. The run must exit 0, give every case a verdict or an
explicit `judge_error` (never drop or duplicate a row), print the counts, and never write the API key anywhere.
The per-call behaviour of `LLMJudge` is tested case by case in test_judges.py; this is the command as users run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from mock_openai_server import Fault, MockOpenAIServer

from fic.judges import JUDGE_ERROR, LABELS

CONTEXT = [
    {"role": "user", "content": "A pen costs $2 and a book $5. What do 3 pens and a book cost?"},
    {"role": "assistant", "content": "3 pens cost $6; with the book that is $11."},
]
SECRET = "sk-reliability-SECRET-9731"
TIMEOUT_S = 0.5


def answer(label: str) -> str:
    return json.dumps({"label": label, "genuine": label == "genuine_followup", "confidence": 0.8, "rationale": "r"})


def turn_of(body: dict) -> str:
    prompt = body["messages"][1]["content"]
    return re.search(r"<generated_user_message>\n(.*)\n</generated_user_message>", prompt, re.DOTALL).group(1)


# turn -> (faults its requests meet, in order; how the judge model answers it; expected label)
PLAN = {
    "t00 why 429": (["429"], "valid", "genuine_followup"),
    "t01 why 429 retry-after": ([Fault(status=429, headers={"Retry-After": "0.05"})], "valid", "meta_planning"),
    "t02 why 500": (["500"], "valid", "genuine_followup"),
    "t03 why 503 twice": (["503", "503"], "valid", "new_task_prompt"),
    "t04 why timeout": (["timeout"], "valid", "genuine_followup"),
    "t05 why truncated body": (["truncated"], "valid", "degenerate_short"),
    "t06 why html body": (["nonjson"], "valid", "genuine_followup"),
    "t07 why cut json": (["badjson"], "valid", "genuine_followup"),
    "t08 retries exhausted": (["500", "timeout", "429"], "valid", JUDGE_ERROR),
    "t09 client error": (["400"], "valid", JUDGE_ERROR),
    "t10 unknown label always": ([], "unknown", JUDGE_ERROR),
    "t11 unknown label once": ([], "unknown-once", "previous_turn_restate"),
    "t12 prose once": ([], "prose-once", "genuine_followup"),
    "t13 cut reply always": ([], "cut", JUDGE_ERROR),
    "t14 no fault": ([], "valid", "assistant_turn_restate"),
}


class PlannedFaultServer(MockOpenAIServer):
    """Faults picked by the case a request is about (deterministic with `--concurrency 1`, where requests arrive
    one at a time), so each fault kind is met by a known case and the expected verdicts are exact."""

    def __init__(self, plan):
        self.plan_faults = {turn: list(faults) for turn, (faults, _, _) in plan.items()}
        super().__init__(chat_reply=self.reply, timeout_sleep=2 * TIMEOUT_S)

    def _take_fault(self):
        with self._lock:
            queue = self.plan_faults.get(turn_of(self.requests[-1]["body"]), [])
            spec = queue.pop(0) if queue else None
        if spec is None:
            return None
        self.add_faults(spec)
        return super()._take_fault()

    @staticmethod
    def reply(body: dict) -> str:
        turn = turn_of(body)
        faults, mode, label = PLAN[turn]
        first_ask = len(body["messages"]) == 2
        if mode == "unknown" or (mode == "unknown-once" and first_ask):
            return '{"label": "helpful", "genuine": true, "confidence": 0.9, "rationale": "x"}'
        if mode == "prose-once" and first_ask:
            return "I would say this is a genuine follow-up."
        if mode == "cut":
            return '{"label": "genuine_fol'
        return answer(label if label != JUDGE_ERROR else "genuine_followup")


def run_cli(tmp_path, server, rows, *extra, bad_lines=()):
    src, out = tmp_path / "in.jsonl", tmp_path / "out" / "judgements.jsonl"
    lines = [json.dumps(r) for r in rows] + list(bad_lines)
    src.write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["FIC_JUDGE_API_KEY"] = SECRET
    cmd = [sys.executable, "-m", "fic.cli", "judge", str(src), "--out", str(out.parent), "--judge", "llm",
           "--judge-base-url", server.url, "--judge-model", "judge-m", "--timeout", str(TIMEOUT_S), "--max-retries", "2",
           "--skip-bad", *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    judged = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc, judged


def printed_counts(stdout: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+(\d+)", stdout, re.MULTILINE)}


def test_every_fault_kind_in_one_cli_run_ends_judged_or_judge_error(tmp_path):
    rows = [{"id": f"r{i}", "messages": CONTEXT, "user_turn": turn} for i, turn in enumerate(PLAN)]
    with PlannedFaultServer(PLAN) as server:
        proc, judged = run_cli(tmp_path, server, rows, "--concurrency", "1", bad_lines=['{"messages": "cut off'])
        requests = list(server.requests)
        left = {turn: q for turn, q in server.plan_faults.items() if q}
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not left, f"faults never met: {left}"
    # nothing lost, nothing duplicated, input order and fields kept
    assert [r["id"] for r in judged] == [r["id"] for r in rows]
    assert {r["user_turn"]: r["label"] for r in judged} == {turn: label for turn, (_, _, label) in PLAN.items()}
    for r in judged:
        assert r["label"] in LABELS or r["label"] == JUDGE_ERROR
        assert (r["genuine"] is None) == (r["label"] == JUDGE_ERROR)
        if r["label"] == JUDGE_ERROR:
            assert r["rationale"] and r["confidence"] == 0.0
    errors = {r["user_turn"]: r["rationale"] for r in judged if r["label"] == JUDGE_ERROR}
    assert "failed after 3 attempts" in errors["t08 retries exhausted"]
    assert "HTTP 400" in errors["t09 client error"]
    assert "helpful" in errors["t10 unknown label always"]
    # the counts printed match the file, and the bad input line is counted, not fatal
    counts = printed_counts(proc.stdout)
    assert counts[JUDGE_ERROR] == 4 and sum(counts.values()) == len(rows)
    for label in LABELS:
        assert counts[label] == sum(r["label"] == label for r in judged)
    assert "1 bad line(s) skipped" in proc.stdout
    # retries and re-asks really happened: faulted requests were sent again, unknown labels were re-asked
    per_turn = {turn: sum(turn_of(q["body"]) == turn for q in requests) for turn in PLAN}
    assert per_turn["t03 why 503 twice"] == 3 and per_turn["t08 retries exhausted"] == 3
    assert per_turn["t10 unknown label always"] == 3 and per_turn["t11 unknown label once"] == 2
    # the key travels only in the Authorization header
    assert all(q["headers"].get("Authorization") == f"Bearer {SECRET}" for q in requests)
    written = proc.stdout + proc.stderr + "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    assert SECRET not in written


def test_concurrent_requests_with_mixed_faults_lose_no_case(tmp_path):
    """Faults in arrival order at concurrency 4: which case meets which fault varies, the guarantees do not."""
    rows = [{"id": f"c{i}", "messages": CONTEXT, "user_turn": f"What about {i} pens?"} for i in range(24)]
    with MockOpenAIServer(chat_reply=answer("genuine_followup"), timeout_sleep=2 * TIMEOUT_S, latency=0.01) as server:
        server.add_faults("429", "500", "timeout", "truncated", "nonjson", "badjson", "503", "500", "500",
                          "timeout", "429", "400", "truncated")  # fmt: skip
        proc, judged = run_cli(tmp_path, server, rows, "--concurrency", "4")
        assert server.pending_faults() == 0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(r["id"] for r in judged) == sorted(r["id"] for r in rows) and len(judged) == len(rows)
    labels = [r["label"] for r in judged]
    assert set(labels) <= {"genuine_followup", JUDGE_ERROR}
    assert 1 <= labels.count(JUDGE_ERROR) <= 5  # the 400 fails its case; 12 retryable faults exhaust at most 4 more
    counts = printed_counts(proc.stdout)
    assert counts["genuine_followup"] == labels.count("genuine_followup")
    assert counts[JUDGE_ERROR] == labels.count(JUDGE_ERROR)

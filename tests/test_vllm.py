"""fic's vLLM code paths, executed on a real vLLM (vllm-cpu) serving SmolLM2-135M-Instruct.

Run in `.venv-vllm` (`make venv-vllm`; `make test-vllm`, which `make test` and CI call): the main `.venv` has no vLLM
and skips this module. What runs here:

* `fic probe --backend vllm` (the offline engine) at T=0 with 2 samples and at T=1: the same row keys, columns and
  summary shape as the transformers backend; greedy samples of one item identical; a resumed run gives the rows back.
* a vLLM OpenAI server on loopback as the `--judge llm` endpoint (`fic judge`, the follow-up RL reward), as the
  completions endpoint of `fic probe --backend openai`, and as model and simulated user of `fic lic` / `fic regret`.
* follow-up RL and VASD with TRL's colocated vLLM (`tests/vllm_entry.py`): rollouts from vLLM, every synced name a
  parameter of vLLM's model, and after the sync vLLM's log-probabilities equal the trained model's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _vllm_installed():
    """Skip where vLLM is absent, at setup rather than at import: `-m "not vllm"` (`make test` in .venv) then
    deselects this module without reporting a skip, and only browser and GPU tests skip there."""
    pytest.importorskip("vllm", reason="vLLM is not installed here (make venv-vllm; make test-vllm)")


ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}


def fic(*args, timeout=900) -> subprocess.CompletedProcess:
    """`fic ARGS` in its own process, as a user runs it; the output is shown when it fails."""
    run = subprocess.run([sys.executable, "-m", "fic.cli", *map(str, args)], capture_output=True, text=True,
                         cwd=ROOT, env=ENV, timeout=timeout)  # fmt: skip
    assert run.returncode == 0, f"fic {' '.join(map(str, args))} exited {run.returncode}:\n{run.stderr[-4000:]}"
    return run


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def key(row: dict) -> tuple:
    return (row["dataset"], str(row["item_id"]), row["temperature"], row["perturbation"], row["sample"])


@pytest.fixture(scope="module")
def smollm2() -> str:
    from fic.modeling import resolve_model_name

    return resolve_model_name("smollm2")


@pytest.fixture(scope="module")
def server(smollm2, tmp_path_factory):
    """`python -m vllm.entrypoints.openai.api_server` serving SmolLM2 as `smollm2` on loopback; its /v1 root.
    A port taken between the choice and the bind makes the server exit: it is started again on another."""
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    for attempt in range(3):
        port = 18000 + (os.getpid() + 97 * attempt) % 2000
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", smollm2,
                   "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
                   "--max-model-len", "2048", "--enforce-eager"]  # fmt: skip
        with open(log, "w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 600
        while time.time() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        if process.poll() is None and time.time() < deadline:
            try:
                yield f"{url}/v1"
            finally:
                process.terminate()
                process.wait(timeout=60)
            return
        process.kill()
        if "address already in use" not in log.read_text().lower():
            break
    pytest.fail(f"the vLLM server did not come up; its log:\n{log.read_text()[-4000:]}")


def greedy_texts(sample_rows) -> dict:
    """{(item_id, perturbation): the set of user-turn texts of its temperature-0 rows}."""
    texts = {}
    for r in sample_rows:
        if r["temperature"] == 0.0:
            texts.setdefault((r["item_id"], r["perturbation"]), set()).add(r["user_turn"])
    return texts


def test_probe_on_the_vllm_engine_matches_the_transformers_backend(shared_data, smollm2, tmp_path):
    gsm8k = shared_data / "gsm8k" / "test.jsonl"
    common = ["probe", "--model", "smollm2", "--datasets", f"gsm8k:{gsm8k}", "--temperatures", "0,1.0",
              "--samples", "2", "--limit", "3", "--perturbations", "none,question", "--max-new-tokens", "24",
              "--response-tokens", "48", "--chunk-size", "2", "--allow-judge-overlap"]  # fmt: skip
    fic(*common, "--out", tmp_path / "hf")
    fic(*common, "--backend", "vllm", "--max-model-len", "1024", "--out", tmp_path / "vllm")
    hf, vl = rows(tmp_path / "hf" / "samples.jsonl"), rows(tmp_path / "vllm" / "samples.jsonl")
    assert sorted(map(key, vl)) == sorted(map(key, hf)) and len(vl) == 3 * 2 * 3 * 2  # items x T x controls x samples
    assert {tuple(sorted(r)) for r in vl} == {tuple(sorted(r)) for r in hf}
    assert all(len(texts) == 1 for texts in greedy_texts(vl).values())  # an item's two greedy samples: one text
    summaries = [json.loads((tmp_path / b / "summary.json").read_text()) for b in ("hf", "vllm")]
    assert set(summaries[0]) == set(summaries[1])
    assert set(summaries[0]["genuine_rate"]["gsm8k"]) == set(summaries[1]["genuine_rate"]["gsm8k"])

    # Resume: with the later jobs' rows gone (a run killed before writing them), the rerun keeps every written row and
    # writes each missing one once. Its rewritten texts need not be the first run's, greedy ones included: vLLM does
    # not promise the same numerics across engine starts (prefix cache hits, batch shapes), so a near tie can flip a
    # greedy token (CI saw gsm8k item 2's unperturbed greedy turn change on the rerun).
    samples = tmp_path / "vllm" / "samples.jsonl"
    whole = samples.read_text().splitlines(keepends=True)
    kept = whole[: len(whole) // 2]
    samples.write_text("".join(kept))
    (tmp_path / "vllm" / "summary.json").unlink()
    fic(*common, "--backend", "vllm", "--max-model-len", "1024", "--out", tmp_path / "vllm")
    resumed = samples.read_text().splitlines(keepends=True)
    assert sorted(map(key, map(json.loads, resumed))) == sorted(map(key, vl))
    assert set(kept) <= set(resumed)
    resumed_greedy = greedy_texts(map(json.loads, resumed))
    assert all(len(texts) == 1 for texts in resumed_greedy.values())  # a rewritten job's greedy samples are one text


def test_served_model_as_judge_reward_and_completions_endpoint(server, smollm2, shared_data, tmp_path):
    from fic.judges import make_judge
    from fic.judges.labels import JUDGE_ERROR, LABELS
    from fic.trainers.rewards import get_reward

    # The real server refuses greedy n > 1, which the client must not send.
    refused = httpx.post(f"{server}/completions", json={"model": "smollm2", "prompt": "Hi", "n": 2,
                                                         "temperature": 0, "max_tokens": 2}, timeout=60)  # fmt: skip
    assert refused.status_code == 400 and "greedy" in refused.text
    card = httpx.get(f"{server}/models", timeout=10).json()["data"][0]
    assert card["max_model_len"] == 2048

    turns = tmp_path / "turns.jsonl"
    context = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "2 + 2 = 4."}]
    items = ["Why is it 4 and not 5?", "What is 2 + 2?", "Write a poem about the sea.", "ok"]
    turns.write_text("".join(json.dumps({"messages": context, "user_turn": t}) + "\n" for t in items))
    fic("judge", turns, "--judge", "llm", "--judge-base-url", server, "--judge-model", "smollm2", "--out",
        tmp_path / "judged", "--timeout", "120")  # fmt: skip
    judged = rows(tmp_path / "judged" / "judgements.jsonl")
    assert len(judged) == len(items)
    # A verdict from the inventory, or a failure reported as one (never a silent zero); with vLLM's structured output
    # (the verdict's JSON schema) the served model gives verdicts, not only errors.
    assert all(row["label"] in LABELS or row["label"] == JUDGE_ERROR for row in judged), judged
    assert any(row["label"] in LABELS for row in judged), judged

    judge = make_judge("llm", base_url=server, model="smollm2")
    reward = get_reward("followup", judge=judge)
    prompts = ["<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n2 + 2 = 4.<|im_end|>\n"] * 2
    values = asyncio.run(reward(prompts, ["Why is it 4?", "What is 2 + 2?"], context=[context, context]))
    assert len(values) == 2 and all(v is None or -1.0 <= v <= 1.0 for v in values)

    gsm8k = shared_data / "gsm8k" / "test.jsonl"
    fic("probe", "--model", "smollm2", "--base-url", server, "--tokenizer", "smollm2", "--datasets", f"gsm8k:{gsm8k}",
        "--temperatures", "0", "--samples", "2", "--limit", "2", "--max-new-tokens", "16", "--response-tokens", "32",
        "--allow-judge-overlap", "--out", tmp_path / "probe")  # fmt: skip
    probed = rows(tmp_path / "probe" / "samples.jsonl")
    assert len(probed) == 2 * 2 and len({(r["item_id"], r["user_turn"]) for r in probed}) <= 2


def test_served_model_as_simulated_user_of_lic_and_regret(server, shared_data, tmp_path):
    gsm8k = shared_data / "gsm8k" / "test.jsonl"
    fic("lic", "--model", "smollm2", "--base-url", server, "--tokenizer", "smollm2", "--data", f"gsm8k:{gsm8k}", "--modes",
        "sharded", "--limit", "1", "--max-new-tokens", "24", "--user", "llm", "--user-base-url", server,
        "--user-model", "smollm2", "--out", tmp_path / "lic")  # fmt: skip
    assert rows(tmp_path / "lic" / "episodes.jsonl")
    fic("regret", "--scenario", "products", "--policy", "model", "--model", "smollm2", "--base-url", server,
        "--user", "llm", "--limit", "1", "--seed", "0", "--max-turns", "2", "--max-new-tokens", "24",
        "--embedder", "none", "--out", tmp_path / "regret")  # fmt: skip
    assert json.loads((tmp_path / "regret" / "summary.json").read_text())


@pytest.mark.parametrize("method", ["followup_rl", "vasd"])
def test_colocated_vllm_rollouts_and_weight_sync(method, tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "vllm_entry.py"), method, str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=1500)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["steps"] == 2 and result["vllm_generate_calls"] >= 2
    assert result["unmatched_names"] == []
    assert result["gap_before_sync"] > 1e-3  # the last step moved the weights away from what vLLM held
    assert result["gap_after_sync"] < 1e-3  # and the sync brought vLLM to the trained weights


def test_vllm_benchmark_smoke(tmp_path):
    """`make bench`'s vLLM-vs-transformers benchmark runs (smallest size) and reports both backends' throughput."""
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_vs_transformers.py"), "--size", "smoke",
                          "--results-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=ENV,
                         timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((tmp_path / "vllm_vs_transformers.json").read_text())
    for name in ("probe", "vasd_rollouts"):
        assert result[f"{name}_turns_per_s_vllm"] > 0 and result[f"{name}_turns_per_s_transformers"] > 0

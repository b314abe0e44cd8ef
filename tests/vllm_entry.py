"""Train a few steps with TRL's colocated vLLM on SmolLM2 and check the weight sync; run by tests/test_vllm.py.

    python tests/vllm_entry.py followup_rl|vasd OUT_DIR

Writes OUT_DIR/result.json: the steps trained, the rollouts vLLM wrote, whether every trained parameter's synced name
is a parameter of vLLM's own model, and the largest log-probability gap on a fixed prompt between vLLM and the trained
model: before the final sync (vLLM still holds older weights) and after it (it must hold the trained ones).
Its own process: vLLM's colocate mode sets up torch.distributed (one rank) and spawns nothing else here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default takes most of this machine's memory

PROBE_TEXT = "<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n<|im_start|>assistant\n12 times 7 is 84.<|im_end|>\n"


def vllm_names_match(trainer) -> list[str]:
    """Synced names with no parameter in vLLM's model (packed projections mapped as vLLM packs them); [] = all land."""
    from fic.trainers.vllm_sync import model_runner

    gen = trainer.vllm_generation
    vllm_model = model_runner(gen.llm).model
    params = {name for name, _ in vllm_model.named_parameters()}
    packed = getattr(vllm_model, "packed_modules_mapping", {})
    missing = []
    for name, _ in gen._iter_named_params():
        mapped = name
        for fused, parts in packed.items():
            for part in parts:
                mapped = mapped.replace(f".{part}.", f".{fused}.")
        if mapped not in params:
            missing.append(name)
    return missing


def logprob_gap(trainer, tokenizer) -> float:
    """Largest |vLLM - trained model| next-token log-probability over vLLM's top 5 at every position of a prompt."""
    import torch
    import vllm

    gen = trainer.vllm_generation
    ids = tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids
    params = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=5)
    out = gen.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    model = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
    reference = torch.log_softmax(logits, -1)
    gap = 0.0
    for position, top in enumerate(out.prompt_logprobs[1:]):  # entry i+1 scores token i+1 given the first i+1
        for token, logprob in top.items():
            gap = max(gap, abs(logprob.logprob - float(reference[position, token])))
    return gap


def followup_rl(out: Path):
    from datasets import Dataset

    from fic.judges import make_judge
    from fic.modeling import load_tokenizer, resolve_model_name
    from fic.trainers.followup_rl import FollowupRLConfig, FollowupRLTrainer, prompt_rows, user_turn_end_ids
    from fic.trainers.rewards import get_reward

    path = resolve_model_name("smollm2")
    tok = load_tokenizer(path)
    contexts = [{"messages": [{"role": "user", "content": f"What is {a} + {a}?"},
                              {"role": "assistant", "content": f"{a} + {a} = {2 * a}."}]} for a in range(2, 6)]  # fmt: skip
    reward = get_reward("followup", judge=make_judge("heuristic"), tokenizer=tok, end_ids=user_turn_end_ids(tok))
    args = FollowupRLConfig(output_dir=str(out / "run"), report_to="none", bf16=False, use_vllm=True,
                            vllm_mode="colocate", vllm_max_model_length=512, vllm_gpu_memory_utilization=0.3,
                            max_steps=2, logging_steps=1, per_device_train_batch_size=4, num_generations=2,
                            max_completion_length=12, beta=0.0, save_strategy="no", learning_rate=2e-4,
                            temperature=1.0)  # fmt: skip
    trainer = FollowupRLTrainer(model=path, reward_funcs=[reward], args=args, processing_class=tok,
                                train_dataset=Dataset.from_list(prompt_rows(tok, contexts)))  # fmt: skip
    return trainer, tok


def vasd(out: Path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from fic.modeling import load_tokenizer, resolve_model_name
    from fic.trainers.vasd.config import VASDConfig
    from fic.trainers.vasd.trainer import VASDTrainer

    path = resolve_model_name("smollm2")
    tok = load_tokenizer(path)
    rows = []
    for a in range(2, 6):
        rows.append({
            "shards": [f"Tom has {a} apples.", "He buys 3 more. How many apples does he have now?"],
            "teacher_prompt": [{"role": "user", "content": f"Tom has {a} apples. He buys 3 more. How many now?"}],
        })  # fmt: skip
    args = VASDConfig(output_dir=str(out / "run"), report_to="none", bf16=False, use_vllm=True,
                      vllm_mode="colocate", vllm_max_model_length=512, vllm_gpu_memory_utilization=0.3,
                      max_steps=2, logging_steps=1, per_device_train_batch_size=2, max_completion_length=12,
                      rollout_max_new_tokens=12, lmbda=1.0, save_strategy="no", learning_rate=2e-4,
                      )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    trainer = VASDTrainer(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(rows))
    return trainer, tok


def float32_engine() -> None:
    """TRL builds its `LLM` with dtype "auto", under which vLLM serves a float32 checkpoint in 16 bits: the trained
    model and vLLM would then differ by rounding (~0.2 nats here) whatever the sync did. The comparison runs both in
    float32 so that any gap left is the sync's."""
    import functools

    import trl.generation.vllm_generation as vllm_generation

    vllm_generation.LLM = functools.partial(vllm_generation.LLM, dtype="float32")


def main(method: str, out: str) -> None:
    float32_engine()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trainer, tok = {"followup_rl": followup_rl, "vasd": vasd}[method](out)
    generated = {"calls": 0}
    generate = trainer.vllm_generation.llm.generate

    def counted(*args, **kwargs):
        generated["calls"] += 1
        return generate(*args, **kwargs)

    trainer.vllm_generation.llm.generate = counted
    trainer.train()
    trainer.vllm_generation.llm.generate = generate
    before = logprob_gap(trainer, tok)  # vLLM holds the weights of the last rollout's sync, before the last step
    trainer.vllm_generation.sync_weights()
    after = logprob_gap(trainer, tok)
    result = {"steps": trainer.state.global_step, "vllm_generate_calls": generated["calls"],
              "unmatched_names": vllm_names_match(trainer), "gap_before_sync": before, "gap_after_sync": after}  # fmt: skip
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])

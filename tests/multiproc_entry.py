"""Entry point for the multi-process tests: `accelerate launch ... tests/multiproc_entry.py OUT_JSON_DIR train.py-args`.

Runs `train.main(args)` after installing test hooks that record, per rank, the world size, what the rank trained
on each optimizer step (so the tests check the data sharding, not only that steps ran) and how many held-out contexts
it sampled user turns for before and after training (`sampled_before`, `sampled_after`), and on request:

* `FIC_TEST_STANDIN=1`: generation by a content-seeded stand-in (the same prompt gives the same text whichever rank
  or topology generates it), so a two-process run can be compared with a one-process run loss for loss. Real
  generation is batch-dependent and sampled with per-process seeds; the tests that use the real path (the
  `fic_llama3b` run) check that it finishes, not equality.
* `FIC_TEST_SIGTERM=RANK:STEP`: that rank sends itself SIGTERM at the end of that optimizer step (a scheduler that
  signals the processes of a job one by one).
* `FIC_TEST_SIGKILL=RANK:STEP`: that rank SIGKILLs itself at the end of that optimizer step (before the step's
  checkpoint is saved): a real kill at a step fixed by the test, not by how fast the run went.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Texts the stand-in picks from: the heuristic judge labels them differently, so GRPO rewards vary within a group.
CANNED = [
    "Why did you multiply there?",
    "ok",
    "Can you explain the second step again?",
    "What is 3 plus 4?",
    "thanks thanks thanks thanks",
    "Could you check the total again?",
]


def _key(*parts) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts, default=str).encode()).digest()[:8], "big")


def _text_of(ids) -> str:
    return hashlib.sha256(json.dumps(list(map(int, ids))).encode()).hexdigest()[:16]


def _skip_deepspeed_shm_op() -> None:
    """DeepSpeed's CPU accelerator JIT-compiles a shared-memory allreduce op at start-up (about 70 s on a machine
    that has not built it before). It only speeds up collectives; marking it incompatible makes DeepSpeed use
    torch.distributed (gloo), and the ZeRO code paths these tests check are the same either way."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # DeepSpeed keeps this dict; edits persist


def main() -> int:
    out = Path(sys.argv[1])
    argv = sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    from accelerate import PartialState

    import train as train_entry  # noqa: F401  (train.py at the repository root)
    from fic.distributed import use_cpu_group_without_gpu

    use_cpu_group_without_gpu()
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        _skip_deepspeed_shm_op()
    record: dict = {"steps": {}}
    standin = os.environ.get("FIC_TEST_STANDIN") == "1"
    signals = [
        (signal.SIGTERM, os.environ.get("FIC_TEST_SIGTERM")),
        (signal.SIGKILL, os.environ.get("FIC_TEST_SIGKILL")),
    ]

    def seen(trainer, keys: list[str]) -> None:
        step = str(trainer.state.global_step + 1)
        record["steps"].setdefault(step, []).extend(keys)

    # Model answers (to training contexts and to the held-out items): how many items this rank answered (each should
    # be answered once over all ranks); every model answer is `fic.data.followups.model_answers`.
    from fic.data import followups
    from fic.trainers import collab_sft, followup_rl, vasd

    original_answers = followups.model_answers

    def model_answers(backend, tokenizer, records, *args, **kwargs):
        record["answered"] = record.get("answered", 0) + len(records)
        return original_answers(backend, tokenizer, records, *args, **kwargs)

    # Every module that bound the name at import (the sampler imports it at its top) gets the counting one.
    for module in list(sys.modules.values()):
        if getattr(module, "model_answers", None) is original_answers:
            module.model_answers = model_answers

    # Held-out evaluations: the contexts whose user turns this rank sampled, before and after training.
    from fic import followup_eval
    from fic.trainers import heldout

    original_sample, original_after = followup_eval.sample_user_turns, heldout.evaluate_after_training
    phase = ["before"]

    def sample_user_turns(backend, tokenizer, contexts, *args, **kwargs):
        key = f"sampled_{phase[0]}"
        record[key] = record.get(key, 0) + len(contexts)
        return original_sample(backend, tokenizer, contexts, *args, **kwargs)

    def evaluate_after_training(*args, **kwargs):
        phase[0] = "after"
        return original_after(*args, **kwargs)

    followup_eval.sample_user_turns = sample_user_turns
    from fic.trainers import common

    for module in (heldout, common):  # common.train_and_measure calls it
        if hasattr(module, "evaluate_after_training"):
            module.evaluate_after_training = evaluate_after_training

    # Split evaluations: the jobs (chunks) this rank ran, per output file (`samples.jsonl`, `episodes.jsonl`, ...).
    from fic.distributed import RankedRows

    original_job = RankedRows._job

    def ranked_job(self, job, keys, make):
        jobs = record.setdefault("jobs", {})
        jobs[self.path.name] = jobs.get(self.path.name, 0) + 1
        return original_job(self, job, keys, make)

    RankedRows._job = ranked_job

    # VASD: rows of each generation batch, and the stand-in for every generation call.
    original_vasd = vasd.VASDTrainer._generate_and_score_completions

    def vasd_batch(self, inputs):
        seen(self, [json.dumps(ex.get("teacher_prompt"), sort_keys=True) for ex in inputs])
        return original_vasd(self, inputs)

    vasd.VASDTrainer._generate_and_score_completions = vasd_batch

    def standin_ids(tokenizer, prompt_ids, salt, end_ids) -> list[int]:
        rng = random.Random(_key(salt, list(map(int, prompt_ids))))
        text = rng.choice(CANNED)
        return tokenizer(text, add_special_tokens=False)["input_ids"] + list(end_ids)

    if standin:
        try:
            from fic.trainers.vasd import rollout as vasd_rollout
        except ImportError:
            vasd_rollout = None

        def vasd_ids(trainer, prompt_ids, as_teacher, max_new_tokens):
            end = [trainer._tokenizer.convert_tokens_to_ids(trainer._tokenizer.eos_token)]
            outs = [standin_ids(trainer._tokenizer, p, ("t" if as_teacher else "s"), end) for p in prompt_ids]
            return [o[:max_new_tokens] if max_new_tokens else o for o in outs]

        if vasd_rollout is not None:

            def rollout_generate(self, prompt_ids, *, as_teacher, temperature, max_new_tokens, greedy_override=False):
                return vasd_ids(self.trainer, prompt_ids, as_teacher, max_new_tokens)

            vasd_rollout.Rollouts.generate = rollout_generate
        else:

            def generate_with(self, prompt_ids, as_teacher, generation_config=None):
                limit = (
                    generation_config.max_new_tokens if generation_config is not None else self.max_completion_length
                )
                return vasd_ids(self, prompt_ids, as_teacher, limit)

            vasd.VASDTrainer._generate_with = generate_with

        def grpo_generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            from fic.trainers.followup_rl import user_turn_end_ids

            end = user_turn_end_ids(self._tokenizer)[:1]
            counts: dict = {}
            outs = []
            for p in prompt_ids:
                k = _text_of(p)
                counts[k] = counts.get(k, 0) + 1
                outs.append(standin_ids(self._tokenizer, p, ("g", self.state.global_step, counts[k]), end))
            return outs, None

        followup_rl.FollowupRLTrainer._generate_single_turn = grpo_generate

    # GRPO: the prompts of each generation batch.
    original_grpo = followup_rl.FollowupRLTrainer._generate_and_score_completions

    def grpo_batch(self, inputs):
        seen(self, [str(ex["prompt"]) for ex in inputs])
        return original_grpo(self, inputs)

    followup_rl.FollowupRLTrainer._generate_and_score_completions = grpo_batch

    # Collab SFT: the token ids of each micro-batch.
    original_sft = collab_sft.CollabSFTTrainer.compute_loss

    def sft_loss(self, model, inputs, *args, **kwargs):
        if model.training:
            ids, mask = inputs["input_ids"].tolist(), inputs["attention_mask"].tolist()
            seen(self, [_text_of([t for t, m in zip(row, ms) if m]) for row, ms in zip(ids, mask)])
        return original_sft(self, model, inputs, *args, **kwargs)

    collab_sft.CollabSFTTrainer.compute_loss = sft_loss

    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        """The logged metrics (the same on every rank) and, on request, a SIGTERM or SIGKILL to one rank at one step
        end."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            record.setdefault("logs", []).append({"step": state.global_step, **(logs or {})})

        def on_step_end(self, args, state, control, **kwargs):
            for signum, at in signals:
                if at:
                    rank, step = (int(x) for x in at.split(":"))
                    if state.global_step == step and PartialState().process_index == rank:
                        os.kill(os.getpid(), signum)

    original_callbacks = common.default_callbacks

    def with_recorder(run):  # before the preemption callback, so it sees the flag at this very step end
        return [Recorder(), *original_callbacks(run)]

    for module in (common, collab_sft, followup_rl):
        if hasattr(module, "default_callbacks"):
            module.default_callbacks = with_recorder

    def write() -> None:
        state = PartialState()
        # GROUP_RANK: torchrun's node rank (accelerate's --machine_rank), so a two-node test sees where each rank ran
        node = int(os.environ.get("GROUP_RANK", "0"))
        record.update(rank=state.process_index, world_size=state.num_processes, node=node)
        (out / f"rank{state.process_index}.json").write_text(json.dumps(record))

    atexit.register(write)
    return train_entry.main(argv)


if __name__ == "__main__":
    sys.exit(main())

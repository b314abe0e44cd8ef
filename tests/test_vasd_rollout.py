"""VASD's training-time generation (fic.trainers.vasd.rollout, fic.generation.decode) on a tiny offline model.

Run as a script (`accelerate launch ... tests/test_vasd_rollout.py OUT_DIR`) it trains two steps on ranks that hold
different numbers of shards, for the two-process test at the end.
"""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from fic.chat import full_view, render
from fic.generation.decode import decode, decode_kept
from fic.tiny import tiny_model
from fic.trainers.vasd import VASDConfig, VASDTrainer

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)

# Replies of different lengths and shard counts: the batches are left-padded and rows finish at different steps.
SHARDS = [
    ["What is 3 plus 4?", "The first number is 3.", "It is 4, add them."],
    ["Sum two numbers for me please, a and b.", "a is 12."],
    ["Hi.", "Take 5.", "Add 6.", "Then double it.", "Done?"],
    ["Compute the total cost of the apples and the pears we bought yesterday at the market.", "Apples: 3."],
]


@pytest.fixture(scope="module")
def model_dir():
    return tiny_model("chatml")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def ending_model(model_dir, tokenizer):
    """The tiny model with a sharper head whose most frequent greedy token is swapped with the end of turn, so greedy
    replies end at different lengths (a random-init model would otherwise write to the token limit every time)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        prompt = tokenizer(render(tokenizer, full_view(SHARDS[0][0]), True), add_special_tokens=False,
                           return_tensors="pt")  # fmt: skip
        out = model.generate(**prompt, max_new_tokens=24, do_sample=False)[0, prompt["input_ids"].shape[1] :]
        frequent = int(torch.mode(out).values)
        eos = tokenizer.eos_token_id
        head = model.lm_head.weight
        head[[frequent, eos]] = head[[eos, frequent]].clone()
    return model


def config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, learning_rate=1e-3, beta=0.5,
        temperature=1.0, lmbda=0.0, single_turn_mix=0.0, max_completion_length=8, rollout_max_new_tokens=12,
        shuffle_dataset=False, logging_steps=1, save_strategy="no", report_to="none", bf16=False,
        gradient_checkpointing=False, use_cpu=True, seed=0,
    )  # fmt: skip
    values.update(overrides)
    return VASDConfig(**values)


def shard_rows(completion=True):
    rows = [{"shards": s, "teacher_prompt": full_view(" ".join(s))} for s in SHARDS]
    if completion:
        for row in rows:
            row["completion"] = "The answer is 7."
    return Dataset.from_list(rows)


def first_near_tie(model, prompt: list[int], tokens: list[int], at: int, tolerance: float) -> bool:
    """Whether, unpadded, the model's two best next-token logits after `prompt + tokens[:at]` are within
    `tolerance`: a tie that float noise from padding may break either way."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens[:at]])).logits[0, -1].float()
    top = logits.topk(2).values
    return bool(top[0] - top[1] <= tolerance)


def test_greedy_replies_equal_model_generate(tmp_path, model_dir, tokenizer):
    """At temperature 0 the decode loop writes the replies `model.generate` writes (the path before it).

    Ties: both sides decode the same left-padded batch, but the decode loop drops finished rows, so later steps run on
    other batch shapes and the logits can differ by float noise (~1e-6). A row may therefore differ from
    `model.generate` only where the two best logits of an unpadded forward are within 1e-4; the row is compared up
    to that token. Any other difference fails, and at most one row may end in such a tie."""
    model = ending_model(model_dir, tokenizer)
    trainer = VASDTrainer(model, args=config(tmp_path), train_dataset=shard_rows(), processing_class=tokenizer)
    rollouts = trainer._rollouts
    convos = [full_view(s[0]) for s in SHARDS] + [full_view(" ".join(s)) for s in SHARDS]
    prompts = [list(ids) for ids in trainer._tokenize_prompts(convos)[0]]
    assert len({len(p) for p in prompts}) > 3, "the batch must mix prompt lengths"
    kw = dict(as_teacher=False, temperature=0.0, max_new_tokens=12, greedy_override=True)
    fast = rollouts.generate(prompts, **kw)
    rollouts.backend = "generate"
    reference = rollouts.generate(prompts, **kw)
    rollouts.backend = "fast"
    lengths = {len(r) for r in reference}
    assert len(lengths) > 1 and min(lengths) < 12, "rows must end at different lengths to exercise row dropping"
    ties = 0
    for prompt, got, want in zip(prompts, fast, reference):
        if got == want:
            continue
        at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        assert first_near_tie(model, prompt, want, at, 1e-4), (got, want)
        ties += 1
    assert ties <= 1
    # the shard conversations the student plays: the same views through both paths
    views = trainer.rollout_student_views(SHARDS)
    rollouts.backend = "generate"
    assert trainer.rollout_student_views(SHARDS) == views
    for view, shards in zip(views, SHARDS):
        assert [m["content"] for m in view if m["role"] == "user"] == shards


def test_rollout_cpu_threads_holds_while_decoding_and_is_restored(tmp_path, model_dir, tokenizer, monkeypatch):
    """`rollout_cpu_threads` sets torch's thread count around each decode call only, and the greedy replies are
    those of the default setting (one thread or two changes the order of float sums, not this model's argmax)."""
    import fic.trainers.vasd.rollout as vasd_rollout

    model = ending_model(model_dir, tokenizer)
    seen = []
    real_decode = vasd_rollout.decode

    def recording(*args, **kw):
        seen.append(torch.get_num_threads())
        return real_decode(*args, **kw)

    monkeypatch.setattr(vasd_rollout, "decode", recording)
    prompts = None
    replies = {}
    for threads in (None, 1):
        trainer = VASDTrainer(model, args=config(tmp_path, rollout_cpu_threads=threads), train_dataset=shard_rows(),
                              processing_class=tokenizer)  # fmt: skip
        if prompts is None:
            prompts = [list(ids) for ids in trainer._tokenize_prompts([full_view(s[0]) for s in SHARDS])[0]]
        before = torch.get_num_threads()
        replies[threads] = trainer._rollouts.generate(prompts, as_teacher=False, temperature=0.0, max_new_tokens=12,
                                                      greedy_override=True)  # fmt: skip
        assert torch.get_num_threads() == before
    assert seen == [torch.get_num_threads(), 1]
    assert replies[1] == replies[None]
    with pytest.raises(ValueError, match="rollout_cpu_threads"):
        config(tmp_path, rollout_cpu_threads=0)


def test_kept_cache_continues_a_conversation_as_a_fresh_prefill_would(tmp_path, model_dir, tokenizer):
    """The second shard turn, continued from the first turn's KV cache (only the new tokens fed), writes the replies
    a fresh prefill of the whole re-rendered conversation writes, with the tie rule of the test above."""
    from fic.chat import sharded_view
    from fic.trainers.vasd.rollout import _matching_rows

    model = ending_model(model_dir, tokenizer)
    trainer = VASDTrainer(model, args=config(tmp_path), train_dataset=shard_rows(), processing_class=tokenizer)
    eos, pad = trainer._rollouts.end_ids(), trainer._rollouts._pad_id()
    kw = dict(max_new_tokens=12, end_ids=eos, pad_id=pad, keep_end=True)
    first = [list(ids) for ids in trainer._tokenize_prompts([full_view(s[0]) for s in SHARDS])[0]]
    widths = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: widths.append(kwargs["input_ids"].shape[1]),
                                             with_kwargs=True)  # fmt: skip
    with torch.no_grad():
        replies, kept = decode_kept(model, first, **kw)
        texts = tokenizer.batch_decode(replies, skip_special_tokens=True)
        convos = [sharded_view(s[:2], [text.strip() or "..."]) for s, text in zip(SHARDS, texts)]
        second = [list(ids) for ids in trainer._tokenize_prompts(convos)[0]]
        rows = _matching_rows(kept, second)
        assert rows == [0, 1, 2, 3]  # each conversation extends its own row
        widths.clear()
        continued, kept2 = decode_kept(model, second, kept=kept, rows=rows, **kw)
        # the first turn's prompt is reused whole: at most the reply and the new user turn are fed
        assert widths[0] <= max(len(s) - len(f) for s, f in zip(second, first)) < min(len(s) for s in second)
        fresh = [r[0] for r in decode(model, second, **kw)]
    handle.remove()
    for b, (got, want) in enumerate(zip(continued, fresh)):
        if got != want:
            at = next(i for i, (a, c) in enumerate(zip(got, want)) if a != c)
            assert first_near_tie(model, second[b], want, at, 1e-4), (got, want)
        # what the cache holds: the prompt and every generated token fed back (not the last one)
        assert kept2.tokens[b] == second[b] + got[:-1]


def test_lockstep_decode_runs_until_every_process_is_done(model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [tokenizer("<|im_start|>user\nHi", add_special_tokens=False)["input_ids"]]
    forwards = []
    handle = model.register_forward_pre_hook(lambda *a: forwards.append(1))
    end: set[int] = set()  # rows end by `stop` only
    with torch.no_grad():
        alone = decode(model, prompts, max_new_tokens=6, end_ids=end, pad_id=0, stop=lambda toks: len(toks) == 2)
        alone_forwards = len(forwards)
        # another process is still decoding at every step: this one keeps running a finished row, writing nothing
        synced = decode(model, prompts, max_new_tokens=6, end_ids=end, pad_id=0, stop=lambda toks: len(toks) == 2,
                        synced=lambda more: True)  # fmt: skip
    handle.remove()
    assert synced == alone and len(alone[0][0]) == 2
    assert alone_forwards == 2 and len(forwards) - alone_forwards == 6  # prefill + 5 decode steps


def test_every_call_is_made_when_another_process_has_more_shards(tmp_path, model_dir, tokenizer):
    """A process with fewer (here no) shard rows joins the calls of the process with the most, with a dummy
    prompt, and drops what the dummy writes."""
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(model_dir), args=config(tmp_path),
                          train_dataset=shard_rows(), processing_class=tokenizer)  # fmt: skip
    rollouts = trainer._rollouts
    calls = []
    fast = rollouts._fast
    rollouts._fast = lambda prompts, *a: calls.append(prompts) or fast(prompts, *a)
    rollouts._global_max = lambda value: max(value, 3)  # the other process: 4 shards, 3 prompts per call
    assert trainer.rollout_student_views([]) == []
    assert rollouts.responses([], [], []) == []
    assert calls == [[[rollouts._pad_id()]]] * 5  # 3 shard replies, then the student and the teacher call
    rollouts._global_max = lambda value: value  # alone: nothing to generate, no call
    calls.clear()
    assert trainer.rollout_student_views([]) == [] and rollouts.responses([], [], []) == [] and calls == []


def test_modes_adapter_and_checkpointing_settings_come_back(tmp_path, model_dir, tokenizer):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    args = config(tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=shard_rows(),
                          processing_class=tokenizer, peft_config=lora)  # fmt: skip
    student = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    student.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})  # as train() does
    enabled = []
    original = student.gradient_checkpointing_enable

    def spy(gradient_checkpointing_kwargs=None):
        enabled.append(gradient_checkpointing_kwargs)
        return original(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    student.gradient_checkpointing_enable = spy
    trainer.model.train()
    ids = torch.tensor([tokenizer("<|im_start|>user\nHi<|im_end|>\n", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        before = student(ids).logits
    prompts = [ids[0].tolist()]
    for as_teacher in (True, False):
        out = trainer._rollouts.generate(prompts, as_teacher=as_teacher, temperature=1.0, max_new_tokens=4)
        assert len(out) == 1 and 1 <= len(out[0]) <= 4
    assert student.training and student.is_gradient_checkpointing
    assert enabled == [{"use_reentrant": True}] * 2  # re-enabled with the trainer's settings, not the defaults
    with torch.no_grad():
        assert torch.equal(student(ids).logits, before)  # the adapter is on again after the teacher's call
        with trainer.teacher_context():
            assert not torch.allclose(student(ids).logits, before)


def test_lora_student_decodes_with_folded_weights_and_gets_them_back(tmp_path, model_dir, tokenizer):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    model = ending_model(model_dir, tokenizer)
    trainer = VASDTrainer(model, args=config(tmp_path), train_dataset=shard_rows(), processing_class=tokenizer,
                          peft_config=lora)  # fmt: skip
    student = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    weights = {n: p.detach().clone() for n, p in student.named_parameters()}
    rollouts = trainer._rollouts
    prompts = [list(ids) for ids in trainer._tokenize_prompts([full_view(s[0]) for s in SHARDS])[0]]
    kw = dict(as_teacher=False, temperature=0.0, max_new_tokens=12, greedy_override=True)
    folded = rollouts.generate(prompts, **kw)
    rollouts.merge_lora = False
    unfolded = rollouts.generate(prompts, **kw)
    # the same greedy replies up to float-noise ties (the rule of test_greedy_replies_equal_model_generate)
    for prompt, got, want in zip(prompts, folded, unfolded):
        if got != want:
            at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            with torch.no_grad():
                logits = student(torch.tensor([prompt + want[:at]])).logits[0, -1]
            top = logits.topk(2).values
            assert top[0] - top[1] <= 1e-4, (got, want)
    assert all(torch.equal(p, weights[n]) for n, p in student.named_parameters())  # bit for bit
    adapter_on = student(torch.tensor([prompts[0]])).logits
    with trainer.teacher_context():
        assert not torch.allclose(student(torch.tensor([prompts[0]])).logits, adapter_on)  # the adapters are on


def test_lora_is_folded_once_per_generation_batch_and_again_when_it_changes(tmp_path, model_dir, tokenizer):
    from peft import LoraConfig
    from peft.tuners.lora import Linear as LoraLinear

    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(model_dir), args=config(tmp_path),
                          train_dataset=shard_rows(), processing_class=tokenizer, peft_config=lora)  # fmt: skip
    student = trainer.accelerator.unwrap_model(trainer.model)
    layers = [m for m in student.modules() if isinstance(m, LoraLinear)]
    rollouts = trainer._rollouts
    folds, seen = [], []
    original = LoraLinear.get_delta_weight
    LoraLinear.get_delta_weight = lambda self, adapter: folds.append(1) or original(self, adapter)
    hook = student.get_base_model().register_forward_pre_hook(
        lambda mod, args: seen.append(any(isinstance(m, LoraLinear) for m in mod.modules()))
    )
    try:
        prompts = [list(trainer._tokenize_prompts([full_view("Hi.")])[0][0])]
        kw = dict(as_teacher=False, temperature=0.0, max_new_tokens=3, greedy_override=True)
        rollouts.generate(prompts, **kw)
        rollouts.generate(prompts, **kw)
        assert len(folds) == len(layers)  # once for both calls of the batch
        assert seen and not any(seen)  # the decode forward ran the plain model: no adapter layer in it
        with torch.no_grad():
            layers[0].lora_B["default"].weight.add_(0.01)  # as an optimizer step would
        rollouts.generate(prompts, **kw)
        assert len(folds) == 2 * len(layers)
        rollouts.release()  # the end of a generation batch
        rollouts.generate(prompts, **kw)
        assert len(folds) == 3 * len(layers)
    finally:
        LoraLinear.get_delta_weight = original
        hook.remove()
    assert all(isinstance(m, LoraLinear) for m in layers) and len(layers) == sum(
        isinstance(m, LoraLinear) for m in student.modules()
    )  # every wrapper back in its place


class FakeVLLMGeneration:
    """Stands in for TRL's `VLLMGeneration`: records the settings of each call, answers one token and EOS."""

    def __init__(self, eos):
        self.temperature, self.max_completion_length, self.eos = 0.9, 8, eos
        self.calls, self.synced = [], 0

    def sync_weights(self):
        self.synced += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        self.calls.append((len(prompts), self.temperature, self.max_completion_length))
        return prompts, [[5, self.eos] for _ in prompts], None, None


def test_use_vllm_sends_the_students_text_through_trls_vllm_path(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, lmbda=1.0, rollout_temperature=0.0, rollout_max_new_tokens=5, max_completion_length=7)
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=shard_rows(),
                          processing_class=tokenizer)  # fmt: skip
    fake = FakeVLLMGeneration(tokenizer.eos_token_id)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, fake, -1
    hf_calls = []
    fast = trainer._rollouts._fast
    trainer._rollouts._fast = lambda prompts, *a: hf_calls.append(len(prompts)) or fast(prompts, *a)
    trainer.train()
    # four shard replies at the rollout settings (4, 1, 1 and 1 rows), then the on-policy responses at TRL's
    assert fake.calls == [(4, 0.0, 5), (2, 0.0, 5), (1, 0.0, 5), (1, 0.0, 5), (4, 0.9, 8)]
    assert (fake.temperature, fake.max_completion_length) == (0.9, 8)  # restored after each call
    assert fake.synced == 1 and hf_calls == []  # weights synced once per step
    logged = trainer.state.log_history[0]
    assert logged["vasd/on_policy_frac"] == 1.0 and math.isfinite(logged["loss"])
    # the base teacher is not the weights vLLM holds: its samples stay on transformers
    ids = [list(trainer._tokenize_prompts([full_view("Hi.")])[0][0])]
    trainer._rollouts.responses(ids, ids, ["teacher"])
    assert hf_calls == [1] and len(fake.calls) == 5


def test_rollout_and_train_seconds_are_logged_every_step(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=2, lmbda=0.5, per_device_train_batch_size=2)
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=shard_rows(),
                          processing_class=tokenizer)  # fmt: skip
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["vasd/rollout_s"] > 0 and h["vasd/train_s"] > 0
        assert h["vasd/rollout_s"] + h["vasd/train_s"] == pytest.approx(h["step_time"], rel=1e-6)


@pytest.mark.slow
def test_two_processes_with_different_shard_counts_do_not_hang(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "CUDA_VISIBLE_DEVICES": ""}
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
               str(ROOT / "accelerate_configs" / "cpu.yaml"), "--num_processes", "2", "--main_process_port", "0",
               str(Path(__file__)), str(out)]  # fmt: skip
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = {r["rank"]: r for r in (json.loads(p.read_text()) for p in out.glob("rank*.json"))}
    assert set(ranks) == {0, 1} and ranks[0]["world_size"] == 2
    assert all(r["steps"] == 2 for r in ranks.values())
    # the ranks held different shard counts in some step, yet made the same calls and (lockstep) the same forwards
    assert any(a != b for a, b in zip(ranks[0]["turns"], ranks[1]["turns"])), ranks
    assert ranks[0]["calls"] == ranks[1]["calls"] > 0
    assert ranks[0]["forwards"] == ranks[1]["forwards"]
    print(f"two-process VASD run with uneven shards: {time.time() - started:.1f} s")


def _main(out_dir: str) -> None:
    """Two steps of VASD on 2 processes whose batches hold different numbers of shards (and none on some)."""
    from accelerate import PartialState

    from fic.distributed import end_launch, use_cpu_group_without_gpu
    from fic.trainers.vasd import rollout as vasd_rollout

    use_cpu_group_without_gpu()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = tiny_model("chatml")
    tokenizer = AutoTokenizer.from_pretrained(path)
    # Rows 0-1 are played from shards (5 and 2), rows 2-3 have a fixed multi-turn prompt: whichever way the sampler
    # splits a batch of four between two ranks, their largest shard counts differ.
    rows = [
        {"shards": SHARDS[2]},
        {"shards": SHARDS[1]},
        {"prompt": [{"role": "user", "content": "Hi."}]},
        {"prompt": [{"role": "user", "content": "Yo."}]},
    ]
    rows = [{"shards": None, "prompt": None, **r, "teacher_prompt": full_view("Add 5 and 6."),
             "completion": "It is 11."} for r in rows]  # fmt: skip
    args = config(out / "trainer", max_steps=2, per_device_train_batch_size=2, lmbda=0.5, rollout_max_new_tokens=6)
    trainer = VASDTrainer(AutoModelForCausalLM.from_pretrained(path), args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer)  # fmt: skip
    rollouts = trainer._rollouts
    # each forward a collective, as under FSDP or ZeRO-3 without gathered weights: the decode loop runs in lockstep
    rollouts._synced = lambda: lambda more: rollouts._global_max(int(more)) > 0
    record = {"turns": [], "calls": 0, "forwards": 0}
    student_views, fast = rollouts.student_views, rollouts._fast

    def views(shards_list):
        record["turns"].append(max((len(s) for s in shards_list), default=1) - 1)
        return student_views(shards_list)

    def counted(*a):
        record["calls"] += 1
        return fast(*a)

    rollouts.student_views, rollouts._fast = views, counted
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    unwrapped.register_forward_pre_hook(lambda *a: record.__setitem__("forwards", record["forwards"] + 1))
    assert vasd_rollout.Rollouts is type(rollouts)
    trainer.train()
    state = PartialState()
    record.update(rank=state.process_index, world_size=trainer.args.world_size, steps=trainer.state.global_step)
    (out / f"rank{state.process_index}.json").write_text(json.dumps(record))
    end_launch()  # as train.py does: leave the gloo group before the process exits


if __name__ == "__main__":
    _main(sys.argv[1])

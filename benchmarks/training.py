"""What the training benchmarks share: a model of a given shape, a two-view dataset, the trainers, a step timer.

Every trainer gets the same model (a fresh instance from the same checkpoint), the same LoRA config, batch size,
sequence lengths, optimizer and precision, and runs `trainer.train()` with `max_steps` set; `StepTimer` times each
optimizer step from `on_step_begin` to `on_step_end` (the trainer's own `_prepare_inputs`, forwards, loss, backward
and optimizer step; the dataloader's collation happens before it). Calling `train()` again on the same trainer runs
more steps, so variants can take turns (see `timed_rounds`).

Rollouts. TRL's `DistillationTrainer` and `SDFTTrainer` always sample their completions on-policy; VASD off-policy
reads them from the dataset. To compare the training steps on the same job, the TRL trainers' generation is replaced
by a stub that returns the dataset's completion ids (the same ids VASD trains on): generation is the same
transformers `generate` in all of them and would only add the same cost to every side.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import common

_BENCH_CACHE_VERSION = 1


@dataclass
class Spec:
    """Model shape and batch of one benchmark size.

    Args:
        hidden, layers, heads, intermediate: the Llama shape (`intermediate` defaults to 4 x hidden when 0).
        vocab: the model's vocabulary (rows of the embedding and the head); 0 keeps the tokenizer's (a few hundred).
            Larger vocabularies are real rows the tokenizer never emits: the head's compute and memory are the same.
        batch: sequences per optimizer step (one micro-batch).
        shards: user turns of the student view (the teacher view is the same text in one message).
        prompt_tokens: about this many tokens in the student prompt.
        completion_tokens: tokens of every completion (all exactly this long).
        dtype: model dtype (`float32` on CPU; `bfloat16` on GPU).
        lora_r: LoRA rank (alpha = 2r), on all linear layers.
    """

    hidden: int
    layers: int
    heads: int = 4
    intermediate: int = 0
    vocab: int = 0
    batch: int = 4
    shards: int = 4
    prompt_tokens: int = 128
    completion_tokens: int = 64
    dtype: str = "float32"
    lora_r: int = 16


def build_model(spec: Spec, seed: int = 0) -> str:
    """A random-init Llama of `spec`'s shape with the chatml tiny tokenizer, saved once (cached on disk)."""
    from fic.tiny import _cache_root, tiny_model

    base = tiny_model(
        "chatml", hidden_size=64, num_layers=1, num_heads=4, intermediate_size=128, seed=seed
    )  # only its tokenizer is used
    settings = {k: getattr(spec, k) for k in ("hidden", "layers", "heads", "intermediate", "vocab")}
    key = hashlib.sha256(json.dumps({**settings, "seed": seed, "v": _BENCH_CACHE_VERSION}).encode()).hexdigest()[:12]
    out = _cache_root() / "bench" / f"llama-{key}"
    if (out / "config.json").exists():
        return str(out)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    config = AutoConfig.from_pretrained(base)
    config.hidden_size = spec.hidden
    config.num_hidden_layers = spec.layers
    config.num_attention_heads = config.num_key_value_heads = spec.heads
    config.intermediate_size = spec.intermediate or 4 * spec.hidden
    config.head_dim = spec.hidden // spec.heads
    config.vocab_size = max(spec.vocab, len(tokenizer))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".build-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # built by another process meanwhile
        pass
    return str(out)


def make_examples(tokenizer, spec: Spec, count: int, seed: int = 0) -> list[dict]:
    """Two-view examples: `prompt` (shards over user turns), `teacher_prompt` (one message), a `completion` text and
    its `completion_ids` (exactly `spec.completion_tokens` ids, the end-of-turn token included when it fits)."""
    from fic.chat import full_view, sharded_view, turn_end_strings
    from fic.tiny import _WORDS

    rng = random.Random(seed)
    words_per_shard = max(4, spec.prompt_tokens // (spec.shards * 3))
    end_ids = tokenizer(turn_end_strings(tokenizer, role="assistant")[0], add_special_tokens=False)["input_ids"]
    out = []
    for _ in range(count):
        shards = [" ".join(rng.choices(_WORDS, k=words_per_shard)).capitalize() + "." for _ in range(spec.shards)]
        answers = ["Noted. " + " ".join(rng.choices(_WORDS, k=3)) + "." for _ in range(spec.shards - 1)]
        words: list[str] = []
        while True:
            words += rng.choices(_WORDS, k=16)
            ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]
            if len(ids) >= spec.completion_tokens:
                break
        completion = " ".join(words)
        out.append(
            {
                "prompt": sharded_view(shards, answers),
                "teacher_prompt": full_view(" ".join(shards)),
                "completion": completion,
                "completion_ids": (ids + end_ids)[: spec.completion_tokens],
            }
        )
    return out


def _output_dir() -> str:
    """A scratch output_dir (the trainers save nothing: save_strategy="no"), removed when the process exits."""
    path = tempfile.mkdtemp(prefix="fic-bench-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def common_args(spec: Spec, device: str, seed: int) -> dict:
    """TrainingArguments shared by every trainer (the ones that could differ between TRL configs are pinned)."""
    return dict(
        output_dir=_output_dir(),
        per_device_train_batch_size=spec.batch,
        gradient_accumulation_steps=1,
        gradient_checkpointing=False,
        max_steps=1,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
        use_cpu=device == "cpu",
        bf16=spec.dtype == "bfloat16",
        dataloader_num_workers=0,
    )


def lora_config(spec: Spec):
    from peft import LoraConfig

    return LoraConfig(
        r=spec.lora_r, lora_alpha=2 * spec.lora_r, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def load_model(path: str, spec: Spec, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, spec.dtype)).to(device)
    if device == "cpu":
        # On CPU the loaded weights can stay views of the memory-mapped checkpoint (file pages, shared between two
        # models loaded from it); copy them into the process's own memory, as a GPU load does, so the memory
        # measurement counts every model's weights once.
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                tensor.data = tensor.data.clone()
    return model


def _stub_completions(examples: list[dict]):
    """A generator of completion ids in dataset order, cycling (content does not matter to the step's cost)."""
    state = {"i": 0}

    def take(n: int) -> list[list[int]]:
        out = []
        for _ in range(n):
            out.append(list(examples[state["i"] % len(examples)]["completion_ids"]))
            state["i"] += 1
        return out

    return take


def make_trainer(kind: str, path: str, spec: Spec, examples: list[dict], device: str, seed: int, beta: float = 0.5):
    """One of `vasd`, `sft`, `distill` (TRL DistillationTrainer), `sdft` (TRL SDFTTrainer), configured alike."""
    from transformers.trainer_callback import PrinterCallback

    trainer = _make_trainer(kind, path, spec, examples, device, seed, beta)
    trainer.remove_callback(PrinterCallback)  # it prints every log dict to stdout, where the result line goes
    return trainer


def _make_trainer(kind: str, path: str, spec: Spec, examples: list[dict], device: str, seed: int, beta: float):
    from datasets import Dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = load_model(path, spec, device)
    args = common_args(spec, device, seed)
    lora = lora_config(spec)
    take = _stub_completions(examples)
    if kind == "vasd":
        from fic.trainers.vasd import VASDConfig, VASDTrainer

        data = Dataset.from_list([{k: ex[k] for k in ("prompt", "teacher_prompt", "completion")} for ex in examples])
        config = VASDConfig(
            **args, teacher_mode="base", lmbda=0.0, single_turn_mix=0.0, beta=beta, temperature=1.0,
            max_completion_length=spec.completion_tokens,
        )  # fmt: skip
        return VASDTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora)
    if kind == "sft":
        from trl import SFTConfig, SFTTrainer

        data = Dataset.from_list(
            [
                {"prompt": ex["prompt"], "completion": [{"role": "assistant", "content": ex["completion"]}]}
                for ex in examples
            ]
        )
        config = SFTConfig(**args, max_length=None, packing=False, completion_only_loss=True)
        return SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora)
    if kind == "distill":
        from trl import DistillationConfig, DistillationTrainer

        data = Dataset.from_list([{"prompt": ex["prompt"]} for ex in examples])
        config = DistillationConfig(**args, beta=beta, temperature=1.0, max_completion_length=spec.completion_tokens)
        teacher = load_model(path, spec, device)  # the frozen base: TRL's trainer takes a separate teacher model
        trainer = DistillationTrainer(
            model=model, teacher_model=teacher, args=config, train_dataset=data, processing_class=tokenizer,
            peft_config=lora,
        )  # fmt: skip
        trainer._generate_single_turn = lambda prompt_ids, *a, **kw: take(len(prompt_ids))
        return trainer
    if kind == "sdft":
        from trl.experimental.sdft import SDFTConfig, SDFTTrainer

        # SDFT's teacher sees the student prompt plus a privileged context: here the single-turn prompt's text.
        data = Dataset.from_list(
            [{"prompt": ex["prompt"], "privileged_context": ex["teacher_prompt"][-1]["content"]} for ex in examples]
        )
        config = SDFTConfig(
            **args, teacher_model_kind="base", num_generations=1, distillation_mode="full_logits",
            distillation_alpha=beta, distillation_is_clip=None, max_completion_length=spec.completion_tokens,
            max_prompt_length=None, temperature=1.0,
        )  # fmt: skip
        trainer = SDFTTrainer(
            model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora
        )
        trainer._generate = lambda prompt_ids: (prompt_ids, take(len(prompt_ids)))
        return trainer
    raise ValueError(f"trainer kind {kind!r} is unknown; valid: vasd, sft, distill, sdft")


class StepTimer:
    """A TrainerCallback that records the wall time and this process's CPU time of every optimizer step."""

    def __init__(self, device: str):
        from transformers import TrainerCallback

        timer = self
        self.device, self.times, self.cpu_times, self._start = device, [], [], None

        class _Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                common.sync(timer.device)
                timer._start = (time.perf_counter(), time.process_time())

            def on_step_end(self, args, state, control, **kw):
                common.sync(timer.device)
                timer.times.append(time.perf_counter() - timer._start[0])
                timer.cpu_times.append(time.process_time() - timer._start[1])

        self.callback = _Callback()


def run_steps(trainer, steps: int) -> None:
    trainer.args.max_steps = steps
    trainer.train()


def timed_rounds(
    trainers: dict, device: str, rounds: int, steps_per_round: int, warmup_steps: int = 1
) -> tuple[dict, dict]:
    """Each trainer runs `warmup_steps` untimed, then `rounds` rounds of `steps_per_round` steps, taking turns.

    Returns the wall seconds and the CPU seconds of every timed step, per trainer.
    """
    timers = {}
    for key, trainer in trainers.items():
        run_steps(trainer, warmup_steps)
        timers[key] = StepTimer(device)
        trainer.add_callback(timers[key].callback)
    for _ in range(rounds):
        for trainer in trainers.values():
            run_steps(trainer, steps_per_round)
    return {key: t.times for key, t in timers.items()}, {key: t.cpu_times for key, t in timers.items()}


def memory_worker(kind: str, path: str, spec: Spec, examples: list[dict], device: str, seed: int, steps: int) -> dict:
    """In a fresh process: peak memory of building `kind`'s trainer and running `steps` steps, above the imports."""
    mem = common.PeakMemory(device).start()
    trainer = make_trainer(kind, path, spec, examples, device, seed)
    mem.mark()
    run_steps(trainer, steps)
    return {"peak_bytes": mem.peak(), "step_peak_bytes": mem.step_peak(), "method": mem.method()}


def import_training_stack() -> None:
    """Import what the trainers use before memory is measured (imports are not a trainer's memory)."""
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401
    import trl.experimental.sdft  # noqa: F401
    import trl.kernels.chunked_divergence  # noqa: F401

    import fic.losses  # noqa: F401
    import fic.trainers.vasd  # noqa: F401


def spec_settings(spec: Spec) -> dict:
    return asdict(spec)


MEMORY_STEPS = 2  # steps each memory worker runs after building its trainer
STEPS_PER_ROUND = 1  # timed steps per trainer per round


@dataclass
class Comparison:
    """What `compare` measured: per trainer kind, the median step seconds (`times`: the ratio clock, CPU time on
    CPU; `wall`: wall-clock), the memory worker's peaks, and every timed step (`seconds_wall`, `seconds_cpu`)."""

    args: object
    spec: Spec
    path: str
    times: dict
    wall: dict
    mem: dict
    clock: str
    seconds_wall: dict
    seconds_cpu: dict

    def emit(self, name: str, figures: dict, **settings) -> dict:
        """`common.emit` with the settings every trainer comparison records."""
        first = next(iter(self.mem.values()))
        return common.emit(
            name, figures, self.args, **spec_settings(self.spec), model=Path(self.path).name,
            memory_steps=MEMORY_STEPS, steps_per_round=STEPS_PER_ROUND, memory_method=first["method"], clock=self.clock,
            seconds_wall=self.seconds_wall, seconds_cpu=self.seconds_cpu, **settings,
        )  # fmt: skip


def compare(script: str, doc: str, sizes: dict, kinds: tuple[str, ...], argv: list[str] | None):
    """The flow of a trainer-vs-trainer benchmark: parse the arguments, build the model and the examples, measure each
    kind's peak memory in a fresh worker process, then time the trainers taking turns in this one.

    Returns a `Comparison`, or, when this process is a memory worker (`--worker KIND`), the dict the worker hands
    back (the script returns it as is).
    """
    args = common.parse(common.parser(doc, default_repeats=4), argv)
    spec = sizes[args.size]
    if args.worker:
        import_training_stack()
    from transformers import AutoTokenizer

    path = build_model(spec, seed=args.seed)
    examples = make_examples(AutoTokenizer.from_pretrained(path), spec, 64, seed=args.seed)
    if args.worker:
        return common.worker_result(
            **memory_worker(args.worker, path, spec, examples, args.device, args.seed, MEMORY_STEPS)
        )
    mem = {k: common.run_worker(script, k, args) for k in kinds}
    trainers = {k: make_trainer(k, path, spec, examples, args.device, args.seed) for k in kinds}
    wall, cpu = timed_rounds(trainers, args.device, args.repeats, STEPS_PER_ROUND, max(1, args.warmup))
    times, clock = common.ratio_times(args.device, wall, cpu)
    return Comparison(
        args=args, spec=spec, path=path, times={k: common.median(v) for k, v in times.items()},
        wall={k: common.median(v) for k, v in wall.items()}, mem=mem, clock=clock, seconds_wall=wall, seconds_cpu=cpu,
    )  # fmt: skip

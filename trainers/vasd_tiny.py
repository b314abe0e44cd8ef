"""The tiny end-to-end VASD run: a CPU-sized base with a real multi-turn gap, then VASD, measured before and after.

1. **Base.** A tiny random-init Llama with a word-level tokenizer built for the synthetic task family
   (`fic.data.synthetic`) and a real chat template (ChatML from `fic.testing`) is trained with TRL's `SFTTrainer` on
   the single-turn views only: every task in each of its full phrasings and in the CONCAT form. It is cached on disk,
   keyed by its settings.
2. **Measure** with greedy decoding: P_full (the canonical phrasing), P_concat (all shards in one message) and
   P_sharded (one shard per user turn, the model answers every turn; an episode is correct when any answer attempt
   is, as in `eval/lic.py`). The base has never seen a second user turn, so P_sharded falls well below P_full while
   P_concat stays close to it: the gap comes from the turns, not from the wording.
3. **VASD** (`fic.trainers.vasd.VASDTrainer`): the student view is the sharded conversation in which the current
   student answers the earlier shards itself (greedy, played during training: with the base's replies fixed in
   advance the trained model meets different earlier replies of its own at test time, which cost 0.95 -> 0.64 on the
   last turn in a measurement here); the teacher view is one single-turn phrasing (a full phrasing or CONCAT, drawn
   per example); the teacher is the frozen base; a share of the rows replays the teacher view as the student view.
4. **Re-measure** and report recovery = P_sharded(after) / P_full(before), with P_full and P_concat after.

`run_tiny_vasd(TinyVASDSettings(...))` does all of it and returns the numbers; `fic_tiny` recipes call it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from fic.chat import concat_view, full_view, render, sharded_view, turn_end_strings
from fic.data.synthetic import SyntheticTask, make_tasks, vocabulary

logger = logging.getLogger(__name__)

BASE_CACHE_VERSION = 1


@dataclass
class TinyVASDSettings:
    """Everything that decides the tiny run (the base's fields also key its disk cache).

    Args:
        family: chat-template family from `fic.testing` (`chatml`, `llama3`, `norole`).
        task_steps: update steps per synthetic task (1 gives three shards: question, start, update).
        hidden_size, num_layers, num_heads, intermediate_size: the tiny Llama.
        base_tasks: training tasks for the base (each seen in every single-turn phrasing).
        base_steps, base_batch_size, base_learning_rate: the base's SFT run.
        vasd_tasks: training tasks for VASD (drawn from the same train split, disjoint from the test tasks).
        vasd_steps, vasd_batch_size, vasd_learning_rate: the VASD run.
        beta, temperature, lmbda, single_turn_mix, teacher_mode: `VASDConfig` fields for the run.
        eval_tasks: test-split tasks measured before and after.
        seed: seed of everything.
        num_threads: torch CPU threads for the base's SFT; VASD and the measurements, made of many tiny generation
            steps, run single-threaded (faster here than two threads, and not hurt by a busy machine).
        cache_dir: where the base is cached (default `$FIC_CACHE/vasd_tiny` or `~/.cache/fic/vasd_tiny`).
        output_dir: where VASD writes its trainer output (a temporary folder when `None`).
    """

    family: str = "chatml"
    task_steps: int = 1
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    base_tasks: int = 4000
    base_steps: int = 600
    base_batch_size: int = 64
    base_learning_rate: float = 3e-3
    vasd_tasks: int = 6400
    vasd_steps: int = 450
    vasd_batch_size: int = 32
    vasd_learning_rate: float = 1.5e-3
    beta: float = 0.0
    temperature: float = 1.0
    lmbda: float = 0.0
    single_turn_mix: float = 0.5
    teacher_mode: str = "base"
    eval_tasks: int = 500
    seed: int = 0
    num_threads: int = 2
    cache_dir: str | None = None
    output_dir: str | None = None
    base_fields: tuple = field(
        default=(
            "family",
            "task_steps",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "base_tasks",
            "base_steps",
            "base_batch_size",
            "base_learning_rate",
            "seed",
        ),  # fmt: skip
        repr=False,
    )

    def base_key(self) -> str:
        settings = {name: getattr(self, name) for name in self.base_fields}
        settings["version"] = BASE_CACHE_VERSION
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def build_task_tokenizer(family: str = "chatml"):
    """A word-level `PreTrainedTokenizerFast` for the synthetic tasks, with the family's chat template and specials.

    Every word of the task family is one token (`fic.data.synthetic.vocabulary`), so a four-shard conversation is
    about 80 tokens, not 250 as with a small byte-level BPE; the words the template itself writes (role names, the
    default system prompt) are read off a rendering. Anything else decodes as `[UNK]`.
    """
    import re

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from fic.testing import FAMILIES

    if family not in FAMILIES:
        raise ValueError(f"family: unknown chat-template family {family!r}; valid: {', '.join(FAMILIES)}")
    spec = FAMILIES[family]
    specials = list(dict.fromkeys([*spec["special"].values(), *spec["extra"], "[UNK]"]))
    words = set(vocabulary())
    probe = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), **spec["special"]
    )
    probe.chat_template = spec["template"]
    convo = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "x"}]
    text = probe.apply_chat_template(convo, tokenize=False, add_generation_prompt=True, **_template_kwargs(family))
    for special in specials:
        text = text.replace(special, " ")
    words.update(re.findall(r"\w+|[^\w\s]+", text))
    vocab = {token: i for i, token in enumerate(specials + sorted(words - set(specials)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", additional_special_tokens=list(spec["extra"]), **spec["special"]
    )
    tokenizer.chat_template = spec["template"]
    tokenizer.padding_side = "left"
    return tokenizer


def _template_kwargs(family: str) -> dict:
    # The llama3 family writes today's date; pin it so renderings (and the vocabulary) do not change by the day.
    return {"date_string": "01 Jan 2025"} if family == "llama3" else {}


def build_tiny_model(tokenizer, settings: TinyVASDSettings):
    """A random-init `LlamaForCausalLM` sized by `settings`, ending generation at the template's turn end."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_heads,
        intermediate_size=settings.intermediate_size,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(settings.seed)
    model = LlamaForCausalLM(config)
    ends = [tokenizer.convert_tokens_to_ids(t) for t in turn_end_strings(tokenizer, role="assistant")]
    model.generation_config = GenerationConfig(
        eos_token_id=sorted(set(ends)), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    return model


def single_turn_rows(tasks: list[SyntheticTask]) -> list[dict]:
    """SFT rows (conversational prompt/completion) for every single-turn phrasing of every task."""
    return [
        {"prompt": full_view(prompt), "completion": [{"role": "assistant", "content": task.reference}]}
        for task in tasks
        for prompt in task.single_turn_prompts
    ]


def tokenized_single_turn_rows(tokenizer, tasks: list[SyntheticTask]) -> list[dict]:
    """`single_turn_rows` as token ids: the rendered prompt's ids followed by the response ids and the turn end
    (`input_ids` plus a `completion_mask`), built by concatenating ids. Several times faster than letting
    `SFTTrainer` render and tokenise every row, and the same ids."""
    end = tokenizer(turn_end_strings(tokenizer, role="assistant")[0], add_special_tokens=False)["input_ids"]
    prompts = [
        render(tokenizer, full_view(p), add_generation_prompt=True) for t in tasks for p in t.single_turn_prompts
    ]
    answers = [t.reference for t in tasks for _ in t.single_turn_prompts]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answers, add_special_tokens=False)["input_ids"]
    return [
        {"input_ids": p + a + end, "completion_mask": [0] * len(p) + [1] * (len(a) + len(end))}
        for p, a in zip(prompt_ids, answer_ids)
    ]


def train_base(settings: TinyVASDSettings) -> str:
    """Train (once) and return the directory of the tiny base; cached under `cache_dir` by its settings."""
    root = Path(settings.cache_dir or Path(os.environ.get("FIC_CACHE", Path.home() / ".cache" / "fic")) / "vasd_tiny")
    out = root / f"base-{settings.family}-{settings.base_key()}"
    if (out / "config.json").exists():
        logger.info("tiny base: cached at %s", out)
        return str(out)
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    threads = torch.get_num_threads()
    torch.set_num_threads(settings.num_threads)
    tokenizer = build_task_tokenizer(settings.family)
    model = build_tiny_model(tokenizer, settings)
    tasks = make_tasks(settings.base_tasks, seed=settings.seed, split="train", steps=settings.task_steps)
    dataset = Dataset.from_list(tokenized_single_turn_rows(tokenizer, tasks))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        args = SFTConfig(
            output_dir=str(tmp / "trainer"),
            max_steps=settings.base_steps,
            per_device_train_batch_size=settings.base_batch_size,
            learning_rate=settings.base_learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=min(50, settings.base_steps // 10),
            weight_decay=0.0,
            max_grad_norm=1.0,
            logging_steps=50,
            save_strategy="no",
            report_to="none",
            bf16=False,
            gradient_checkpointing=False,
            completion_only_loss=True,
            seed=settings.seed,
            dataloader_num_workers=0,
            use_cpu=not torch.cuda.is_available(),
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        trainer.train()
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        try:
            os.rename(tmp / "model", out)
        except OSError:  # another process cached the same base first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        torch.set_num_threads(threads)
    return str(out)


@dataclass
class ViewScores:
    """Greedy scores of one model on tasks: P per view, per-turn accuracy, and the sharded transcripts."""

    p_full: float
    p_concat: float
    p_sharded: float
    p_phrasings: list[float]
    sharded_turn_accuracy: list[float]
    sharded_final_turn: float
    sharded_turns: list[list[str]] = field(repr=False, default_factory=list)

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "sharded_turns"}


def _backend(model, tokenizer, batch_size: int):
    from fic.generation import HFBackend

    return HFBackend(model, tokenizer, batch_size=batch_size)


def greedy_replies(backend, tokenizer, conversations: list[list[dict]], max_new_tokens: int = 8) -> list[str]:
    """One greedy reply per conversation (rendered with the template, stopped at the turn end)."""
    from fic.generation import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new_tokens, stop=turn_end_strings(tokenizer, "assistant")
    )
    prompts = [render(tokenizer, c, add_generation_prompt=True) for c in conversations]
    return [out[0].strip() for out in backend.generate(prompts, params, keep_special_tokens=False)]


def sharded_rollout(
    backend, tokenizer, tasks: list[SyntheticTask], max_new_tokens: int = 8, last_turn: bool = True
) -> list[list[str]]:
    """Play every sharded episode to its last shard: the user reveals one shard per turn, the model answers each.

    Returns the model's reply at every turn of every task (all tasks must have the same number of shards); with
    `last_turn=False` the reply to the last shard is not generated (training data needs only the earlier ones).
    """
    if len({len(t.shards) for t in tasks}) > 1:
        raise ValueError("tasks: sharded_rollout plays tasks in lockstep and needs the same number of shards in each")
    replies: list[list[str]] = [[] for _ in tasks]
    n_turns = len(tasks[0].shards) if tasks else 0
    for turn in range(n_turns if last_turn else n_turns - 1):
        convos = [sharded_view(list(t.shards[: turn + 1]), replies[i]) for i, t in enumerate(tasks)]
        for i, reply in enumerate(greedy_replies(backend, tokenizer, convos, max_new_tokens)):
            replies[i].append(reply)
    return replies


def evaluate_views(model, tokenizer, tasks: list[SyntheticTask], batch_size: int = 256, backend=None) -> ViewScores:
    """P_full, P_concat and P_sharded of `model` on `tasks` with greedy decoding.

    A sharded episode is correct when any of its answer attempts is (the episode of `eval/lic.py` stops at the first
    correct attempt; playing on to the last shard changes no score and gives complete transcripts). `backend` (a
    `fic.generation` backend) replaces the transformers backend built from `model`.
    """
    backend = backend or _backend(model, tokenizer, batch_size)
    n = max(len(tasks), 1)
    phrasings = []
    for k in range(len(tasks[0].phrasings) if tasks else 0):
        replies = greedy_replies(backend, tokenizer, [full_view(t.phrasings[k]) for t in tasks])
        phrasings.append(sum(t.check(r) for t, r in zip(tasks, replies)) / n)
    concat = greedy_replies(backend, tokenizer, [concat_view(list(t.shards)) for t in tasks])
    turns = sharded_rollout(backend, tokenizer, tasks)
    per_turn = [sum(t.check(r[k]) for t, r in zip(tasks, turns)) / n for k in range(len(turns[0]) if turns else 0)]
    return ViewScores(
        p_full=phrasings[0] if phrasings else 0.0,
        p_concat=sum(t.check(r) for t, r in zip(tasks, concat)) / n,
        p_sharded=sum(any(t.check(x) for x in r) for t, r in zip(tasks, turns)) / n,
        p_phrasings=phrasings,
        sharded_turn_accuracy=per_turn,
        sharded_final_turn=per_turn[-1] if per_turn else 0.0,
        sharded_turns=turns,
    )


def vasd_shard_rows(tasks: list[SyntheticTask], seed: int = 0) -> list[dict]:
    """VASD rows whose student view the trainer plays itself (`shards`: the current student answers every shard but
    the last), with one single-turn phrasing per row (a full phrasing or CONCAT) as the teacher view."""
    rng = random.Random(seed)
    return [
        {"shards": list(t.shards), "teacher_prompt": full_view(rng.choice(t.single_turn_prompts)), "task_id": t.id}
        for t in tasks
    ]


def vasd_config(settings: TinyVASDSettings, output_dir: str):
    """The `VASDConfig` of the tiny run."""
    from fic.trainers.vasd import VASDConfig

    return VASDConfig(
        output_dir=output_dir,
        teacher_mode=settings.teacher_mode,
        beta=settings.beta,
        temperature=settings.temperature,
        lmbda=settings.lmbda,
        single_turn_mix=settings.single_turn_mix,
        max_steps=settings.vasd_steps,
        per_device_train_batch_size=settings.vasd_batch_size,
        learning_rate=settings.vasd_learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(20, settings.vasd_steps // 10),
        weight_decay=0.0,
        max_completion_length=8,
        logging_steps=25,
        save_strategy="no",
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        seed=settings.seed,
        use_cpu=not torch.cuda.is_available(),
    )


def run_tiny_vasd(settings: TinyVASDSettings | None = None, vasd_args=None, **overrides) -> dict:
    """Base (cached), measure, VASD, re-measure. Returns the scores, recovery, the done-means checks and timings.

    Args:
        settings: the run's settings (defaults: `TinyVASDSettings()`); `overrides` replace single fields.
        vasd_args: a `VASDConfig` to train with instead of `vasd_config(settings)` (what a recipe passes).
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.trainers.vasd import VASDTrainer

    settings = settings or TinyVASDSettings()
    if overrides:
        valid = {f.name for f in fields(settings)}
        unknown = sorted(set(overrides) - valid)
        if unknown:
            raise ValueError(f"run_tiny_vasd: unknown setting(s) {unknown}; valid: {', '.join(sorted(valid))}")
        settings = TinyVASDSettings(**{**asdict(settings), **overrides})
    timings = {}
    start = time.perf_counter()
    base_dir = train_base(settings)
    timings["base"] = time.perf_counter() - start
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    test = make_tasks(settings.eval_tasks, seed=settings.seed + 1, split="test", steps=settings.task_steps)
    train = make_tasks(settings.vasd_tasks, seed=settings.seed + 2, split="train", steps=settings.task_steps)

    t = time.perf_counter()
    before = evaluate_views(model, tokenizer, test)
    timings["eval_before"] = time.perf_counter() - t
    logger.info("before VASD: %s", before.summary())

    # The student's earlier turns are played by the current student during training (rows given as shards): with
    # replies fixed in advance (the base's), the trained model meets its own, different earlier replies at test time.
    dataset = Dataset.from_list(vasd_shard_rows(train, seed=settings.seed))
    t = time.perf_counter()
    output_dir = settings.output_dir or tempfile.mkdtemp(prefix="vasd-tiny-")
    args = vasd_args if vasd_args is not None else vasd_config(settings, output_dir)
    trainer = VASDTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    timings["vasd"] = time.perf_counter() - t
    model.eval()
    if settings.output_dir:  # the distilled model, for `fic lic` / `fic probe` on it
        trainer.save_model(output_dir)
        tokenizer.save_pretrained(output_dir)

    t = time.perf_counter()
    after = evaluate_views(model, tokenizer, test)
    timings["eval_after"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    torch.set_num_threads(threads)
    logger.info("after VASD: %s", after.summary())

    recovery = after.p_sharded / before.p_full if before.p_full else 0.0
    eps = 1e-9  # scores are counts / n: compare without float noise (1.0 - 0.02 vs 196 / 200)
    checks = {
        "gap_before": before.p_sharded < 0.8 * before.p_full,
        "concat_like_full_before": abs(before.p_concat - before.p_full) <= 0.05 + eps,
        "recovery_at_least_0.92": recovery >= 0.92 - eps,
        "full_kept": after.p_full >= before.p_full - 0.02 - eps,
        "concat_kept": after.p_concat >= before.p_concat - 0.02 - eps,
    }
    return {
        "before": before.summary(),
        "after": after.summary(),
        "recovery": recovery,
        "checks": checks,
        "passed": all(checks.values()),
        "timings_s": timings,
        "settings": {k: v for k, v in asdict(settings).items() if k != "base_fields"},
        "base_dir": base_dir,
        "log_history": trainer.state.log_history,
    }

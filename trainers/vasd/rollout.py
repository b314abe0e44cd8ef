"""VASD's training-time generation: one path for shard replies, on-policy responses and teacher samples.

A VASD step generates three kinds of text. For rows given as `shards`, the current student answers every shard but
the last itself (one call per shard index: all the rows' replies to shard `k` in one batch). With probability
`lmbda` the student samples the response in the student view (on-policy). Without a dataset completion, or in
`mode="sequence"`, the teacher samples it in the teacher view. All of them go through `Rollouts.generate`:

* transformers (default): `fic.generation.decode`, the probe's decode loop: one prefill for the batch, finished rows
  dropped from the KV cache, a row ends at the template's end of turn (the tokenizer's EOS and the single-token
  strings of `fic.chat.turn_end_strings`; the end token is kept in the response ids, as a dataset completion gets
  it appended), sampling with the trainer's `temperature`, `top_k`, `top_p`, `min_p`. Settings the loop does not
  implement (`repetition_penalty != 1`, `generation_kwargs`) send the call to `model.generate` instead.
  The shard turns and the on-policy responses continue one KV cache (`decode.decode_kept`): each turn's prompt is
  the previous one plus the reply and the next shard, re-rendered and re-tokenized as before, and only the part of
  it the cache does not already hold is fed (one chunk), instead of prefilling the whole conversation again every
  turn; rows that have finished the turn ride along under a zero attention mask so that they keep their cache. An
  on-policy response continues its row's last shard turn the same way (a row whose episode ended before the
  batch's last shard turn is fed whole: the cache keeps the rows of the last call only). The cache lives from the
  first shard turn to the end of `responses` (one generation batch).
  With LoRA the student decodes with its adapters folded into the weights (`FoldedLora`): `W + scale * B @ A` in
  new tensors, built once per generation batch (again if a weight changed meanwhile), the LoRA wrappers replaced by
  their base layers for the call so the forward is the plain transformers model, and the original modules and
  weight tensors put back untouched afterwards (no merge/unmerge rounding). It skips the adapters' extra matrix
  products and modules at every decode step, for one extra copy of the adapted weights during the generation
  batch. Not under ZeRO-3 or FSDP (sharded weights), nor for adapter types other than LoRA linears.
* `use_vllm: true`: TRL's vLLM path (`_generate_single_turn`, colocate or server, weights synced once per step), for
  everything the student writes; the rollout temperature and length are set on TRL's `VLLMGeneration` for the call
  and restored after it. A `base` or `ema` teacher is not the weights vLLM holds: its samples stay on transformers.

Each call runs inside TRL's `unwrap_model_for_generation` (ZeRO-3 weights gathered unless
`ds3_gather_for_generation=False`; gradient checkpointing off for the call and back on with the trainer's own
`gradient_checkpointing_kwargs`), FSDP1's `summon_full_params(recurse=False)` as TRL does, and the teacher context
(adapter off) for teacher samples; the model decodes in eval mode and gets its train/eval mode back.

Collectives. Under ZeRO-3 entering the generation context gathers the weights, under FSDP each forward gathers
them, and TRL's vLLM server path gathers prompts: every process has to make the same calls with the same number of
prompts. Before each call the processes agree on the largest prompt count (one small gather, with several
processes only); a process with fewer prompts fills up with one-token dummy prompts and drops their outputs, and no
process skips a call another one makes. The shard loop runs to the largest shard count over all processes. When
each forward is a collective (FSDP, ZeRO-3 without gathered weights) the decode loop also runs in lockstep
(`decode(synced=...)`).

The time spent here is added up per mode (`seconds`) and logged by the trainer as `vasd/rollout_s`.
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
from accelerate.utils import is_peft_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import ModulesToSaveWrapper
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import pad

from fic.chat import ChatTemplateError, sharded_view, turn_end_strings
from fic.generation.decode import Kept, decode, decode_kept, sampling_pick

logger = logging.getLogger(__name__)

BACKENDS = ("fast", "generate")


class Rollouts:
    """The generation calls of one `VASDTrainer` (see the module docstring).

    `backend` is `"fast"` (default: the decode loop on transformers, TRL's vLLM path with `use_vllm`) or
    `"generate"` (`model.generate` and TRL's `_generate_single_turn`, the path before this module; kept for the
    `vasd_onpolicy` benchmark and for comparison).
    """

    def __init__(self, trainer, backend: str = "fast"):
        if backend not in BACKENDS:
            raise ValueError(f"backend: unknown rollout backend {backend!r}; valid: {', '.join(BACKENDS)}")
        self.trainer = trainer
        self.backend = backend
        self.seconds = {"train": 0.0, "eval": 0.0}
        self._end_ids: set[int] | None = None
        self._warned_fallback = False
        self.merge_lora = True  # see FoldedLora
        self._folded: FoldedLora | None = None
        self._kept: Kept | None = None  # the student's KV cache after the last shard turn (see student_views)
        self._reuse = False  # see _continuing

    # ------------------------------------------------------------------ what a step asks for

    def student_views(self, shards_list: list[list[str]]) -> list[list[dict]]:
        """Student views for rows given as shards: the current student answers every shard but the last.

        Episodes are played in lockstep, one batched call per shard index (greedy at `rollout_temperature=0`, as the
        Lost-in-Conversation evaluation decodes); on the decode loop each call continues the KV cache of the one
        before, which `responses` continues too (see the module docstring). Returns `sharded_view(shards, replies)`
        per row. With several processes every one of them makes as many calls as the process with the most shards,
        even with no rows.
        """
        for shards in shards_list:
            if not isinstance(shards, list) or not shards or not all(isinstance(x, str) and x for x in shards):
                raise ValueError(f"shards: expected a non-empty list of non-empty strings, got {shards!r:.80}")
        t = self.trainer
        args = t.args
        max_new_tokens = args.rollout_max_new_tokens or t.max_completion_length
        turns = self._global_max(max((len(s) for s in shards_list), default=1) - 1)
        replies: list[list[str]] = [[] for _ in shards_list]
        self._kept = None
        for turn in range(turns):
            active = [i for i, s in enumerate(shards_list) if turn < len(s) - 1]
            convos = [sharded_view(shards_list[i][: turn + 1], replies[i]) for i in active]
            prompt_ids = [list(ids) for ids in t._tokenize_prompts(convos)[0]] if convos else []
            with self._continuing(True):
                outputs = self.generate(
                    prompt_ids, as_teacher=False, temperature=args.rollout_temperature,
                    max_new_tokens=max_new_tokens, greedy_override=True,
                )  # fmt: skip
            texts = t._tokenizer.batch_decode(outputs, skip_special_tokens=True)
            for i, text in zip(active, texts):
                replies[i].append(text.strip() or "...")
        return [sharded_view(shards, replies[i]) for i, shards in enumerate(shards_list)]

    def responses(
        self, student_ids: list[list[int]], teacher_ids: list[list[int]], sources: list[str]
    ) -> list[list[int] | None]:
        """Sampled responses: `student` rows in the student view, `teacher` rows in the teacher view; None elsewhere.

        One call for the student rows and one for the teacher rows, made by every process whenever any process has
        such rows. It is a generation batch's last call: what was kept for the batch's calls is released after it."""
        t = self.trainer
        out: list[list[int] | None] = [None] * len(sources)
        try:
            for source, prompts in (("student", student_ids), ("teacher", teacher_ids)):
                idx = [i for i, s in enumerate(sources) if s == source]
                with self._continuing(source == "student"):
                    ids = self.generate(
                        [prompts[i] for i in idx], as_teacher=source == "teacher", temperature=t.temperature,
                        max_new_tokens=t.max_completion_length,
                    )  # fmt: skip
                for i, completion in zip(idx, ids):
                    out[i] = list(completion)
        finally:
            self.release()  # the last generation call of a batch: the weights change before the next one
        return out

    # ------------------------------------------------------------------ the one call

    def generate(
        self,
        prompt_ids: list[list[int]],
        *,
        as_teacher: bool,
        temperature: float,
        max_new_tokens: int | None,
        greedy_override: bool = False,
    ) -> list[list[int]]:
        """One response (token ids, the end token included) per prompt, by the student or the teacher.

        `greedy_override`: the call has settings of its own (the shard replies: `rollout_temperature`,
        `rollout_max_new_tokens`) rather than the trainer's on-policy ones. Inside `_continuing(True)` (the shard
        turns and the on-policy responses; student calls of the decode loop only) it continues from the KV cache the
        previous such call kept, where a prompt extends a row of it (`fic.generation.decode.decode_kept`), and keeps
        this call's cache for the next one. With several processes, every process must call this the same number of
        times (see the module docstring); it returns `[]` without
        generating only when no process has a prompt.
        """
        t = self.trainer
        mode = "train" if t.model.training else "eval"
        count = self._global_max(len(prompt_ids))
        if count == 0:
            return []
        local = len(prompt_ids)
        dummy = [[self._pad_id()]]
        start = time.perf_counter()
        try:
            if t.use_vllm and (not as_teacher or t.args.teacher_mode == "live"):
                # TRL's server path slices the gathered completions by process: equal counts on every process
                padded = list(prompt_ids) + dummy * (count - local)
                return self._vllm(padded, temperature, max_new_tokens, greedy_override)[:local]
            padded = list(prompt_ids) or dummy  # a process without prompts still joins the call
            if self.backend == "generate" or self._needs_generate():
                return self._hf_generate(padded, as_teacher, temperature, max_new_tokens, greedy_override)[:local]
            return self._fast(padded, as_teacher, temperature, max_new_tokens, self._reuse and not as_teacher)[:local]
        finally:
            self.seconds[mode] += time.perf_counter() - start

    def take_seconds(self, mode: str) -> float:
        """Seconds spent generating in `mode` since the last call."""
        seconds, self.seconds[mode] = self.seconds[mode], 0.0
        return seconds

    # ------------------------------------------------------------------ backends

    def _fast(self, prompt_ids, as_teacher, temperature, max_new_tokens, reuse=False) -> list[list[int]]:
        t = self.trainer
        if temperature:
            pick = sampling_pick(temperature, t.top_p, t.top_k, t.min_p)
        else:
            pick = sampling_pick(0.0)
        kw = dict(
            max_new_tokens=max_new_tokens or t.max_completion_length, end_ids=self.end_ids(), pad_id=self._pad_id(),
            pick=pick, keep_end=True, synced=self._synced(),
        )  # fmt: skip
        with (
            self._generation_model(as_teacher) as unwrapped,
            self._merged(unwrapped, as_teacher) as model,
            _cpu_threads(t.args.rollout_cpu_threads, t.accelerator.device),
        ):
            if reuse:
                kept, self._kept = self._kept, None  # consumed by the call (its cache is reordered in place)
                rows = _matching_rows(kept, prompt_ids) if kept is not None else None
                outputs, self._kept = decode_kept(model, prompt_ids, kept=kept, rows=rows, **kw)
                return outputs
            samples = decode(model, prompt_ids, **kw)
        return [rows[0] for rows in samples]

    def _hf_generate(self, prompt_ids, as_teacher, temperature, max_new_tokens, greedy_override) -> list[list[int]]:
        """`model.generate`, as VASD generated before the decode loop (and TRL's own path for on-policy samples)."""
        t = self.trainer
        if not greedy_override and not as_teacher:
            return t._generate_single_turn(prompt_ids, None, {})
        config = t.generation_config
        if greedy_override:
            config = copy.deepcopy(config)
            config.max_new_tokens = max_new_tokens
            if temperature == 0:
                config.do_sample, config.temperature, config.top_p, config.top_k, config.min_p = (
                    False, None, None, None, None,
                )  # fmt: skip
            else:
                config.do_sample, config.temperature = True, temperature
        device = t.accelerator.device
        tensors = [torch.tensor(ids) for ids in prompt_ids]
        input_ids = pad(tensors, padding_value=self._pad_id(), padding_side="left").to(device)
        attention_mask = pad([torch.ones_like(x) for x in tensors], padding_value=0, padding_side="left").to(device)
        with self._generation_model(as_teacher, eval_mode=False) as model:
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        completions = []
        eos = set(t.eos_token_ids)
        for row in out[:, input_ids.size(1) :].tolist():
            cut = next((i + 1 for i, tok in enumerate(row) if tok in eos), len(row))
            completions.append(row[:cut])
        return completions

    def _vllm(self, prompt_ids, temperature, max_new_tokens, greedy_override) -> list[list[int]]:
        """TRL's vLLM path, with this call's temperature and length set on its `VLLMGeneration` meanwhile."""
        t = self.trainer
        if not greedy_override:
            return t._generate_single_turn(prompt_ids, None, {})
        gen = t.vllm_generation
        saved = (gen.temperature, gen.max_completion_length)
        gen.temperature, gen.max_completion_length = temperature, max_new_tokens or t.max_completion_length
        try:
            return t._generate_single_turn(prompt_ids, None, {})
        finally:
            gen.temperature, gen.max_completion_length = saved

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _generation_model(self, as_teacher: bool, eval_mode: bool = True):
        """The unwrapped student (or teacher) ready to generate; everything is put back on exit."""
        t = self.trainer
        target = t.model_wrapped if (t.teacher_is_student or not as_teacher) else t.teacher_model
        with (
            unwrap_model_for_generation(
                target,
                t.accelerator,
                gather_deepspeed3_params=t.args.ds3_gather_for_generation,
                generation_kwargs=t.generation_kwargs,
                gradient_checkpointing_kwargs=t.args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            torch.no_grad(),
            t._dist.summon_full_params(target, recurse=False),
            t.teacher_context() if as_teacher else nullcontext(),
        ):
            was_training = unwrapped.training
            if eval_mode:
                unwrapped.eval()  # no dropout while writing
            try:
                yield unwrapped
            finally:
                unwrapped.train(was_training)

    def _merged(self, model, as_teacher: bool):
        """The model to decode with: the student with its LoRA folded in (`FoldedLora`) where that applies."""
        t = self.trainer
        if as_teacher or not self.merge_lora or t._dist.is_zero3 or t._dist.is_fsdp:
            return nullcontext(model)
        if self._folded is None or self._folded.model is not model:
            self._folded = FoldedLora(model)
        return self._folded.active() if self._folded.sites else nullcontext(model)

    @contextmanager
    def _continuing(self, on: bool):
        """Calls made inside continue the kept KV cache (a flag, not an argument of `generate`, whose signature
        stays what stand-ins of it, e.g. in the multi-process tests, implement)."""
        saved, self._reuse = self._reuse, on
        try:
            yield
        finally:
            self._reuse = saved

    def release(self) -> None:
        """Free what is kept between the calls of one generation batch (folded LoRA weights, the KV cache)."""
        self._kept = None
        if self._folded is not None:
            self._folded.release()

    def end_ids(self) -> set[int]:
        """Tokens that end a response: the trainer's EOS ids and the template's single-token turn ends."""
        if self._end_ids is None:
            t = self.trainer
            ids = {int(i) for i in t.eos_token_ids if i is not None}
            try:
                ends = turn_end_strings(t._tokenizer, role="assistant")
            except ChatTemplateError as err:
                logger.warning("rollouts stop at EOS only: %s", err)
                ends = []
            for end in ends:
                tok = t._tokenizer(end, add_special_tokens=False)["input_ids"]
                if len(tok) == 1:
                    ids.add(int(tok[0]))
            self._end_ids = ids
        return self._end_ids

    def _pad_id(self) -> int:
        t = self.trainer
        pad_id = t._tokenizer.pad_token_id
        return pad_id if pad_id is not None else int(t.eos_token_ids[0])

    def _needs_generate(self) -> bool:
        """Sampling settings the decode loop does not implement go to `model.generate`."""
        t = self.trainer
        reasons = []
        if t.repetition_penalty not in (None, 1.0):
            reasons.append(f"repetition_penalty={t.repetition_penalty}")
        if t.args.generation_kwargs:
            reasons.append(f"generation_kwargs={t.args.generation_kwargs}")
        if reasons and not self._warned_fallback:
            logger.warning("VASD rollouts use model.generate (slower) because of %s", ", ".join(reasons))
            self._warned_fallback = True
        return bool(reasons)

    def _synced(self):
        """The lockstep callback when each forward is a collective (FSDP, ZeRO-3 without gathered weights)."""
        t = self.trainer
        if t.accelerator.num_processes == 1:
            return None
        if not (t._dist.is_fsdp or (t._dist.is_zero3 and not t.args.ds3_gather_for_generation)):
            return None
        return lambda more: self._global_max(int(more)) > 0

    def _global_max(self, value: int) -> int:
        t = self.trainer
        if t.accelerator.num_processes == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=t.accelerator.device)
        return int(t.accelerator.gather(tensor).max().item())


@contextmanager
def _cpu_threads(threads: int | None, device: torch.device):
    """torch's intra-op thread count set to `threads` for the block, on CPU only (`None`: unchanged)."""
    if threads is None or torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _matching_rows(kept: Kept, prompts: list[list[int]]) -> list[int | None]:
    """For each prompt, the kept row whose cached ids share the longest prefix with it (None when none shares any)."""
    cached = [np.asarray(ids, dtype=np.int64) for ids in kept.tokens]
    rows: list[int | None] = []
    for ids in prompts:
        prompt = np.asarray(ids, dtype=np.int64)
        best, best_len = None, 0
        for r, held in enumerate(cached):
            n = min(len(held), len(prompt))
            differ = np.flatnonzero(held[:n] != prompt[:n])
            length = int(differ[0]) if len(differ) else n
            if length > best_len:
                best, best_len = r, length
        rows.append(best)
    return rows


def _lora_sites(model) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """`(parent, attribute, LoRA linear)` of every adapter layer of a PEFT model; `[]` when it cannot be folded.

    Foldable: every adapter layer is an unmerged LoRA `Linear` without DoRA or a LoRA bias, and no `modules_to_save`
    (a trained full copy would be switched off with the adapters)."""
    if not is_peft_model(model):
        return []
    sites = []
    for parent in model.modules():
        for attr, child in parent.named_children():
            if isinstance(child, ModulesToSaveWrapper):
                return []
            if not isinstance(child, BaseTunerLayer):
                continue
            active = child.active_adapters
            if (
                not isinstance(child, LoraLinear)
                or child.merged
                or any(child.use_dora.get(a, False) for a in active)
                or any(getattr(child, "lora_bias", {}).get(a, False) for a in active)
            ):
                return []
            sites.append((parent, attr, child))
    return sites


class FoldedLora:
    """A PEFT model's LoRA linears folded into plain weights while the student decodes.

    `fold()` builds `W + scale * B @ A` (`get_delta_weight` of the active adapters) for every adapted linear, in new
    tensors. `active()` puts them in place of the base weights and each base layer in place of its LoRA wrapper, and
    yields the plain transformers model under the PEFT model: the decode forward runs no adapter code and no PEFT
    forward. On exit the wrappers and the original weight tensors are put back as they were (bit for bit: they are
    never written). The folded tensors are kept for the next call until `release()` (the end of a generation batch),
    so a step folds once, not once per call; a fold is rebuilt when any parameter it was built from has changed
    since (version counters and storage of the base weights and adapters, and the active adapters).
    """

    def __init__(self, model):
        self.model = model
        self.sites = _lora_sites(model)
        self.weights: list[torch.Tensor] | None = None
        self._built_from = None

    def _state(self):
        return tuple(
            (tuple(m.active_adapters), tuple((p._version, p.data_ptr()) for p in m.parameters()))
            for _, _, m in self.sites
        )

    def fold(self) -> None:
        state = self._state()
        if self.weights is not None and self._built_from == state:
            return
        weights = []
        with torch.no_grad():
            for _, _, m in self.sites:
                base = m.get_base_layer()
                adapters = [a for a in m.active_adapters if a in m.lora_A]
                weight = base.weight.data
                if adapters:
                    weight = weight + sum(m.get_delta_weight(a) for a in adapters).to(weight.dtype)
                weights.append(weight)
        self.weights, self._built_from = weights, state

    def release(self) -> None:
        self.weights, self._built_from = None, None

    @contextmanager
    def active(self):
        self.fold()
        swapped = []
        try:
            for (parent, attr, m), weight in zip(self.sites, self.weights):
                base = m.get_base_layer()
                swapped.append((parent, attr, m, base, base.weight.data))
                base.weight.data = weight
                setattr(parent, attr, base)
            yield self.model.get_base_model()
        finally:
            for parent, attr, m, base, data in reversed(swapped):
                setattr(parent, attr, m)
                base.weight.data = data

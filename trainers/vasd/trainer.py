"""View-Asymmetric Self-Distillation (VASD), on TRL's `DistillationTrainer`.

One task, two views. The **teacher view** (`teacher_prompt`) is the fully specified single-turn prompt; the
**student view** (`prompt`) is the same information delivered over several user turns (Lost-in-Conversation style).
The same model is both: its next-token distributions on a response under the teacher view are distilled into the
student view, so what the model can do when it is told everything at once carries over to conversations where the
information arrives in pieces. There is no stronger external teacher.

For every example of a batch:

1. Choose the student view: the multi-turn `prompt`, or, for rows given as `shards`, the conversation the current
   student plays itself (it answers every shard but the last, greedily, as the Lost-in-Conversation evaluation
   does; with earlier replies fixed in advance the trained model meets different replies of its own at test time),
   or, with probability `single_turn_mix`, the teacher's own single-turn prompt (replay: the loss then anchors the
   single-turn behaviour to the teacher, which keeps it from eroding while the multi-turn behaviour moves).
2. Choose the response: with probability `lmbda` the student samples it in the student view (on-policy); otherwise
   the dataset's `completion`, or, without one, a sample of the teacher in the teacher view. Every generation of a
   step (shard replies, on-policy and teacher samples) goes through `fic.trainers.vasd.rollout` (fic's decode loop
   on transformers, TRL's vLLM path with `use_vllm`; the same calls on every process).
3. Build both sequences by concatenating token ids: `student_prompt_ids + response_ids` and
   `teacher_prompt_ids + response_ids`, the same response ids in both (never re-tokenised joined text). Prompts
   are left-padded and responses right-padded, so the last `C` positions of both sequences predict the same response
   tokens however much the prompts differ in length.
4. Loss (`mode="token"`): the token-level generalised JSD (`beta`: 0 forward KL, 1 reverse KL) between the student's
   and the teacher's distributions at `temperature`, on the response tokens, computed from hidden states and the
   `lm_head` in chunks (`fic.losses.chunked_generalized_jsd`) and normalised by the response tokens of the whole
   accumulated batch. `mode="sequence"` is the sequence-level variant: the teacher samples responses in the teacher
   view (optionally kept only when `answer_checker` accepts them, `filter_correct`) and the student is trained on
   them in the student view with the negative log-likelihood.

Teachers (`teacher_mode`): `base` (default) is the frozen initial model; with LoRA it is the same model with the
adapter disabled for the teacher pass, so no second copy of the weights exists; without LoRA it is a frozen copy.
`live` is the current weights without gradient (on the tiny demo model it collapsed to constant answers every time
it was tried, hence not the default). `ema` is an exponential moving average of the student (a second LoRA adapter
under pure-LoRA training, a frozen copy otherwise), updated every `teacher_sync_steps` with `teacher_update_rate`;
TRL's SDFT callbacks do the averaging.

Prompts are never cut silently: a prompt longer than `max_prompt_length` / `max_teacher_prompt_length` is an error
unless `prompt_truncation="left"` is set explicitly (the oldest tokens are then dropped and counted in
`vasd/truncated_prompts`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from accelerate.utils import gather_object, is_peft_model
from torch.distributed.tensor import DTensor
from transformers.integrations import is_deepspeed_zero3_enabled
from trl import DistillationTrainer
from trl.experimental.sdft.teacher_sync import (
    PEFTAdapterEMACallback,
    SyncTeacherModelCallback,
    is_pure_lora_training,
)
from trl.models import prepare_deepspeed
from trl.trainer.utils import create_model_from_path, get_config_model_id, pad, use_adapter

from fic.chat import turn_end_strings
from fic.losses import chunked_generalized_jsd, chunked_nll
from fic.trainers.vasd.config import VASDConfig
from fic.trainers.vasd.rollout import Rollouts
from fic.trainers.vllm_sync import fit_vllm_sync

logger = logging.getLogger(__name__)


def _logit_scale(config) -> float:
    """The logit multiplier a model applies before the softmax (1.0 for most; as TRL's DistillationTrainer reads it)."""
    for name in ("logit_scale", "output_multiplier", "lm_head_multiplier"):
        value = getattr(config, name, None)
        if value is not None:
            return float(value)
    scaling = getattr(config, "logits_scaling", None)
    if scaling is not None:
        return float(scaling) if config.model_type == "hyperclovax" else 1.0 / float(scaling)
    return 1.0


def _whole_head(head, frozen: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The `lm_head` weight and bias as the chunked divergence should receive them, once per micro-batch.

    FSDP2: a `DTensor` is made full with `full_tensor()` once (as TRL's distillation loss does; its backward reduces
    the gradient back to the shards), not once per kernel call or per view. DeepSpeed ZeRO-3: the student's head is
    passed as the parameter itself (never a `.detach()`, which would be its empty local shard without the `ds_status`
    TRL's kernel reads); inside the engine's forward DeepSpeed has gathered it. A `frozen` teacher's head lives in
    another module, outside whose forward it is only a shard, and the kernel would gather it once per call (the
    calls per rank follow its token count, so the ranks' gathers would not match): it is gathered here, once on
    every rank, and copied, the copy marked available so the kernel leaves it be, in the forward and the backward.
    """
    weight, bias = head.weight, head.bias
    if isinstance(weight, DTensor):
        return weight.full_tensor(), (bias.full_tensor() if isinstance(bias, DTensor) else bias)
    if not (frozen and hasattr(weight, "ds_status")):
        return weight, bias
    import deepspeed  # optional: deepspeed (the `deepspeed` extra), reached only under ZeRO-3
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus  # optional: deepspeed

    with deepspeed.zero.GatheredParameters([t for t in (weight, bias) if t is not None], modifier_rank=None):
        copies = [None if t is None else t.detach().clone() for t in (weight, bias)]
    for t in copies:
        if t is not None:
            t.ds_status = ZeroParamStatus.AVAILABLE
    return copies[0], copies[1]


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and all(isinstance(m, dict) for m in completion):
        roles = {m.get("role") for m in completion}
        if roles != {"assistant"}:
            raise ValueError(f"completion: expected assistant messages only, got roles {sorted(map(str, roles))}")
        return "".join(m["content"] for m in completion)
    raise ValueError(f"completion: expected a string or a list of assistant messages, got {completion!r:.80}")


class VASDTrainer(DistillationTrainer):
    """Self-distillation from the single-turn view (`teacher_prompt`) into the multi-turn view (`prompt`).

    Args:
        model: the model to train (hub id, local path, `PreTrainedModel` or `PeftModel`); it is also the teacher.
        args (`VASDConfig`): the configuration.
        train_dataset / eval_dataset: datasets with `prompt` (student view, conversational messages) or `shards`
            (a list of user turns: the student view is then played by the current student, which answers every
            shard but the last, see `rollout_student_views`), `teacher_prompt` (teacher view, conversational
            messages) and optionally `completion` (a string or assistant messages).
        processing_class: the tokenizer (loaded from the model when `None`).
        callbacks, optimizers: as for `transformers.Trainer`.
        peft_config: a `peft.LoraConfig` to train LoRA adapters (then the `base` teacher costs no extra weights).
        answer_checker: `callable(example: dict, completion_text: str) -> bool`, required by `filter_correct`.

    The public helpers `build_views` (token ids of both views for given examples and responses) and
    `teacher_context` (the context in which a forward of `self.model` is the teacher) are what the tests and the
    tiny pipeline use.
    """

    _tag_names = ["trl", "distillation", "fic", "vasd"]
    _name = "VASD"

    def __init__(
        self,
        model,
        args: VASDConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        answer_checker: Callable[[dict, str], bool] | None = None,
    ):
        if args is None:
            args = VASDConfig(output_dir="vasd-output")
        if not isinstance(args, VASDConfig):
            raise TypeError(f"args: expected a VASDConfig, got {type(args).__name__}")
        if args.filter_correct and answer_checker is None:
            raise ValueError("answer_checker: filter_correct=True needs an answer_checker(example, text) -> bool")
        for name, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            self._check_columns(name, dataset)
        self.answer_checker = answer_checker
        # A frozen copy is taken before TRL wraps anything (deep-copying a prepared model is not safe).
        needs_copy = args.teacher_mode in ("base", "ema") and peft_config is None and not is_peft_model(model)
        # Under ZeRO-3 the loaded model holds only this rank's (empty-looking) partitions and a deep copy of it is a
        # model of empty tensors: the frozen teacher is then built from the model's path (`_setup_teacher`).
        copyable = needs_copy and not isinstance(model, str) and not is_deepspeed_zero3_enabled()
        frozen = copy.deepcopy(model) if copyable else None
        super().__init__(
            model=model,
            teacher_model=None,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )
        fit_vllm_sync(self)  # the student's weights into TRL's vLLM engine (names, CPU engines)
        self._end_of_turn_ids = None
        self._setup_teacher(frozen if needs_copy else None, needs_copy)
        self._loss_stats = None
        self._rollouts = Rollouts(self)  # every generation call of a step (fic.trainers.vasd.rollout)

    @staticmethod
    def _check_columns(name: str, dataset) -> None:
        if dataset is None:
            return
        datasets = dataset.values() if isinstance(dataset, dict) else [dataset]
        for ds in datasets:
            columns = getattr(ds, "column_names", None)
            if columns is None:
                continue
            missing = [c for c in ("teacher_prompt",) if c not in columns]
            if "prompt" not in columns and "shards" not in columns:
                missing.insert(0, "prompt")
            if missing:
                raise ValueError(
                    f"{name}: missing column(s) {missing}; VASD needs `prompt` (student view, multi-turn messages) or "
                    f"`shards` (user turns the student answers itself), and `teacher_prompt` (teacher view, "
                    f"single-turn messages); found {columns}"
                )

    # ------------------------------------------------------------------ teacher

    def _setup_teacher(self, frozen, needs_copy: bool) -> None:
        """Resolve `teacher_mode` x PEFT into the teacher (see the module docstring)."""
        mode = self.args.teacher_mode
        student = self.accelerator.unwrap_model(self.model)
        self._teacher_adapter = None
        self.teacher_model = None  # None: the teacher is `self.model` under `teacher_context()`
        if mode == "live":
            return
        if is_peft_model(student):
            if mode == "base":
                return
            if not is_pure_lora_training(student):
                raise ValueError(
                    "teacher_mode: 'ema' with a PEFT model that trains more than LoRA weights is not supported; train "
                    "pure LoRA, train without PEFT, or use teacher_mode='base'"
                )
            self._teacher_adapter = "teacher"
            self.add_callback(
                PEFTAdapterEMACallback(
                    model=self.model,
                    teacher_adapter_name=self._teacher_adapter,
                    update_rate=self.args.teacher_update_rate,
                    sync_steps=self.args.teacher_sync_steps,
                    accelerator=self.accelerator,
                )
            )
            return
        if frozen is None:
            # Built from its path (as TRL's SDFT does) when the student was given as a path.
            kwargs = dict(self.args.model_init_kwargs or {})
            kwargs.setdefault("dtype", student.dtype)
            frozen = create_model_from_path(get_config_model_id(student.config), **kwargs)
        frozen.requires_grad_(False)
        frozen.eval()
        if self.is_deepspeed_enabled:
            self.teacher_model = prepare_deepspeed(frozen, self.accelerator)
        else:
            self.teacher_model = self.accelerator.prepare_model(frozen, evaluation_mode=True)
        if mode == "ema":
            self.add_callback(SyncTeacherModelCallback(teacher_model=self.teacher_model, accelerator=self.accelerator))

    @property
    def teacher_is_student(self) -> bool:
        """True when the teacher pass runs `self.model` itself (live, base+LoRA, EMA adapter): no second copy."""
        return self.teacher_model is None

    @contextmanager
    def teacher_context(self):
        """Inside it, a forward of `self.model` computes the teacher (adapter off / EMA adapter on), in eval mode."""
        if not self.teacher_is_student:
            yield
            return
        student = self.accelerator.unwrap_model(self.model)
        if self.args.teacher_mode == "base" and is_peft_model(student):
            adapter = use_adapter(student, adapter_name=None)
        elif self._teacher_adapter is not None:
            adapter = use_adapter(student, adapter_name=self._teacher_adapter)
        else:
            adapter = nullcontext()
        was_training = student.training
        student.train(False)  # no dropout in the teacher pass
        try:
            with adapter:
                yield
        finally:
            student.train(was_training)

    # ------------------------------------------------------------------ data

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["prompt", "shards", "teacher_prompt", "completion"]

    def _end_of_turn(self) -> list[int]:
        """Token ids that close an assistant turn under this template (appended to dataset completions)."""
        if self._end_of_turn_ids is None:
            end = turn_end_strings(self._tokenizer, role="assistant")[0]
            self._end_of_turn_ids = self._tokenizer(end, add_special_tokens=False)["input_ids"]
        return self._end_of_turn_ids

    def _fit(self, ids_list: list[list[int]], limit: int | None, field_name: str, counter: list[int]):
        if limit is None:
            return ids_list
        out = []
        for i, ids in enumerate(ids_list):
            if len(ids) <= limit:
                out.append(ids)
                continue
            if self.args.prompt_truncation == "error":
                raise ValueError(
                    f"{field_name}: a prompt of the batch (position {i}) has {len(ids)} tokens, more than "
                    f"{field_name}={limit}. Raise {field_name}, shorten the data, or set prompt_truncation='left' to "
                    "drop the oldest tokens (the teacher may then lose task information)"
                )
            counter[0] += 1
            out.append(ids[-limit:])
        return out

    def _tokenize_views(self, student_prompts: list, teacher_prompts: list):
        student_ids = self._tokenize_prompts(student_prompts)[0]
        teacher_ids = self._tokenize_prompts(teacher_prompts)[0]
        student_ids = [list(ids) for ids in student_ids]
        teacher_ids = [list(ids) for ids in teacher_ids]
        truncated = [0]
        student_ids = self._fit(student_ids, self.args.max_prompt_length, "max_prompt_length", truncated)
        teacher_ids = self._fit(
            teacher_ids, self.args.max_teacher_prompt_length, "max_teacher_prompt_length", truncated
        )
        return student_ids, teacher_ids, truncated[0]

    def rollout_student_views(self, shards_list: list[list[str]]) -> list[list[dict]]:
        """Student views for rows given as shards: the current student answers every shard but the last.

        Episodes are played in lockstep, one batched generation per shard index (greedy at `rollout_temperature=0`),
        so the student is trained in the conversations it produces itself, as the Lost-in-Conversation evaluation
        plays them. Returns `sharded_view(shards, replies)` per row (ends with the last user shard). See
        `fic.trainers.vasd.rollout` (with several processes every one of them calls this, even with no rows).
        """
        return self._rollouts.student_views(shards_list)

    def build_views(
        self, examples: list[dict], completion_ids: list[list[int]], single_turn: list[bool] | None = None
    ):
        """Token ids of both views for `examples` and the given responses, padded and aligned.

        Returns a dict of tensors: `prompt_ids`/`prompt_mask` (student view, left-padded), `teacher_prompt_ids`/
        `teacher_prompt_mask` (teacher view, left-padded), `completion_ids`/`completion_mask` (right-padded), the
        `loss_mask` (the response tokens that carry the loss), `single_turn` (1 where the student view is the replayed
        teacher prompt) and the number of prompts truncated. The response ids
        are the same in both views.
        """
        single_turn = single_turn or [False] * len(examples)
        student_prompts = [ex["teacher_prompt"] if s else ex["prompt"] for ex, s in zip(examples, single_turn)]
        teacher_prompts = [ex["teacher_prompt"] for ex in examples]
        student_ids, teacher_ids, truncated = self._tokenize_views(student_prompts, teacher_prompts)
        batch = self._pad_views(student_ids, teacher_ids, completion_ids)
        flags = torch.tensor(single_turn, dtype=torch.long, device=batch["completion_mask"].device)
        return batch | {"loss_mask": batch["completion_mask"].clone(), "single_turn": flags, "truncated": truncated}

    def _pad_views(self, student_ids, teacher_ids, completion_ids) -> dict[str, torch.Tensor]:
        device = self.accelerator.device
        pad_id = self._tokenizer.pad_token_id
        multiple = self.pad_to_multiple_of

        def left(seqs):
            tensors = [torch.tensor(s, dtype=torch.long) for s in seqs]
            ids = pad(tensors, padding_value=pad_id, padding_side="left", pad_to_multiple_of=multiple)
            mask = pad([torch.ones_like(t) for t in tensors], padding_value=0, padding_side="left",
                       pad_to_multiple_of=multiple)  # fmt: skip
            return ids.to(device), mask.to(device)

        prompt_ids, prompt_mask = left(student_ids)
        teacher_prompt_ids, teacher_prompt_mask = left(teacher_ids)
        # An empty response still needs one column so the tensors keep their shape; it is masked out.
        tensors = [torch.tensor(c if c else [pad_id], dtype=torch.long) for c in completion_ids]
        masks = [torch.tensor([1] * len(c) if c else [0], dtype=torch.long) for c in completion_ids]
        completion = pad(tensors, padding_value=pad_id, padding_side="right", pad_to_multiple_of=multiple)
        completion_mask = pad(masks, padding_value=0, padding_side="right", pad_to_multiple_of=multiple)
        return {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "teacher_prompt_ids": teacher_prompt_ids,
            "teacher_prompt_mask": teacher_prompt_mask,
            "completion_ids": completion.to(device),
            "completion_mask": completion_mask.to(device),
        }

    def row_draws(self, example: dict) -> tuple[float, float]:
        """The two uniform draws of a row at the current optimizer step: (single-turn replay, on-policy response).

        A function of the seed, the global step and the row's content, not of a per-process random stream, so the
        draws are the same whichever rank holds the row and however many processes there are (a two-process run
        trains on the batches of a one-process run), and a run resumed from a checkpoint draws what the uninterrupted
        run drew. Two rows with identical content in one batch get the same draws.
        """
        key = json.dumps([self.args.seed, self.state.global_step, example], sort_keys=True, default=str)
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))
        return rng.random(), rng.random()

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Choose views and responses for a generation batch and return the padded, aligned tensors."""
        args = self.args
        mode = "train" if self.model.training else "eval"
        n = len(inputs)
        mix = args.single_turn_mix if mode == "train" else 0.0
        draws = [self.row_draws(ex) for ex in inputs]
        single_turn = [d[0] < mix for d in draws]
        student_prompts = [ex["teacher_prompt"] if s else ex.get("prompt") for ex, s in zip(inputs, single_turn)]
        rollout = [i for i in range(n) if student_prompts[i] is None]
        for i, prompt in zip(rollout, self.rollout_student_views([inputs[i]["shards"] for i in rollout])):
            student_prompts[i] = prompt
        teacher_prompts = [ex["teacher_prompt"] for ex in inputs]
        student_ids, teacher_ids, truncated = self._tokenize_views(student_prompts, teacher_prompts)

        if args.mode == "sequence":
            sources = ["teacher"] * n
        else:
            sources = []
            for ex, draw in zip(inputs, draws):
                if draw[1] < args.lmbda:
                    sources.append("student")
                elif ex.get("completion") is not None:
                    sources.append("data")
                else:
                    sources.append("teacher")

        completion_ids = self._rollouts.responses(student_ids, teacher_ids, sources)
        for i in range(n):
            if sources[i] == "data":
                text = _completion_text(inputs[i]["completion"])
                completion_ids[i] = self._tokenizer(text, add_special_tokens=False)["input_ids"] + self._end_of_turn()
        if self.max_completion_length is not None:
            completion_ids = [c[: self.max_completion_length] for c in completion_ids]

        keep = [1.0] * n
        if args.filter_correct:
            texts = self._tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            keep = [1.0 if self.answer_checker(ex, text) else 0.0 for ex, text in zip(inputs, texts)]

        batch = self._pad_views(student_ids, teacher_ids, completion_ids)
        keep_t = torch.tensor(keep, device=batch["completion_mask"].device).unsqueeze(1)
        batch["loss_mask"] = (batch["completion_mask"] * keep_t).long()
        batch["single_turn"] = torch.tensor(single_turn, dtype=torch.long, device=keep_t.device)
        batch["num_items_in_batch"] = self.accelerator.gather(batch["loss_mask"].sum()).sum()

        gather = self.accelerator.gather
        device = self.accelerator.device

        def mean(values: list[float]) -> float:
            return gather(torch.tensor(values, dtype=torch.float, device=device)).mean().item()

        if mode == "train":
            tokens = sum(len(s) + len(c) for s, c in zip(student_ids, completion_ids))
            self.state.num_input_tokens_seen += gather(torch.tensor(tokens, device=device)).sum().item()
        metrics = self._metrics[mode]
        metrics["vasd/single_turn_frac"].append(mean([float(s) for s in single_turn]))
        metrics["vasd/on_policy_frac"].append(mean([float(s == "student") for s in sources]))
        metrics["vasd/student_prompt_length"].append(mean([float(len(s)) for s in student_ids]))
        metrics["vasd/teacher_prompt_length"].append(mean([float(len(t)) for t in teacher_ids]))
        metrics["vasd/completion_length"].append(mean([float(len(c)) for c in completion_ids]))
        metrics["vasd/truncated_prompts"].append(gather(torch.tensor(float(truncated), device=device)).sum().item())
        if args.filter_correct:
            metrics["vasd/teacher_accept_rate"].append(mean(keep))
        if self.log_completions:
            self._logs["prompt"].extend(gather_object(self._tokenizer.batch_decode(student_ids)))
            self._logs["completion"].extend(
                gather_object(self._tokenizer.batch_decode(completion_ids, skip_special_tokens=True))
            )
        return batch

    # ------------------------------------------------------------------ loss

    def _compute_loss(self, unwrapped_student, inputs, num_items_in_batch):
        completion_ids = inputs["completion_ids"]
        completion_mask = inputs["completion_mask"]
        loss_mask = inputs["loss_mask"]
        logits_to_keep = completion_ids.size(1)
        student_hidden = self._get_last_hidden_state(
            unwrapped_student,
            torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], completion_mask], dim=1),
            logits_to_keep,
        )
        # whole tensors once per micro-batch, before the per-view calls (the same collectives on every rank)
        head_weight, head_bias = _whole_head(unwrapped_student.get_output_embeddings())
        config = unwrapped_student.config.get_text_config()
        softcap = getattr(config, "final_logit_softcapping", None)
        student_hidden = student_hidden.to(head_weight.device)
        loss_mask = loss_mask.to(head_weight.device)
        if self.args.mode == "sequence":
            out = chunked_nll(
                student_hidden, head_weight, completion_ids.to(head_weight.device), loss_mask,
                num_items_in_batch=num_items_in_batch, bias=head_bias, logit_scale=_logit_scale(config),
                softcap=softcap,
            )  # fmt: skip
            self._loss_stats = {"nll": out}
            return out.loss, out.entropy_sum, out.num_tokens

        teacher_ids = torch.cat([inputs["teacher_prompt_ids"], completion_ids], dim=1)
        teacher_mask = torch.cat([inputs["teacher_prompt_mask"], completion_mask], dim=1)
        if self.teacher_is_student:
            teacher_module = unwrapped_student
            with torch.no_grad(), self.teacher_context():
                teacher_hidden = self._get_last_hidden_state(teacher_module, teacher_ids, teacher_mask, logits_to_keep)
        else:
            teacher_module = self.accelerator.unwrap_model(self.teacher_model)
            with torch.no_grad():
                teacher_hidden = self._forward_redirection(
                    self.teacher_model, teacher_module, self._get_last_hidden_state,
                    teacher_module, teacher_ids, teacher_mask, logits_to_keep,
                )  # fmt: skip
        if teacher_module is unwrapped_student:
            teacher_weight, teacher_bias = head_weight, head_bias
        else:
            teacher_weight, teacher_bias = _whole_head(teacher_module.get_output_embeddings(), frozen=True)
        teacher_config = teacher_module.config.get_text_config()
        # One call per view of the student (multi-turn rows, single-turn replay rows) so each is logged on its own;
        # both are normalised by the same token count, so their sum is exactly the loss of one call.
        single = inputs["single_turn"].to(loss_mask.device).unsqueeze(1)
        masks = {"multi_turn": loss_mask * (1 - single), "single_turn": loss_mask * single}
        # a view without rows in this batch costs no kernel call (its weight-gradient buffer would be V x H)
        masks = {name: m for name, m in masks.items() if m.any()} or {"multi_turn": loss_mask}
        parts = {}
        for name, mask in masks.items():
            parts[name] = chunked_generalized_jsd(
                student_hidden,
                head_weight,
                teacher_hidden.to(head_weight.device),
                teacher_weight,
                mask,
                beta=self.beta,
                temperature=self.temperature,
                num_items_in_batch=num_items_in_batch,
                student_bias=head_bias,
                teacher_bias=teacher_bias,
                student_logit_scale=_logit_scale(config),
                teacher_logit_scale=_logit_scale(teacher_config),
                student_softcap=softcap,
                teacher_softcap=getattr(teacher_config, "final_logit_softcapping", None),
                token_chunk_size=self.args.loss_token_chunk_size,
            )
        self._loss_stats = parts
        loss = sum(part.loss for part in parts.values())
        entropy_sum = sum(part.entropy_sum for part in parts.values())
        return loss, entropy_sum, sum(part.num_tokens for part in parts.values())

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        result = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        stats, self._loss_stats = self._loss_stats, None
        if stats is not None:
            mode = "train" if self.model.training else "eval"
            # One gather of a fixed-size tensor per micro-batch, whichever views this rank's rows hold: ranks whose
            # batches differ must still make the same collectives (a per-part gather hangs a multi-process run).
            names = ["nll"] if "nll" in stats else ["multi_turn", "single_turn"]
            local = torch.zeros(2 * len(names), dtype=torch.float64, device=self.accelerator.device)
            for i, name in enumerate(names):
                if name in stats:
                    local[2 * i] = stats[name].token_sum.detach().double().to(local.device)
                    local[2 * i + 1] = stats[name].num_tokens.double().to(local.device)
            sums = self.accelerator.gather(local.unsqueeze(0)).sum(0).tolist()
            if names == ["nll"]:
                total, count = sums
                self._metrics[mode]["vasd/nll"].append(total / count if count else float("nan"))
            else:
                total, count = sums[0] + sums[2], sums[1] + sums[3]
                self._metrics[mode]["vasd/divergence"].append(total / count if count else float("nan"))
                for i, name in enumerate(names):
                    # NaN when no rank's batch has a row of this view; TRL's `log` averages over the valid values only
                    t, c = sums[2 * i], sums[2 * i + 1]
                    self._metrics[mode][f"vasd/divergence_{name}"].append(t / c if c else float("nan"))
        return result

    def training_step(self, model, inputs, num_items_in_batch):
        output = super().training_step(model, inputs, num_items_in_batch)
        if self._step % self.current_gradient_accumulation_steps == 0:
            # TRL's `step_time` (this process, the whole optimizer step, generation included) split into the seconds
            # spent generating and the rest, so a user sees where a step's time goes.
            step_time = self._metrics["train"]["step_time"][-1]
            rollout = self._rollouts.take_seconds("train")
            self._metrics["train"]["vasd/rollout_s"].append(rollout)
            self._metrics["train"]["vasd/train_s"].append(max(step_time - rollout, 0.0))
        return output

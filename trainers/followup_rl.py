"""Follow-up RL: GRPO where the policy writes the *user* turn after a context and a follow-up judge scores it.

The prompt is a raw string: the context `[system?, user, assistant]` rendered with the model's own template and
followed by the bare user header (`fic.chat.role_prefix`), with no assistant header added. TRL would tokenize a
string prompt with the tokenizer's special tokens (a second BOS on Llama-style tokenizers, whose template already
writes one); `FollowupRLTrainer` overrides only that step. The completion is the user turn, stopped by the
template's end of user turn (added to the end tokens of both generation paths, transformers and vLLM).

Rewards come from one registry (`fic.trainers.rewards.REWARDS`); `followup` asks the judge for a label and, in its
`absolute` form (`reward_form`), pays a genuine follow-up 1.0 and every failure mode the same (0.0 unless the
recipe's `penalties` say otherwise; a table under which some failure outranks a generic follow-up is refused unless
`reward_allow_ranked_failures`); `dense` pays the judge's probability of genuine, `group_relative` the turn's rank in
its group. A judge error earns `None` (TRL gives that completion no advantage and keeps it out of the group
baseline). The judge sees the turn decoded with special tokens kept, so leaked template tokens count as
`malformed_artifact`. The offline judges run in process; the LLM judge runs over HTTP and its reward is async, so TRL
awaits the requests concurrently. Every vLLM setting (`use_vllm`, `vllm_mode: colocate|server`, `vllm_server_*`) is
GRPOConfig's own and passes through unchanged; the weight sync into vLLM is TRL's, with the names and CPU engines
fixed by `fic.trainers.vllm_sync`.

`main(recipe)` also measures the genuine follow-up rate on the held-out contexts (`eval:` block) before and after
training with the `eval.judge`, and records the reward curve in `OUTPUT_DIR/eval_summary.json` (`mean_reward`
before = the first quarter of the logged steps, after = the last quarter) with the reward-hacking check of every
window of `reward_hacking_window` logged steps (`reward_hacking`: reward rising while the judge-genuine share falls,
also warned once while training; `fic.trainers.reward_hacking`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from fic import metric_names
from fic.chat import turn_end_strings
from fic.data.followups import contexts_from_records, drop_overlap
from fic.distributed import map_across_ranks
from fic.followup_eval import probe_prompts
from fic.judges import LABELS, TRAINING_JUDGE, JudgeKind, JudgeSettings
from fic.recipe import RecipeError
from fic.trainers.common import check_recipe_data, default_callbacks, prepare, train_and_measure
from fic.trainers.heldout import heldout_contexts, heldout_records, load_training_records, local_backend
from fic.trainers.plan import MethodPlan
from fic.trainers.reward_hacking import RewardHackingCallback, hacking_windows, reward_hacking_summary
from fic.trainers.rewards import REWARD_FORMS, REWARDS, RewardForm, check_penalties, check_reward_form, get_reward
from fic.trainers.vllm_sync import fit_vllm_sync

logger = logging.getLogger(__name__)


@dataclass
class FollowupRLConfig(GRPOConfig):
    r"""
    Configuration for [`FollowupRLTrainer`]: TRL's `GRPOConfig` plus the contexts, rewards and reward judge.

    Args:
        contexts (`list[str]`, defaults to `[]`):
            Datasets (`NAME:PATH` or `NAME`) whose items, with an answer, are the contexts the policy replies to.
        context_limit (`int` or `None`, defaults to `None`):
            Items read from each context dataset.
        context_answers (`str`, defaults to `"data"`):
            The answer in each training context: `data` (the data's reference) or `model` (the base model's greedy
            answer, generated once before training). Held-out contexts follow `eval.responses`.
        rewards (`list[str]`, defaults to `["followup"]`):
            Reward names from `fic.trainers.rewards.REWARDS`; weight them with `reward_weights`.
        penalties (`dict[str, float]`, defaults to `{}`):
            Reward of each failure mode under `reward_form=absolute`, e.g. `{"malformed_artifact": -1.0}`; unlisted
            ones earn 0.0, so by default every failure earns the same. Refused: a value above 0 (it pays a failure;
            a penalty is negative), and a table under which a failure mode earns more than a generic follow-up
            (`degenerate_short`, the contrast's label), unless `reward_allow_ranked_failures`.
        reward_allow_ranked_failures (`bool`, defaults to `False`):
            Accept a `penalties` table that ranks some failure mode above a generic follow-up (`degenerate_short`).
            Off by default: such a table pays the policy for failing differently (e.g. writing a new task instead
            of a generic question), with no gain in genuine follow-ups.
        reward_judge (`str`, defaults to `"strict"`):
            Judge behind the `followup` reward, a key of `fic.judges.JUDGES`: `strict` (the judge of training
            signals), `learned`, `heuristic` (offline), or `llm` / `cascade` (HTTP; these two need
            `reward_judge_base_url` and `reward_judge_model`).
        reward_judge_base_url (`str` or `None`):
            OpenAI-compatible chat endpoint of the LLM judge.
        reward_judge_model (`str` or `None`):
            Model name of the LLM judge at that endpoint.
        reward_judge_contrast (`bool`, defaults to `True`):
            Contrastive reward (`fic.judges.contrast`): a turn the judge would also call genuine after another
            item's answer earns no reward, so the policy cannot gain by generic turns ("Why is it 1?"). The share
            it removes is logged as `reward/generic_floor`. `False` rewards the judge's plain verdict.
        reward_form (`str`, defaults to `"absolute"`):
            Form of the `followup` reward: `absolute` (1.0 for genuine, `penalties[label]` for a failure),
            `dense` (the judge's probability of genuine: the classifier's P(genuine) for `learned`/`strict`, the
            confidence for an LLM judge; with the contrast, minus the same after the foil answer, so in [-1, 1]; for
            a judge that finds few genuine turns) or `group_relative` (the turn's rank in its GRPO group by
            (genuine, confidence): a genuine turn never ranks below a failure).
        reward_hacking_window (`int`, defaults to `10`):
            Logged steps per window of the reward-hacking check: a window where the reward rises while the
            judge-genuine share falls is warned once (log and wandb alert) and recorded in `eval_summary.json`.
    """

    contexts: list[str] = field(default_factory=list, metadata={"help": "Datasets whose items become contexts."})
    context_limit: int | None = field(default=None, metadata={"help": "Items read from each context dataset."})
    context_answers: Literal["data", "model"] = field(
        default="data", metadata={"help": "Answer in training contexts: data or model."}
    )
    rewards: list[str] = field(
        default_factory=lambda: ["followup"], metadata={"help": f"Rewards: any of {', '.join(REWARDS)}."}
    )
    penalties: dict[str, float] = field(default_factory=dict, metadata={"help": "Reward of each failure mode."})
    reward_judge: JudgeKind = field(default=TRAINING_JUDGE, metadata={"help": "Judge of the policy's user turns."})
    reward_judge_base_url: str | None = field(default=None, metadata={"help": "LLM judge endpoint."})
    reward_judge_model: str | None = field(default=None, metadata={"help": "LLM judge model name."})
    reward_judge_contrast: bool = field(
        default=True, metadata={"help": "Reward only turns not also genuine after another item's answer."}
    )
    reward_allow_ranked_failures: bool = field(
        default=False, metadata={"help": "Accept penalties that rank a failure mode above a generic follow-up."}
    )
    reward_form: RewardForm = field(default="absolute", metadata={"help": f"Reward form: {', '.join(REWARD_FORMS)}."})
    reward_hacking_window: int = field(
        default=10, metadata={"help": "Logged steps per window of the reward-hacking check."}
    )

    def __post_init__(self):
        unknown = [r for r in self.rewards if r not in REWARDS]
        if unknown or not self.rewards:
            raise ValueError(
                f"rewards: unknown reward(s) {unknown or self.rewards}; valid rewards are {', '.join(REWARDS)}"
            )
        self.penalties = check_penalties(self.penalties, self.reward_allow_ranked_failures)
        check_reward_form(self.reward_form)
        if self.penalties and self.reward_form != "absolute":
            raise ValueError(
                f"penalties: set, but reward_form={self.reward_form} does not use them (only absolute does); drop them"
            )
        hacking_windows([], self.reward_hacking_window)
        if self.context_answers not in ("data", "model"):
            raise ValueError(f"context_answers: unknown value {self.context_answers!r}; valid: data, model")
        self.reward_judge_settings()  # the judge's name and endpoint (`fic.judges.JudgeSettings` checks them)
        super().__post_init__()

    def reward_judge_settings(self) -> JudgeSettings:
        """The reward judge: `reward_judge`, `reward_judge_base_url`, `reward_judge_model`, `reward_judge_contrast`."""
        return JudgeSettings.of(self, "reward_judge")


def user_turn_end_ids(tokenizer) -> list[int]:
    """Token ids of the template's end-of-user-turn strings that are single tokens (plus EOS)."""
    ids = []
    for text in turn_end_strings(tokenizer, "user"):
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1 and encoded[0] not in ids:
            ids.append(encoded[0])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


class FollowupRLTrainer(GRPOTrainer):
    """`GRPOTrainer` for raw-text prompts that end in the user header; the completion is the next user turn."""

    _tag_names = ["trl", "grpo", "fic", "followup-rl"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A user turn ends where the template ends it; make those tokens stop both generation paths.
        end_ids = user_turn_end_ids(self._tokenizer)
        self.eos_token_ids = list(dict.fromkeys([*self.eos_token_ids, *end_ids]))
        if getattr(self, "generation_config", None) is not None:
            self.generation_config.eos_token_id = self.eos_token_ids
            self.generation_kwargs["eos_token_id"] = self.eos_token_ids
        vllm = getattr(self, "vllm_generation", None)
        if vllm is not None and "stop_token_ids" not in vllm.generation_kwargs:
            vllm.generation_kwargs["stop_token_ids"] = self.eos_token_ids
        fit_vllm_sync(self)

    def _tokenize_prompts(self, prompts: list):
        if prompts and isinstance(prompts[0], str):
            # The rendered prompt already holds BOS where the template writes one: add no special tokens.
            return self._tokenizer(prompts, add_special_tokens=False)["input_ids"], None, {}
        return super()._tokenize_prompts(prompts)


def prompt_rows(tokenizer, contexts: list[dict]) -> list[dict]:
    """GRPO rows: `prompt` (raw text ending in the user header) and `context` (the messages, for the reward)."""
    prompts = probe_prompts(tokenizer, [c["messages"] for c in contexts])
    return [{"prompt": p, "context": c["messages"]} for p, c in zip(prompts, contexts)]


def build_rewards(args: FollowupRLConfig, tokenizer) -> list:
    # the dense form subtracts every turn's score after the foil answer
    judge = args.reward_judge_settings().build(foil_every_turn=args.reward_form == "dense")
    settings = dict(judge=judge, penalties=args.penalties, tokenizer=tokenizer, end_ids=user_turn_end_ids(tokenizer),
                    form=args.reward_form, allow_ranked_failures=args.reward_allow_ranked_failures)  # fmt: skip
    return [get_reward(name, **settings) for name in args.rewards]


def reward_curve(log_history: list[dict]) -> list[dict]:
    """`[{"step", "reward", ...}]` from the trainer's logs (one point per logging step)."""
    keys = ("reward", "reward_std", metric_names.FOLLOWUP_GENUINE_RATE, metric_names.REWARD_GENERIC_FLOOR,
            *map(metric_names.followup_label_share, LABELS), "completions/mean_length",
            "completions/clipped_ratio")  # fmt: skip
    return [
        {"step": entry["step"], **{k: round(entry[k], 4) for k in keys if k in entry}}
        for entry in log_history
        if "reward" in entry
    ]


def curve_ends(curve: list[dict]) -> tuple[float | None, float | None]:
    """Mean reward over the first and over the last quarter of the logged points (at least one point each)."""
    if not curve:
        return None, None
    k = max(1, len(curve) // 4)
    mean = lambda points: round(sum(p["reward"] for p in points) / len(points), 4)  # noqa: E731
    return mean(curve[:k]), mean(curve[-k:])


def check_recipe(recipe) -> None:
    """What `main` needs from the recipe, checked by `train.py` before any model loads."""
    args = recipe.get(FollowupRLConfig)
    if not args.contexts:
        raise RecipeError(
            "contexts: empty; follow-up RL needs at least one dataset of contexts to reply to, e.g. "
            "contexts=[gsm8k:PATH/train.jsonl]"
        )
    check_recipe_data(recipe, contexts=args.contexts)


def main(recipe) -> None:
    """Build the held-out and the training contexts, then `train_and_measure`: the genuine follow-up rate before,
    GRPO, the rate after, `OUTPUT_DIR/eval_summary.json` with the reward curve and its reward-hacking check."""
    start = time.time()
    check_recipe(recipe)
    run = prepare(recipe, FollowupRLConfig)
    args, tokenizer = run.args, run.tokenizer
    # Work before training is split across the ranks and shared (map_across_ranks): the held-out contexts and the
    # model's answers to the training contexts (generated once, not once per rank), so no rank waits for another.
    records = heldout_records(run.eval)
    heldout = heldout_contexts(records, run.eval, run.model, tokenizer)
    backend = local_backend(run.model, tokenizer) if args.context_answers == "model" else None
    allow_test = bool(recipe.raw.get("train_on_test"))
    records_train = load_training_records("contexts", args.contexts, args.context_limit, allow_test)
    contexts = map_across_ranks(
        lambda share: contexts_from_records(share, args.context_answers, backend, tokenizer, run.eval.response_tokens),
        records_train,
    )
    contexts, dropped = drop_overlap(contexts, [r.messages for r in records])
    if not contexts:
        raise RecipeError(
            f"contexts: {args.contexts} gave no usable context (items need a final user turn and an answer, and must "
            "not be held-out eval.datasets items); name other datasets"
        )
    logger.info(
        "%d training contexts (%d held-out overlaps dropped), %d held-out", len(contexts), dropped, len(heldout)
    )

    def make_trainer():
        return FollowupRLTrainer(
            model=run.model,
            reward_funcs=build_rewards(args, tokenizer),
            args=args,
            train_dataset=Dataset.from_list(prompt_rows(tokenizer, contexts)),
            processing_class=tokenizer,
            peft_config=run.peft_config,
            callbacks=[*default_callbacks(run), RewardHackingCallback(args.reward_hacking_window)],
        )

    def summary(trainer, output, before, after) -> dict:
        """The reward curve (`mean_reward` before = its first quarter, after = its last) and its hacking check."""
        curve = reward_curve(trainer.state.log_history)
        before["mean_reward"], after["mean_reward"] = curve_ends(curve)
        return dict(
            reward_curve=curve, rewards=args.rewards, penalties=args.penalties, reward_form=args.reward_form,
            reward_hacking=reward_hacking_summary(curve, args.reward_hacking_window), reward_judge=args.reward_judge,
            train_contexts=len(contexts), dropped_heldout_overlap=dropped,
        )  # fmt: skip

    train_and_measure(run, "followup_rl", records, heldout, make_trainer, summary, start)


PLAN = MethodPlan(
    reads=lambda args, eval_config: [("train", "contexts", s, args.context_limit) for s in args.contexts],
    drops_heldout=True, unit="completions", per_row=lambda args: args.num_generations, evaluations_outside_saves=2,
)  # fmt: skip

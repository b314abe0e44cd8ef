"""Follow-up RL: the reward registry, raw prompts without a doubled BOS, user-turn stops, a short GRPO run, recipes."""

import asyncio
import json
from types import SimpleNamespace

import pytest
from datasets import Dataset
from tokenizers.processors import TemplateProcessing
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable

from fic.chat import role_prefix
from fic.judges import LABELS, Verdict
from fic.tiny import tiny_model
from fic.trainers import rewards
from fic.trainers.followup_rl import (
    FollowupRLConfig,
    FollowupRLTrainer,
    curve_ends,
    prompt_rows,
    reward_curve,
    user_turn_end_ids,
)

CONTEXT = [
    {"role": "user", "content": "What is 12 times 3?"},
    {"role": "assistant", "content": "12 times 3 is 36."},
]


class LabelJudge:
    """Stand-in judge: the label is read off the turn ('ERR' -> judge_error); records every case it sees."""

    name = "label"

    def __init__(self, error_every: int = 0):
        self.cases, self.error_every = [], error_every

    def _one(self, case):
        self.cases.append(case)
        text = case.user_turn
        if "ERR" in text or (self.error_every and len(self.cases) % self.error_every == 0):
            return Verdict.error("unparseable")
        for label in ("malformed_artifact", "degenerate_short", "new_task_prompt"):
            if label in text:
                return Verdict(label)
        return Verdict("genuine_followup" if "?" in text else "new_task_prompt")

    def judge(self, cases):
        return [self._one(c) for c in cases]


class SpreadJudge(LabelJudge):
    """LabelJudge whose labels spread over four by the turn's length, so a step's rewards mix every value."""

    def _one(self, case):
        verdict = super()._one(case)
        spread = ("genuine_followup", "malformed_artifact", "new_task_prompt", "degenerate_short")
        return verdict if verdict.is_error else Verdict(spread[len(case.user_turn) % 4])


class AsyncLabelJudge(LabelJudge):
    async def ajudge(self, cases):
        await asyncio.sleep(0)
        return self.judge(cases)


TURNS = ["Why 36?", "malformed_artifact", "degenerate_short", "ERR", "new_task_prompt"]


def test_followup_reward_scores_labels_penalties_and_errors():
    metrics = {}
    reward = rewards.get_reward("followup", judge=LabelJudge(), penalties={"malformed_artifact": -1.0})
    out = reward(prompts=["p"] * 5, completions=TURNS, context=[CONTEXT] * 5,
                 log_metric=lambda k, v: metrics.__setitem__(k, v))  # fmt: skip
    assert out == [1.0, -1.0, 0.0, None, 0.0]
    shares = {k.rsplit("/", 1)[1]: v for k, v in metrics.items() if k.startswith("followup/label_share/")}
    assert {k: v for k, v in metrics.items() if k not in [f"followup/label_share/{s}" for s in shares]} == {
        "followup/judge_error_rate": 0.2,
        "followup/genuine_rate": 0.25,
    }
    assert set(shares) == set(LABELS) and sum(shares.values()) == pytest.approx(1.0)
    assert shares["genuine_followup"] == shares["malformed_artifact"] == shares["new_task_prompt"] == 0.25


def test_async_judge_gives_an_async_reward_with_the_same_values():
    sync = rewards.get_reward("followup", judge=LabelJudge())
    async_ = rewards.get_reward("followup", judge=AsyncLabelJudge())
    assert not is_async_callable(sync) and is_async_callable(async_)
    kw = dict(prompts=["p"] * 5, completions=TURNS, context=[CONTEXT] * 5)
    assert asyncio.run(async_(**kw)) == sync(**kw)
    from trl.trainer.utils import get_callable_name

    assert get_callable_name(async_) == get_callable_name(sync) == "followup_reward"


def test_registry_and_penalties_fail_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown reward 'genuine'; valid rewards are followup, ends_turn"):
        rewards.get_reward("genuine")
    with pytest.raises(ValueError, match="penalties: unknown failure mode 'bad'; valid: previous_turn_restate"):
        rewards.check_penalties({"bad": -1})
    with pytest.raises(ValueError, match="penalties.meta_planning: expected a number"):
        rewards.check_penalties({"meta_planning": "low"})
    with pytest.raises(ValueError, match="context"):
        rewards.get_reward("followup", judge=LabelJudge())(prompts=["p"], completions=["x"])


def test_judge_sees_special_tokens_that_trl_strips():
    tok = AutoTokenizer.from_pretrained(tiny_model("chatml"))
    end_ids = user_turn_end_ids(tok)
    ids = tok("Why?<|im_start|>assistant", add_special_tokens=False)["input_ids"] + [end_ids[0]]
    trl_text = tok.decode(ids, skip_special_tokens=True)
    assert "<|im_start|>" not in trl_text
    assert rewards.user_turns([trl_text], [ids], tok, end_ids) == ["Why?<|im_start|>assistant"]
    assert rewards.ends_turn_reward(["p", "p"], ["a", "b"], completion_ids=[ids, ids[:-1]], end_ids=end_ids) == [
        1.0,
        0.0,
    ]


def bos_adding_llama3_tokenizer():
    """The tiny Llama-3 tokenizer with the post-processor real Llama-3 tokenizers have: BOS on every encode."""
    tok = AutoTokenizer.from_pretrained(tiny_model("llama3"))
    bos = tok.bos_token
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.bos_token_id)])
    return tok


def test_raw_prompts_keep_one_bos():
    tok = bos_adding_llama3_tokenizer()
    prompt = role_prefix(tok, CONTEXT, "user")
    assert prompt.startswith(tok.bos_token) and prompt.endswith("<|start_header_id|>user<|end_header_id|>\n\n")
    trl_ids = GRPOTrainer._tokenize_prompts(SimpleNamespace(processing_class=tok), [prompt])[0][0]
    assert trl_ids[:2] == [tok.bos_token_id] * 2  # what TRL would feed the model: a doubled BOS
    ours = FollowupRLTrainer._tokenize_prompts(SimpleNamespace(_tokenizer=tok), [prompt])[0][0]
    assert ours.count(tok.bos_token_id) == 1 and tok.decode(ours) == prompt


def test_config_checks_and_vllm_settings_pass_through():
    import train

    with pytest.raises(ValueError, match="rewards: unknown reward"):
        FollowupRLConfig(output_dir="/tmp/x", rewards=["nope"], bf16=False)
    with pytest.raises(ValueError, match="reward_judge_base_url and reward_judge_model"):
        FollowupRLConfig(output_dir="/tmp/x", reward_judge="llm", bf16=False)
    recipe, method = train.load([
        "recipe=followup_rl_tiny", "use_vllm=true", "vllm_mode=server", "vllm_server_base_url=http://gpu:8000",
        "penalties.new_task_prompt=-0.75", "reward_judge=llm", "reward_judge_base_url=http://judge:8001/v1",
        "reward_judge_model=Qwen/Qwen3-8B",
    ])  # fmt: skip
    args = recipe.get(method.config_class())
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (True, "server", "http://gpu:8000")
    assert args.penalties["new_task_prompt"] == -0.75 and args.reward_judge_model == "Qwen/Qwen3-8B"
    with pytest.raises(ValueError, match="unknown key 'reward'"):
        train.load(["recipe=followup_rl_tiny", "reward=followup"])
    with pytest.raises(ValueError, match=r"reward_form: invalid value 'sparse' \(expected one of absolute \| dense"):
        train.load(["recipe=followup_rl_tiny", "reward_form=sparse"])[0].get(method.config_class())
    with pytest.raises(ValueError, match="reward_form: unknown form 'sparse'; valid: absolute, dense, group_relative"):
        FollowupRLConfig(output_dir="/tmp/x", reward_form="sparse", bf16=False)
    with pytest.raises(ValueError, match="penalties.new_task_prompt=0.5 pays a failure"):
        train.load(["recipe=followup_rl_tiny", "penalties.new_task_prompt=0.5"])[0].get(method.config_class())
    with pytest.raises(ValueError, match="reward_form=dense does not use them"):
        FollowupRLConfig(output_dir="/tmp/x", reward_form="dense", penalties={"meta_planning": -1.0}, bf16=False)
    with pytest.raises(ValueError, match="reward_hacking_window=1"):
        FollowupRLConfig(output_dir="/tmp/x", reward_hacking_window=1, bf16=False)


@pytest.mark.parametrize("recipe", ["followup_rl_tiny", "followup_rl_qwen2b", "reproduce_followup_rl"])
def test_recipes_pay_every_failure_alike(recipe):
    import train

    loaded, method = train.load([f"recipe={recipe}", "bf16=false", "use_vllm=false"])  # the GPU recipe, on CPU
    args = loaded.get(method.config_class())
    assert args.reward_form == "absolute" and not args.reward_allow_ranked_failures
    assert len({args.penalties.get(label, 0.0) for label in rewards.FAILURE_LABELS}) == 1


def test_reward_curve_and_its_ends():
    history = [{"loss": 1.0, "step": 1}] + [
        {"reward": r, "step": i} for i, r in enumerate([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0])
    ]
    curve = reward_curve(history)
    assert [p["reward"] for p in curve] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]
    assert curve_ends(curve) == (0.1, 1.0) and curve_ends([]) == (None, None)


@pytest.mark.parametrize("family", ["llama3", "norole"])
def test_grpo_writes_user_turns_and_scores_them(tmp_path, family):
    path = tiny_model(family)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    contexts = [{"messages": CONTEXT}, {"messages": [{"role": "user", "content": "Name a color."},
                                                     {"role": "assistant", "content": "Blue."}]}]  # fmt: skip
    judge = SpreadJudge(error_every=2)  # every other turn is a judge error: reward None, not 0
    penalties = {**dict.fromkeys(rewards.FAILURE_LABELS, -0.5), "malformed_artifact": -1.0}
    reward = rewards.get_reward("followup", judge=judge, tokenizer=tok, end_ids=user_turn_end_ids(tok),
                                penalties=penalties)  # fmt: skip
    args = FollowupRLConfig(
        output_dir=str(tmp_path),
        report_to="none",
        bf16=False,
        use_vllm=False,
        max_steps=2,
        logging_steps=1,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        beta=0.0,
        save_strategy="no",
        learning_rate=1e-3,
    )
    trainer = FollowupRLTrainer(model=model, reward_funcs=[reward], args=args, processing_class=tok,
                                train_dataset=Dataset.from_list(prompt_rows(tok, contexts)))  # fmt: skip
    user_end = "<|eot_id|>" if family == "llama3" else "<end_of_turn>"
    assert tok.convert_tokens_to_ids(user_end) in trainer.eos_token_ids  # generation stops at the user turn's end
    trainer.train()
    assert len(judge.cases) == 2 * 4 * 2  # steps x generations x prompts per step
    assert {tuple(m["content"] for m in c.messages) for c in judge.cases} <= {
        tuple(m["content"] for m in c["messages"]) for c in contexts
    }
    assert all(user_end not in c.user_turn for c in judge.cases)
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert len(logged) == 2 and all("rewards/followup_reward/mean" in e for e in logged)
    assert all(e["followup/judge_error_rate"] == 0.5 and e["reward"] == e["reward"] for e in logged)  # no NaN
    # The logged mean reward is the one the judge's logged labels imply under the penalty table.
    table = {label: 1.0 if label == "genuine_followup" else penalties.get(label, 0.0) for label in LABELS}
    for e in logged:
        implied = sum(e[f"followup/label_share/{label}"] * value for label, value in table.items())
        assert e["rewards/followup_reward/mean"] == pytest.approx(implied, abs=1e-6)
        assert e["followup/genuine_rate"] == e["followup/label_share/genuine_followup"]


@pytest.mark.slow
def test_recipe_runs_end_to_end_and_records_the_reward_curve(tmp_path, shared_data):
    """The mechanics of followup_rl_tiny (which starts from collab_sft_tiny's output; a random model here)."""
    import train

    out = tmp_path / "run"
    status = train.main([
        "recipe=followup_rl_tiny", "model_name_or_path=tiny:chatml", f"output_dir={out}", "max_steps=4", "logging_steps=1", "context_limit=12",
        "per_device_train_batch_size=8", "num_generations=4", "eval.limit=3", "eval.samples=2",
    ])  # fmt: skip
    assert status == 0
    summary = json.loads((out / "eval_summary.json").read_text())
    assert [p["step"] for p in summary["reward_curve"]] == [1, 2, 3, 4]
    for side in ("before", "after"):
        assert summary[side]["genuine_rate"]["n"] == 6
        assert -1.0 <= summary[side]["mean_reward"] <= 1.0
    assert summary["before"]["mean_reward"] == summary["reward_curve"][0]["reward"]
    # The recipe's table pays every failure 0.0 and the heuristic judge never errs: the reward is the genuine share.
    for point in summary["reward_curve"]:
        assert point["reward"] == pytest.approx(point["followup/label_share/genuine_followup"], abs=1e-4)
        assert point["followup/genuine_rate"] == point["followup/label_share/genuine_followup"]
        assert "reward/generic_floor" in point  # the recipe's judge is contrastive
    hacking = summary["reward_hacking"]
    assert hacking["window"] == 10 and [w["steps"] for w in hacking["windows"]] == [[1, 4]]
    assert (hacking["flagged"] == 1) == (hacking["warning"] is not None) and summary["reward_form"] == "absolute"
    # training contexts from GSM8K train (the recipe), held-out ones from GSM8K test: nothing overlaps
    assert summary["train_contexts"] == 12 and summary["dropped_heldout_overlap"] == 0

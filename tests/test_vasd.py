"""VASDTrainer on a tiny offline model: teacher modes, view alignment, truncation, weight sharing, on-policy path."""

import gc
import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from fic.chat import full_view, render, sharded_view
from fic.tiny import tiny_model
from fic.trainers.vasd import VASDConfig, VASDTrainer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir():
    return tiny_model("chatml")


@pytest.fixture
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def load(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir)


def sharp(model, scale=20.0):
    """A random-init tiny model is close to uniform whatever the context; a scaled head makes the views disagree."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def rows(n=4, completion=True):
    out = []
    for i in range(n):
        shards = [f"What is {i} plus {i + 2}?", f"The first number is {i}." + " Yes." * (3 - i), f"It is {i + 2}."]
        row = {
            "prompt": sharded_view(shards, ["Okay.", "Okay, go on."][: len(shards) - 1]),
            "teacher_prompt": full_view(f"What is {i} plus {i + 2}?" + " Think." * i),
            "keep": i % 2 == 0,
        }
        if completion:
            row["completion"] = f"The answer is {2 * i + 2}."
        out.append(row)
    return Dataset.from_list(out)


def config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path),
        max_steps=8,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        beta=0.5,
        temperature=1.0,
        lmbda=0.0,
        single_turn_mix=0.0,
        max_completion_length=8,
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        seed=0,
    )
    values.update(overrides)
    return VASDConfig(**values)


def losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def lora():
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")


@pytest.mark.parametrize(
    "teacher_mode, use_lora",
    [("base", False), ("base", True), ("live", False), ("ema", False), ("ema", True)],
)
def test_teacher_modes_train_and_the_loss_falls_on_a_repeated_batch(
    tmp_path, model_dir, tokenizer, teacher_mode, use_lora
):
    # plain SGD at a small step: the divergence of a fixed batch must fall (Adam's first steps overshoot here)
    args = config(tmp_path, teacher_mode=teacher_mode, optim="sgd", lr_scheduler_type="constant", learning_rate=0.01)
    trainer = VASDTrainer(
        sharp(load(model_dir)), args=args, train_dataset=rows(), processing_class=tokenizer,
        peft_config=lora() if use_lora else None,
    )  # fmt: skip
    trainer.train()
    history = losses(trainer)
    assert len(history) == 8 and all(math.isfinite(x) for x in history)
    assert history == pytest.approx([h["vasd/divergence_multi_turn"] for h in trainer.state.log_history[:8]])
    assert history[0] > 0.01
    assert history[-1] < 0.6 * history[0], history
    logged = trainer.state.log_history[0]
    assert {"vasd/divergence", "vasd/single_turn_frac", "vasd/on_policy_frac", "vasd/teacher_prompt_length"} <= set(
        logged
    )


def test_views_are_aligned_on_the_same_response_tokens(tmp_path, model_dir, tokenizer):
    model = load(model_dir)
    data = rows()
    trainer = VASDTrainer(model, args=config(tmp_path), train_dataset=data, processing_class=tokenizer)
    examples = list(data)
    completions = [
        tokenizer(f" {w}", add_special_tokens=False)["input_ids"] for w in ["7", "eight 8", "nine and 9", "x"]
    ]
    batch = trainer.build_views(examples, completions)
    C = batch["completion_ids"].size(1)
    student = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    teacher = torch.cat([batch["teacher_prompt_ids"], batch["completion_ids"]], 1)
    s_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    t_mask = torch.cat([batch["teacher_prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        h_s = trainer._get_last_hidden_state(model, student, s_mask, C)
        h_t = trainer._get_last_hidden_state(model, teacher, t_mask, C)
    lengths = []
    for i, example in enumerate(examples):
        s_prompt = batch["prompt_ids"][i][batch["prompt_mask"][i] == 1].tolist()
        t_prompt = batch["teacher_prompt_ids"][i][batch["teacher_prompt_mask"][i] == 1].tolist()
        # each view's prompt is the template's own rendering, tokenised once
        assert s_prompt == tokenizer(render(tokenizer, example["prompt"], True), add_special_tokens=False)["input_ids"]
        assert (
            t_prompt
            == tokenizer(render(tokenizer, example["teacher_prompt"], True), add_special_tokens=False)["input_ids"]
        )
        lengths.append((len(s_prompt), len(t_prompt)))
        c = len(completions[i])
        # the token predicted at aligned position k is the same response token in both views
        for k in range(c):
            assert student[i, student.size(1) - C + k] == teacher[i, teacher.size(1) - C + k] == completions[i][k]
        # and the hidden state the loss uses there is the one of an unpadded forward of that view
        for prompt, hidden in ((s_prompt, h_s[i]), (t_prompt, h_t[i])):
            ids = torch.tensor([prompt + completions[i]])
            with torch.no_grad():
                ref = model.model(input_ids=ids).last_hidden_state[0]
            torch.testing.assert_close(hidden[:c], ref[len(prompt) - 1 : len(prompt) + c - 1], atol=1e-5, rtol=1e-4)
        assert batch["completion_mask"][i].sum() == c
    assert len({s for s, _ in lengths}) > 1 and len({t for _, t in lengths}) > 1
    assert all(s != t for s, t in lengths)


def test_overlong_teacher_prompt_is_an_error_not_a_silent_cut(tmp_path, model_dir, tokenizer):
    trainer = VASDTrainer(
        load(model_dir), args=config(tmp_path, max_teacher_prompt_length=20), train_dataset=rows(),
        processing_class=tokenizer,
    )  # fmt: skip
    with pytest.raises(ValueError, match="max_teacher_prompt_length"):
        trainer.train()


def test_explicit_left_truncation_is_counted(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=1, max_prompt_length=30, prompt_truncation="left")
    trainer = VASDTrainer(load(model_dir), args=args, train_dataset=rows(), processing_class=tokenizer)
    trainer.train()
    assert trainer.state.log_history[0]["vasd/truncated_prompts"] == 4
    assert trainer.state.log_history[0]["vasd/student_prompt_length"] == 30


def _llama_instances():
    from transformers import LlamaForCausalLM

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, LlamaForCausalLM)]


def test_base_teacher_with_lora_keeps_a_single_copy_of_the_weights(tmp_path, model_dir, tokenizer):
    model = load(model_dir)
    base_params = sum(p.numel() for p in model.parameters())
    before = len(_llama_instances())
    trainer = VASDTrainer(
        model, args=config(tmp_path, max_steps=4, learning_rate=5e-2), train_dataset=rows(),
        processing_class=tokenizer, peft_config=lora(),
    )  # fmt: skip
    assert len(_llama_instances()) == before  # no copy of the base model was made
    assert trainer.teacher_is_student and trainer.teacher_model is None
    storages = {p.untyped_storage().data_ptr(): p.numel() for p in trainer.model.parameters()}
    lora_params = sum(p.numel() for n, p in trainer.model.named_parameters() if "lora_" in n)
    assert sum(storages.values()) == base_params + lora_params
    assert lora_params < 0.1 * base_params

    ids = torch.tensor([tokenizer("What is 1 plus 3?", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        base_logits = load(model_dir)(ids).logits
    trainer.train()
    student = trainer.accelerator.unwrap_model(trainer.model)
    student.eval()
    with torch.no_grad():
        student_logits = student(input_ids=ids).logits
        with trainer.teacher_context():
            teacher_logits = student(input_ids=ids).logits
    torch.testing.assert_close(teacher_logits, base_logits, atol=1e-5, rtol=1e-5)  # the teacher is the base
    assert (student_logits - base_logits).abs().max() > 1e-3  # while the student moved


def test_base_teacher_without_lora_is_a_frozen_copy(tmp_path, model_dir, tokenizer):
    model = load(model_dir)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = VASDTrainer(model, args=config(tmp_path, max_steps=2), train_dataset=rows(), processing_class=tokenizer)
    teacher = trainer.accelerator.unwrap_model(trainer.teacher_model)
    assert teacher is not model and not any(p.requires_grad for p in teacher.parameters())
    trainer.train()
    for name, param in teacher.named_parameters():
        torch.testing.assert_close(param, initial[name])
    assert any((p - initial[n]).abs().max() > 0 for n, p in model.named_parameters())


def test_single_turn_replay_starts_at_zero_divergence_with_the_base_teacher(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=1, single_turn_mix=1.0)
    trainer = VASDTrainer(load(model_dir), args=args, train_dataset=rows(), processing_class=tokenizer)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["vasd/single_turn_frac"] == 1.0
    assert logged["vasd/divergence"] < 1e-6  # the student view is the teacher view and the weights are the base
    assert logged["vasd/divergence_single_turn"] < 1e-6 and logged["vasd/divergence_multi_turn"] is None


def test_on_policy_path_samples_in_the_student_view(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=2, lmbda=1.0)
    trainer = VASDTrainer(load(model_dir), args=args, train_dataset=rows(), processing_class=tokenizer)
    calls = []
    original = trainer._rollouts.generate

    def spy(prompt_ids, **kw):
        if not kw["as_teacher"] and prompt_ids:
            calls.append([list(p) for p in prompt_ids])
        return original(prompt_ids, **kw)

    trainer._rollouts.generate = spy
    trainer.train()
    history = trainer.state.log_history
    assert history[0]["vasd/on_policy_frac"] == 1.0 and history[0]["vasd/completion_length"] > 0
    assert all(math.isfinite(h["loss"]) for h in history if "loss" in h)
    student_prompts = [
        tokenizer(render(tokenizer, r["prompt"], True), add_special_tokens=False)["input_ids"] for r in rows()
    ]
    assert calls and all(p in student_prompts for p in calls[0])  # sampled from the multi-turn view


def test_shard_rows_are_played_by_the_current_student(tmp_path, model_dir, tokenizer):
    """Rows given as shards: the student answers every shard but the last itself (greedy), then is trained."""
    data = Dataset.from_list(
        [
            {
                "shards": [f"Sum {i} and {i + 1}?", f"Take {i}.", f"Add {i + 1}."],
                "teacher_prompt": full_view(f"{i}+{i + 1}?"),
            }
            for i in range(4)
        ]
    )
    model = load(model_dir)
    trainer = VASDTrainer(model, args=config(tmp_path, max_steps=2), train_dataset=data, processing_class=tokenizer)
    views = trainer.rollout_student_views([row["shards"] for row in data])
    for view, row in zip(views, data):
        assert [m["content"] for m in view if m["role"] == "user"] == row["shards"]
        assert [m["role"] for m in view] == ["user", "assistant", "user", "assistant", "user"]
    assert trainer.rollout_student_views([row["shards"] for row in data]) == views  # greedy: reproducible
    # the first reply is the model's own greedy answer to the first shard alone
    ids = tokenizer(
        render(tokenizer, full_view(data[0]["shards"][0]), True), add_special_tokens=False, return_tensors="pt"
    )
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    expected = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip() or "..."
    assert views[0][1]["content"] == expected
    trainer.train()
    logged = trainer.state.log_history[0]
    assert math.isfinite(logged["loss"]) and logged["vasd/student_prompt_length"] > 0


def test_teacher_samples_when_there_is_no_completion(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=1)
    trainer = VASDTrainer(load(model_dir), args=args, train_dataset=rows(completion=False), processing_class=tokenizer)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["vasd/on_policy_frac"] == 0.0 and logged["vasd/completion_length"] > 0
    assert math.isfinite(logged["loss"])


def test_sequence_mode_trains_on_accepted_teacher_samples(tmp_path, model_dir, tokenizer):
    args = config(tmp_path, max_steps=3, mode="sequence", filter_correct=True)
    trainer = VASDTrainer(
        load(model_dir), args=args, train_dataset=rows(), processing_class=tokenizer,
        answer_checker=lambda example, text: example["keep"],
    )  # fmt: skip
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["vasd/teacher_accept_rate"] == 0.5
    assert math.isfinite(logged["loss"]) and logged["vasd/nll"] > 0


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"teacher_mode": "oracle"}, "teacher_mode"),
        ({"mode": "beam"}, "mode"),
        ({"lmbda": 1.5}, "lmbda"),
        ({"single_turn_mix": -0.1}, "single_turn_mix"),
        ({"mode": "sequence", "lmbda": 0.5}, "lmbda"),
        ({"filter_correct": True}, "filter_correct"),
        ({"prompt_truncation": "right"}, "prompt_truncation"),
        ({"max_prompt_length": 0}, "max_prompt_length"),
        ({"teacher_model_name_or_path": "gpt2"}, "teacher_model_name_or_path"),
        ({"rollout_temperature": -1.0}, "rollout_temperature"),
        ({"use_vllm": True, "vllm_max_model_length": 256, "max_prompt_length": 512}, "vllm_max_model_length"),
    ],
)
def test_bad_config_names_the_field(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        config(tmp_path, **overrides)


def test_missing_columns_and_checker_are_errors(tmp_path, model_dir, tokenizer):
    bad = Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(ValueError, match="teacher_prompt"):
        VASDTrainer(load(model_dir), args=config(tmp_path), train_dataset=bad, processing_class=tokenizer)
    with pytest.raises(ValueError, match="answer_checker"):
        VASDTrainer(
            load(model_dir), args=config(tmp_path, mode="sequence", filter_correct=True), train_dataset=rows(),
            processing_class=tokenizer,
        )  # fmt: skip


class ScriptedBackend:
    """Answers from a rule on the rendered prompt: `reply(prompt) -> str`."""

    def __init__(self, reply):
        self.reply, self.prompts = reply, []

    def generate(self, prompts, params, progress=False, keep_special_tokens=True):
        self.prompts.extend(prompts)
        return [[self.reply(p)] * params.n for p in prompts]


def test_view_scores_count_any_correct_attempt_in_sharded_episodes():
    from fic.data.synthetic import make_tasks
    from fic.eval.lic import evaluate_views
    from fic.tiny import build_task_tokenizer

    tokenizer = build_task_tokenizer("chatml")
    tasks = make_tasks(6, seed=0, split="test")
    answers = {t.shards[2]: t.answer for t in tasks}

    def reply(prompt):
        # right only right after the third shard (turn 2 of 4); wrong everywhere else, single-turn views included
        last_user = prompt.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        return f"The answer is {answers[last_user]}." if last_user in answers else "The answer is 99."

    backend = ScriptedBackend(reply)
    scores = evaluate_views(None, tokenizer, tasks, backend=backend)
    assert scores.p_full == scores.p_concat == 0.0 and scores.p_phrasings == [0.0, 0.0, 0.0]
    assert scores.sharded_turn_accuracy == [0.0, 0.0, 1.0, 0.0]
    assert scores.p_sharded == 1.0 and scores.sharded_final_turn == 0.0
    # later turns see the model's own earlier replies
    assert any("The answer is 99.<|im_end|>" in p for p in backend.prompts)


@pytest.mark.slow
def test_tiny_pipeline_runs_end_to_end_and_caches_the_base(tmp_path):
    """A shrunken fic_tiny: a small synthetic-task base (cached), measured, distilled, measured, `fic lic` on it."""
    import json
    import time

    import train
    from fic.tiny import tiny_task_model

    small = dict(base_tasks=100, base_steps=20, base_batch_size=16, cache_dir=tmp_path / "cache")
    base = tiny_task_model(**small)
    t = time.perf_counter()
    assert tiny_task_model(**small) == base and time.perf_counter() - t < 1.0  # cached, not retrained

    def run(out):
        assert train.main(["recipe=fic_tiny", f"model_name_or_path={base}", f"output_dir={out}", "synthetic_tasks=32",
                           "max_steps=2", "per_device_train_batch_size=16", "synthetic_eval_tasks=12"]) == 0  # fmt: skip
        return json.loads((out / "eval_summary.json").read_text())

    first = run(tmp_path / "a")
    for view in ("before", "after"):
        scores = first[view]
        assert all(0.0 <= scores[k] <= 1.0 for k in ("p_full", "p_concat", "p_sharded"))
        assert len(scores["sharded_turn_accuracy"]) == 1 + 2 and len(scores["p_phrasings"]) == 3
    assert set(first["checks"]) == {
        "gap_before", "concat_like_full_before", "recovery_at_least_target", "full_kept", "concat_kept"
    }  # fmt: skip
    assert set(first["lic_after"]) >= {"p_full", "p_concat", "p_sharded"} and first["base_dir"] == base
    second = run(tmp_path / "b")
    assert second["before"] == first["before"]  # greedy measurements of the same base are deterministic

"""`VASDConfig`: the settings of `fic.trainers.vasd.VASDTrainer` (TRL's `DistillationConfig` plus VASD's views,
teachers, rollouts and synthetic tasks), checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DistillationConfig

TEACHER_MODES = ("base", "live", "ema")
MODES = ("token", "sequence")
TRUNCATION = ("error", "left")


@dataclass
class VASDConfig(DistillationConfig):
    r"""
    Configuration for [`VASDTrainer`]: TRL's `DistillationConfig` plus the two views, the teacher and the mixing.

    Inherited fields keep their TRL meaning: `beta` (0 forward KL, 1 reverse KL, else generalised JSD),
    `temperature` (sampling and loss), `max_completion_length`, the generation and vLLM fields.

    Args:
        teacher_mode (`str`, defaults to `"base"`):
            The teacher: `base` (the frozen initial model; with LoRA the adapter is disabled for the teacher pass, no
            second copy of the weights), `live` (the current weights, no gradient) or `ema` (an exponential moving
            average of the student).
        teacher_update_rate (`float`, defaults to `0.05`):
            EMA rate for `teacher_mode="ema"`: `teacher = (1 - rate) * teacher + rate * student`.
        teacher_sync_steps (`int`, defaults to `1`):
            Optimizer steps between two EMA updates.
        mode (`str`, defaults to `"token"`):
            `token`: token-level divergence to the teacher's distributions on each response. `sequence`: the teacher
            samples responses in the teacher view and the student is trained on them with the log-likelihood.
        lmbda (`float`, defaults to `0.0`):
            Fraction of examples whose response the student samples in the student view (on-policy). The others use
            the `completion` column, or a teacher sample in the teacher view when there is none. `token` mode only.
        single_turn_mix (`float`, defaults to `0.5`):
            Fraction of training examples whose student view is replaced by the teacher's single-turn prompt (replay),
            which keeps the single-turn behaviour from eroding. Replay protects the phrasings it replays: put every
            single-turn phrasing you care about into `teacher_prompt` across the dataset.
        rollout_temperature (`float`, defaults to `0.0`):
            For rows given as `shards` (see [`VASDTrainer`]): temperature at which the current student writes its
            replies to the earlier shards (`0` is greedy, as the Lost-in-Conversation evaluation decodes).
        rollout_max_new_tokens (`int` or `None`, defaults to `None`):
            Longest reply to an earlier shard; `None` uses `max_completion_length`.
        rollout_cpu_threads (`int` or `None`, defaults to `None`):
            On CPU only: torch's intra-op threads while fic's decode loop writes the rollouts (restored after each
            call). A small model's one-token forwards are too small to split across threads: at the `vasd_onpolicy`
            benchmark's CPU size one thread decodes about 1.7x faster than two, at SmolLM2-135M's size it makes no
            difference on 2 cores. `None` keeps torch's setting.
        filter_correct (`bool`, defaults to `False`):
            `sequence` mode: keep a teacher sample only when the trainer's `answer_checker(example, text)` accepts it.
        max_prompt_length (`int` or `None`, defaults to `None`):
            Longest student prompt in tokens; `None` for no limit.
        max_teacher_prompt_length (`int` or `None`, defaults to `None`):
            Longest teacher prompt in tokens; `None` for no limit.
        prompt_truncation (`str`, defaults to `"error"`):
            What a prompt over its limit does: `error` (raise, naming the example) or `left` (drop its oldest tokens,
            counted in `vasd/truncated_prompts`; the teacher may then lose task information).
        loss_token_chunk_size (`int` or `None`, defaults to `None`):
            Response tokens per call of the chunked divergence (bounds its peak memory); `None` for TRL's 4096.

        > Data (used by `fic.trainers.vasd.recipe.main`)

        train_data (`str` or `None`, defaults to `None`):
            A JSONL file of VASD rows: `prompt` and `teacher_prompt` (lists of messages), optionally `completion`;
            or a dataset spec such as `gsm8k:PATH`, whose problems the rule sharder splits into `shards` rows.
        train_limit (`int` or `None`, defaults to `None`):
            Items read from a `train_data` dataset spec.
        synthetic_tasks (`int`, defaults to `0`):
            Build rows from this many `fic.data.synthetic` training tasks instead: the student view is the sharded
            conversation in which the current student answers the earlier shards itself, the teacher view one
            single-turn phrasing. p_full / p_concat / p_sharded are measured before and after on `synthetic_eval_tasks` test
            tasks, `fic lic` runs on the trained model and the demo's checks are made (`vasd_recipe.synthetic_run`).
        synthetic_eval_tasks (`int`, defaults to `500`):
            Test-split tasks measured before and after training.
        synthetic_task_steps (`int`, defaults to `1`):
            Update steps per synthetic task (1 gives three shards, 2 four).

    > [!NOTE]
    > `beta` keeps TRL's default (`1.0`, reverse KL); the tiny run uses `0.0` (forward KL on teacher samples).
    """

    teacher_mode: str = field(default="base", metadata={"help": "Teacher: base, live or ema."})
    teacher_update_rate: float = field(default=0.05, metadata={"help": "EMA rate for teacher_mode=ema."})
    teacher_sync_steps: int = field(default=1, metadata={"help": "Optimizer steps between EMA teacher updates."})
    mode: str = field(default="token", metadata={"help": "token (divergence) or sequence (NLL on teacher samples)."})
    lmbda: float = field(
        default=0.0, metadata={"help": "Fraction of responses sampled on-policy in the student view."}
    )
    single_turn_mix: float = field(
        default=0.5, metadata={"help": "Fraction of examples whose student view is the teacher's single-turn prompt."}
    )
    filter_correct: bool = field(
        default=False, metadata={"help": "sequence mode: keep only teacher samples the answer checker accepts."}
    )
    rollout_temperature: float = field(
        default=0.0, metadata={"help": "Sampling temperature of the student's own earlier turns (0 = greedy)."}
    )
    rollout_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Longest earlier-turn reply (tokens); None for max_completion_length."}
    )
    rollout_cpu_threads: int | None = field(
        default=None, metadata={"help": "CPU only: torch threads while the rollouts decode; None keeps torch's."}
    )
    max_prompt_length: int | None = field(default=None, metadata={"help": "Longest student prompt (tokens)."})
    max_teacher_prompt_length: int | None = field(default=None, metadata={"help": "Longest teacher prompt (tokens)."})
    prompt_truncation: str = field(default="error", metadata={"help": "Over-long prompts: error or left."})
    loss_token_chunk_size: int | None = field(
        default=None, metadata={"help": "Response tokens per chunked-divergence call (peak memory bound)."}
    )
    train_data: str | None = field(
        default=None, metadata={"help": "JSONL of VASD rows, or a dataset spec (gsm8k:PATH) to shard."}
    )
    train_limit: int | None = field(default=None, metadata={"help": "Items read from a train_data dataset spec."})
    synthetic_tasks: int = field(default=0, metadata={"help": "Train on this many fic.data.synthetic tasks instead."})
    synthetic_eval_tasks: int = field(default=500, metadata={"help": "Synthetic test tasks measured before/after."})
    synthetic_task_steps: int = field(default=1, metadata={"help": "Update steps per synthetic task."})

    def __post_init__(self):
        if self.teacher_mode not in TEACHER_MODES:
            raise ValueError(f"teacher_mode: unknown teacher {self.teacher_mode!r}; valid: {', '.join(TEACHER_MODES)}")
        if self.mode not in MODES:
            raise ValueError(f"mode: unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        if self.prompt_truncation not in TRUNCATION:
            raise ValueError(
                f"prompt_truncation: unknown value {self.prompt_truncation!r}; valid: {', '.join(TRUNCATION)}"
            )
        for name in ("lmbda", "single_turn_mix"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a fraction in [0, 1], got {value!r}")
        if not 0.0 < self.teacher_update_rate <= 1.0:
            raise ValueError(f"teacher_update_rate: expected a value in (0, 1], got {self.teacher_update_rate!r}")
        if self.teacher_model_name_or_path is not None:
            raise ValueError(
                f"teacher_model_name_or_path: {self.teacher_model_name_or_path!r} is not used by VASD, whose teacher is "
                "the model itself (pick it with teacher_mode: base, live or ema); remove the key"
            )
        if self.rollout_temperature < 0:
            raise ValueError(f"rollout_temperature: expected >= 0 (0 = greedy), got {self.rollout_temperature!r}")
        if self.rollout_cpu_threads is not None and self.rollout_cpu_threads < 1:
            raise ValueError(
                f"rollout_cpu_threads: expected a positive thread count or None, got {self.rollout_cpu_threads!r}"
            )
        if self.teacher_sync_steps < 1:
            raise ValueError(f"teacher_sync_steps: expected at least 1, got {self.teacher_sync_steps!r}")
        if self.mode == "sequence" and self.lmbda > 0:
            raise ValueError(
                f"lmbda: {self.lmbda} has no meaning with mode='sequence', which trains on teacher samples; set lmbda=0"
            )
        if self.filter_correct and self.mode != "sequence":
            raise ValueError("filter_correct: only used with mode='sequence' (token mode has no accept step)")
        if self.synthetic_tasks < 0 or self.synthetic_eval_tasks < 0:
            raise ValueError("synthetic_tasks / synthetic_eval_tasks: expected non-negative task counts")
        if self.synthetic_task_steps not in (1, 2, 3):
            raise ValueError(f"synthetic_task_steps: expected 1, 2 or 3, got {self.synthetic_task_steps!r}")
        for name in (
            "max_prompt_length",
            "max_teacher_prompt_length",
            "loss_token_chunk_size",
            "rollout_max_new_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: expected a positive number of tokens or None, got {value!r}")
        longest = (self.max_prompt_length or 0) + (self.max_completion_length or 0)
        if self.use_vllm and self.vllm_max_model_length is not None and self.vllm_max_model_length < longest:
            raise ValueError(
                f"vllm_max_model_length: {self.vllm_max_model_length} cannot hold the longest student view and its "
                f"response (max_prompt_length + max_completion_length = {longest}); raise it to at least {longest}"
            )
        super().__post_init__()

"""The `eval:` block of a recipe: which evaluations run on each saved checkpoint, on what, and how.

The same dataclass drives the training callback (`fic.trainers.callbacks.EvalCallback`) and `fic eval-checkpoints`,
so a checkpoint evaluated during training and one evaluated later on another node get the same files and metrics.
Secrets never go in here: the LLM judge reads its key from the environment (`FIC_JUDGE_API_KEY`/`OPENAI_API_KEY`).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from fic.evaluations import EVALUATIONS, config_blocks
from fic.judges.registry import DEFAULT_JUDGE, JudgeKind, JudgeSettings

BACKENDS = ("transformers", "vllm")
LOAD_FROM = ("auto", "memory", "disk")


@dataclass
class EvalConfig:
    """Evaluation settings shared by the checkpoint callback and `fic eval-checkpoints`.

    Args:
        enabled (`bool`, defaults to `False`):
            Evaluate every saved checkpoint during training (the tiny recipes turn it on).
        evaluations (`list[str]`, defaults to `["probe"]`):
            Which evaluations to run: `probe` (user-turn probe), `lic` (Lost in Conversation), `regret` (hidden
            intent clarification).
        datasets (`list[str]`):
            Held-out sets for the probe, as `NAME` or `NAME:PATH` (e.g. `healthbench:../data/oss_eval.jsonl`).
        temperatures (`list[float]`, defaults to `[0.0, 0.3, 0.7, 1.0]`):
            Sampling temperatures for the probe's user turn.
        samples (`int`, defaults to `1`):
            User turns sampled per item and temperature.
        limit (`int`, defaults to `20`):
            Items per probe dataset.
        max_new_tokens (`int`, defaults to `64`):
            Generation budget per user turn.
        judge (`str`, defaults to `"learned"`):
            A key of `fic.judges.JUDGES`: `learned` (offline rules + a classifier fitted on labelled real turns; the
            default because its calibrated rates are the tightest, see the README), `heuristic` (the rules alone),
            `strict`, `llm` or `cascade` (the last two need `judge_base_url` and `judge_model`). With
            `judge_base_url`, `judge_model` and `judge_contrast` it is one `fic.judges.JudgeSettings`
            (`config.judge_settings()`).
        allow_judge_overlap (`bool`, defaults to `False`):
            Evaluate items inside the judge's fit (refused otherwise); the overlap is recorded and those items are
            left out of corrected and calibrated rates.
        judge_contrast (`bool`, defaults to `False`):
            Contrastive judging (`fic.judges.contrast`): a turn is genuine only if the judge does not also call it
            genuine after another item's answer. Off by default here, because the probe already reports the
            generic floor (the share still genuine after the answer swap) beside every rate.
        judge_base_url (`str` or `None`):
            OpenAI-compatible chat endpoint for the LLM judge.
        judge_model (`str` or `None`):
            Model name at that endpoint.
        backend (`str`, defaults to `"transformers"`):
            Generation backend: `transformers`, or `vllm` (only for `fic eval-checkpoints`, which loads each
            checkpoint from disk; the training callback evaluates the in-memory model with transformers).
        seed (`int`, defaults to `0`):
            Sampling seed.
        perturbations (`list[str]`, defaults to `["none"]`):
            Probe controls among `none`, `truncate`, `question`.
        responses (`str`, defaults to `"model"`):
            Probe assistant answers: `model` (the checkpoint answers greedily) or `data` (the data's reference).
        response_tokens (`int`, defaults to `128`):
            Generation budget per assistant answer in the probe.
        blocks (`dict[str, dataclass]`):
            The config blocks of the registered evaluations that have one, by name (`eval.lic.*`: `LicConfig`,
            `eval.regret.*`: `RegretConfig`); read one with `config.block(name)`. In a recipe each is a nested
            mapping (`eval: {lic: {runs: 3}}` or `eval.lic.runs=3`).
        every_n_saves (`int`, defaults to `1`):
            Evaluate every n-th save (1: every checkpoint).
        load_from (`str`, defaults to `"auto"`):
            What the callback evaluates: `memory` (the model being trained, adapters active), `disk` (the checkpoint
            just written, reloaded by every rank), or `auto` (`disk` under FSDP / DeepSpeed ZeRO-3, whose
            parameters are sharded across processes, `memory` otherwise).
        batch_size (`int`, defaults to `8`):
            Prompts per generation batch.
        log_samples (`int`, defaults to `32`):
            Generated user turns logged to wandb as a table per checkpoint (0: none).
    """

    enabled: bool = False
    evaluations: list[str] = field(default_factory=lambda: ["probe"])
    datasets: list[str] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.3, 0.7, 1.0])
    samples: int = 1
    limit: int = 20
    max_new_tokens: int = 64
    judge: JudgeKind = DEFAULT_JUDGE
    allow_judge_overlap: bool = False
    judge_contrast: bool = False
    judge_base_url: str | None = None
    judge_model: str | None = None
    backend: Literal["transformers", "vllm"] = "transformers"
    seed: int = 0
    perturbations: list[str] = field(default_factory=lambda: ["none"])
    responses: Literal["model", "data"] = "model"
    response_tokens: int = 128
    every_n_saves: int = 1
    load_from: Literal["auto", "memory", "disk"] = "auto"
    batch_size: int = 8
    log_samples: int = 32
    blocks: dict[str, Any] = field(default_factory=dict, metadata={"recipe_key": False})

    def __post_init__(self):
        self.evaluations = list(self.evaluations)
        unknown = [e for e in self.evaluations if e not in EVALUATIONS]  # the registry: fic.evaluations
        if unknown:
            raise ValueError(f"eval.evaluations: unknown {unknown}; valid: {list(EVALUATIONS)}")
        if not self.evaluations:
            raise ValueError("eval.evaluations: empty; name at least one of probe, lic, regret (or set enabled=false)")
        self.judge_settings()  # the judge's name and endpoint (`fic.judges.JudgeSettings` checks them)
        if self.backend not in BACKENDS:
            raise ValueError(f"eval.backend: unknown backend {self.backend!r}; valid: {', '.join(BACKENDS)}")
        if self.load_from not in LOAD_FROM:
            raise ValueError(f"eval.load_from: unknown {self.load_from!r}; valid: {', '.join(LOAD_FROM)}")
        if self.responses not in ("model", "data"):
            raise ValueError(f"eval.responses: {self.responses!r}; valid: model, data")
        _check_positive(self, "eval.", ("samples", "limit", "max_new_tokens", "response_tokens", "every_n_saves",
                                         "batch_size"))  # fmt: skip
        self.blocks = self._build_blocks(self.blocks)
        if self.log_samples < 0:
            raise ValueError(f"eval.log_samples: {self.log_samples!r}; pass 0 (no table) or a positive number")
        self.temperatures = [float(t) for t in self.temperatures]
        bad = [t for t in self.temperatures if t < 0]
        if bad:
            raise ValueError(f"eval.temperatures: {bad} are negative; use 0 for greedy decoding")
        if self.enabled:
            self.check_probe_datasets()

    def judge_settings(self) -> JudgeSettings:
        """The evaluation judge: `eval.judge`, `eval.judge_base_url`, `eval.judge_model`, `eval.judge_contrast`."""
        return JudgeSettings.of(self, "judge", where="eval.judge")

    def check_probe_datasets(self) -> None:
        """The one check that a probe has held-out sets to read (the config, the callback and eval-checkpoints)."""
        if "probe" in self.evaluations and not self.datasets:
            raise ValueError(
                "eval.datasets: empty, but eval.evaluations includes probe; name held-out sets, e.g. "
                "eval.datasets=[healthbench:PATH] (or drop probe from eval.evaluations)"
            )

    @staticmethod
    def _build_blocks(given: dict) -> dict[str, Any]:
        """Every registered block, from `given` (instances or mappings) or its defaults."""
        classes = config_blocks()
        unknown = sorted(set(given) - set(classes))
        if unknown:
            raise ValueError(f"eval: unknown config block {unknown}; valid: {sorted(classes)}")
        blocks = {}
        for name, cls in classes.items():
            value = given.get(name)
            blocks[name] = value if isinstance(value, cls) else cls(**(value or {}))
        return blocks

    def block(self, name: str) -> Any:
        """The config block of evaluation `name` (`config.block("lic").runs`)."""
        if name not in self.blocks:
            raise ValueError(f"evaluation {name!r} has no config block; blocks: {', '.join(self.blocks) or '(none)'}")
        return self.blocks[name]

    @classmethod
    def recipe_blocks(cls) -> dict[str, type]:
        """The nested blocks a recipe's `eval:` mapping may hold (`fic.recipe` parses them into `blocks`)."""
        return config_blocks()

    def to_dict(self) -> dict:
        """The recipe's shape: the shared keys, then each block as a nested mapping under its name."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "blocks"}
        return copy.deepcopy(values) | {name: asdict(block) for name, block in self.blocks.items()}

    @classmethod
    def from_dict(cls, values: dict) -> EvalConfig:
        """Build from a saved mapping (`to_dict`'s shape), ignoring keys this version does not know (files outlive
        code)."""
        values, classes = dict(values), config_blocks()
        blocks = {name: dict(values.pop(name, None) or {}) for name in classes}
        known = {name: {f.name for f in fields(block)} for name, block in classes.items()}
        blocks = {name: {k: v for k, v in given.items() if k in known[name]} for name, given in blocks.items()}
        known = {f.name for f in fields(cls)} - {"blocks"}
        return cls(**{k: v for k, v in values.items() if k in known}, blocks=blocks)


@dataclass
class LicConfig:
    """The `eval.lic` block: Lost-in-Conversation settings for checkpoint evaluation (`fic lic`'s defaults too).

    Args:
        data (`str`, defaults to `"synthetic"`):
            LiC tasks: `synthetic` (CPU task family) or a `NAME[:PATH]` source with shards.
        limit (`int`, defaults to `20`):
            LiC instructions.
        runs (`int`, defaults to `1`):
            Runs per instruction and mode (N).
        modes (`list[str]`, defaults to `["full", "concat", "sharded"]`):
            LiC modes.
        max_new_tokens (`int`, defaults to `64`):
            Generation budget per assistant turn.
        temperature (`float`, defaults to `0.0`):
            Sampling temperature of the assistant turns (use `> 0` with `runs > 1`, or all runs are equal).
    """

    data: str = "synthetic"
    limit: int = 20
    runs: int = 1
    modes: list[str] = field(default_factory=lambda: ["full", "concat", "sharded"])
    max_new_tokens: int = 64
    temperature: float = 0.0

    def __post_init__(self):
        _check_positive(self, "eval.lic.", ("limit", "runs", "max_new_tokens"))
        self.modes = list(self.modes)


@dataclass
class RegretConfig:
    """The `eval.regret` block: hidden-intent clarification settings for checkpoint evaluation.

    Args:
        scenario (`str`, defaults to `"products"`):
            Hidden-intent scenario: `products` or `ambigqa` (read from the shared data folder unless `data` names a
            file).
        data (`str` or `None`):
            Data file for the scenario.
        policy (`str`, defaults to `"model"`):
            The policy under test (`model`, `bag`, or a rule policy as a sanity baseline).
        limit (`int`, defaults to `10`):
            Episodes (each played under every user profile); `fic regret --limit`.
    """

    scenario: str = "products"
    data: str | None = None
    policy: str = "model"
    limit: int = 10

    def __post_init__(self):
        _check_positive(self, "eval.regret.", ("limit",))


def _check_positive(config, prefix: str, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{prefix}{name}: {value!r}; pass an integer >= 1")

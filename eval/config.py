"""The `eval:` block of a recipe: which evaluations run on each saved checkpoint, on what, and how."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalConfig:
    """Evaluation settings shared by the checkpoint callback and `fic eval-checkpoints`.

    Args:
        enabled (`bool`, defaults to `False`): evaluate every saved checkpoint during training.
        evaluations (`list[str]`): which evaluations to run: `probe`, `lic`, `regret`.
        datasets (`list[str]`): held-out sets for the probe, as `NAME` or `NAME:PATH`.
        temperatures (`list[float]`): sampling temperatures for the probe.
        samples (`int`): user turns sampled per item and temperature.
        limit (`int`): items per dataset.
        max_new_tokens (`int`): generation budget per user turn.
        judge (`str`): `heuristic`, `llm` or `cascade`.
        judge_base_url (`str` or `None`): OpenAI-compatible endpoint for the LLM judge.
        judge_model (`str` or `None`): model name at that endpoint.
        backend (`str`): generation backend for evaluation: `transformers` or `vllm`.
        seed (`int`): sampling seed.
    """

    enabled: bool = False
    evaluations: list[str] = field(default_factory=lambda: ["probe"])
    datasets: list[str] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.3, 0.7, 1.0])
    samples: int = 1
    limit: int = 20
    max_new_tokens: int = 64
    judge: str = "heuristic"
    judge_base_url: str | None = None
    judge_model: str | None = None
    backend: str = "transformers"
    seed: int = 0

    def __post_init__(self):
        valid = {"probe", "lic", "regret"}
        unknown = [e for e in self.evaluations if e not in valid]
        if unknown:
            raise ValueError(f"eval.evaluations: unknown {unknown}; valid: {sorted(valid)}")
        if self.judge not in ("heuristic", "llm", "cascade"):
            raise ValueError(f"eval.judge: unknown judge {self.judge!r}; valid: heuristic, llm, cascade")

"""Every follow-up judge by name, in one table, and the one block of settings that names a judge.

`JUDGES` maps a kind to its `JudgeSpec`: the factory that builds it, whether it needs an OpenAI-compatible chat
endpoint (`base_url` + `model`), one line about it, and whether its agreement with labelled real turns is measured
(`validation.json`, printed beside every rate). `make_judge` is a lookup in it.

`JudgeSettings` (kind, endpoint, contrast) is what every user of a judge builds: evaluation (`eval.judge*`), the
follow-up RL reward (`reward_judge*`), the collaboration SFT filter (`followup_judge*`) and the commands (`--judge*`,
`--contrast`). Its check is the one place the endpoint rule lives. Rates default to `DEFAULT_JUDGE` (`learned`, plain);
training signals to `TRAINING_JUDGE` (`strict`) with the contrast.

Adding a judge: a module with the judge class (`judge(cases) -> list[Verdict]`, `name`, `version`; see
`fic.judges.base.Judge`) and one row below. Factories import their module when called, so this table is cheap to
import (every command's flags read it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .base import Judge


@dataclass(frozen=True)
class JudgeSpec:
    """One row of `JUDGES`.

    Args:
        factory: `factory(settings, **options) -> Judge`; `options` are the endpoint client's settings (`fic judge`'s
            `--concurrency`, `--timeout`, ..., the cascade's `threshold`), which offline judges ignore.
        endpoint: needs `base_url` and `model` (an OpenAI-compatible chat endpoint).
        about: one line for `-h`, the README and errors.
        measured: its agreement with held-out labelled real turns is in `fic/judges/validation.json` (tests hold
            this flag to the file).
    """

    factory: Callable[..., Judge]
    endpoint: bool
    about: str
    measured: bool


def _heuristic(settings: JudgeSettings, **options) -> Judge:
    from .heuristic import HeuristicJudge  # numpy, the sentence encoder on first use

    return HeuristicJudge()


def _learned(settings: JudgeSettings, **options) -> Judge:
    from .learned import LearnedJudge

    return LearnedJudge(settings.kind)  # the kind names its shipped fitted file


def _llm(settings: JudgeSettings, threshold: float | None = None, **options) -> Judge:
    from .llm import LLMJudge  # imports torch (fic.generation): the offline judges need none of it

    return LLMJudge(settings.base_url, settings.model, **options)


def _cascade(settings: JudgeSettings, threshold: float = 0.85, **options) -> Judge:
    from .cascade import CascadeJudge
    from .learned import LearnedJudge

    return CascadeJudge(LearnedJudge("learned"), _llm(settings, **options), threshold=threshold)


JUDGES: dict[str, JudgeSpec] = {
    "heuristic": JudgeSpec(_heuristic, endpoint=False, measured=True,
                           about="offline rules + sentence embeddings; calls most small-model failures genuine"),
    "learned": JudgeSpec(_learned, endpoint=False, measured=True,
                         about="the rules + a classifier fitted on labelled real model turns: the judge of rates"),
    "strict": JudgeSpec(_learned, endpoint=False, measured=True,
                        about="the rules + a classifier refitted with trained models' turns at a stricter threshold: "
                        "the judge of training signals"),
    "llm": JudgeSpec(_llm, endpoint=True, measured=False,
                     about="an LLM behind an OpenAI-compatible chat endpoint, strict JSON verdicts"),
    "cascade": JudgeSpec(_cascade, endpoint=True, measured=False,
                         about="`learned` first, the LLM judge for the verdicts it is less sure of than `threshold`"),
}  # fmt: skip

JUDGE_KINDS: tuple[str, ...] = tuple(JUDGES)
# The type of every config field that names a judge: recipes and `--help-keys` see the choices, read from the table.
JudgeKind = Literal[JUDGE_KINDS]  # type: ignore[valid-type]
# The judge of every rate unless one is named: of the offline judges, the one whose calibrated estimate is tightest on
# labelled turns outside its fit (README, "Which judge"); the rules alone call 64% of failures genuine there.
DEFAULT_JUDGE = "learned"
# The judge of training signals (collab SFT filter, follow-up RL reward), always with the contrast by default: a
# trained model's generic turns must not pass.
TRAINING_JUDGE = "strict"


def offline_kinds() -> list[str]:
    return [kind for kind, spec in JUDGES.items() if not spec.endpoint]


@dataclass(frozen=True)
class JudgeSettings:
    """Which judge, where it runs, and whether it judges contrastively: the block every judge user builds.

    Args:
        kind: a key of `JUDGES`.
        base_url: the OpenAI-compatible chat endpoint of an endpoint judge (`llm`, `cascade`).
        model: the judge model's name at that endpoint.
        contrast: wrap the judge in `fic.judges.contrast.ContrastiveJudge` (genuine only if not also genuine after
            another item's answer).
        where: how the fields are spelled where they were set, for errors: `reward_judge` (fields
            `reward_judge_base_url`, ...), `eval.judge`, `--judge` (flags `--judge-base-url`, ...), or "" (Python
            keywords: `kind`, `base_url`, ...).
    """

    kind: str = DEFAULT_JUDGE
    base_url: str | None = None
    model: str | None = None
    contrast: bool = False
    where: str = ""

    def __post_init__(self):
        if self.kind not in JUDGES:
            raise ValueError(f"{self.name()}: unknown judge {self.kind!r}; valid: {', '.join(JUDGES)}")
        if JUDGES[self.kind].endpoint and not (self.base_url and self.model):
            missing = [self.name(part) for part in ("base_url", "model") if not getattr(self, part)]
            said = f"{self.name()} {self.kind}" if self.where.startswith("--") else f"{self.name()}={self.kind!r}"
            raise ValueError(
                f"{said} needs {' and '.join(missing)} (an OpenAI-compatible chat endpoint, e.g. a `vllm serve` of "
                f"the judge model); or use an offline judge ({', '.join(offline_kinds())})"
            )

    def name(self, part: str = "") -> str:
        """The spelling of one field where the settings were set: `name("base_url")` -> `reward_judge_base_url`,
        `eval.judge_base_url` or `--judge-base-url`."""
        if not self.where:
            return part or "kind"
        if not part:
            return self.where
        if self.where.startswith("--"):
            return "--contrast" if part == "contrast" else f"{self.where}-{part.replace('_', '-')}"
        return f"{self.where}_{part}"

    @classmethod
    def of(cls, config, prefix: str, where: str | None = None) -> JudgeSettings:
        """The settings spelled as fields `{prefix}`, `{prefix}_base_url`, `{prefix}_model`, `{prefix}_contrast` of
        `config` (a recipe's config dataclass; `where` names them in errors, default `prefix`)."""
        return cls(
            kind=getattr(config, prefix),
            base_url=getattr(config, f"{prefix}_base_url"),
            model=getattr(config, f"{prefix}_model"),
            contrast=bool(getattr(config, f"{prefix}_contrast")),
            where=where or prefix,
        )

    @classmethod
    def from_args(cls, args) -> JudgeSettings:
        """The settings of parsed `--judge`, `--judge-base-url`, `--judge-model`, `--contrast` flags."""
        return cls(kind=args.judge, base_url=getattr(args, "judge_base_url", None),
                   model=getattr(args, "judge_model", None), contrast=bool(getattr(args, "contrast", False)),
                   where="--judge")  # fmt: skip

    def build(self, foil_every_turn: bool = False, **options) -> Judge:
        """The judge; `options` go to an endpoint judge's client (offline judges ignore them); `foil_every_turn`:
        the contrast judges every turn after its foil too (the dense reward's scores)."""
        judge = JUDGES[self.kind].factory(self, **options)
        if not self.contrast:
            return judge
        from .contrast import ContrastiveJudge

        return ContrastiveJudge(judge, foil_every_turn=foil_every_turn)


def make_judge(kind: str = DEFAULT_JUDGE, base_url: str | None = None, model: str | None = None,
               contrast: bool = False, **options) -> Judge:  # fmt: skip
    """The judge `kind` (a key of `JUDGES`); `llm` and `cascade` need `base_url` and `model`; `contrast` wraps it in
    `ContrastiveJudge`; `options` go to an endpoint judge (`threshold` for the cascade, `LLMJudge`'s settings)."""
    return JudgeSettings(kind, base_url, model, contrast).build(**options)

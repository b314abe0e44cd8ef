"""The evaluation time `train.py --plan` prints: a cost model of each evaluation a recipe runs, against `ddp_timeout`.

Minutes = generated tokens / (assumed tokens per second per process x processes) / 60. Generated tokens are, per
evaluation: contexts x samples (1 at temperature 0) summed over temperatures x controls x `max_new_tokens` for the
user turns, plus contexts x `response_tokens` where the model writes the answers (`responses: model`), plus for
Lost in Conversation tasks x runs x answer turns (1 in FULL and CONCAT, one per shard in SHARDED) x
`eval.lic.max_new_tokens`. Every evaluation is split over the processes (each rank its share of the chunks), so the
time divides by their number. The rate is an assumption, not a measurement: `TOKENS_PER_SECOND` (transformers'
batched `generate` of a 2-3B model on one GPU), set with `--tokens-per-second`; the judge's time is not counted (an
LLM judge adds its own). Under multi-process training the ranks meet at collectives during and after an evaluation:
one longer than `ddp_timeout` (TrainingArguments, 1800 s by default) risks the launch's kill, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from fic.eval_config import EvalConfig

TOKENS_PER_SECOND = 250.0  # assumed generated tokens per second per process (see the module docstring)
SHARDS_ASSUMED = 4  # answer turns of a SHARDED episode when the LiC data cannot be read


@dataclass
class EvalCost:
    """One evaluation's generated tokens and when it runs (`before training`, `after training`, `at each of N
    checkpoints`)."""

    name: str
    when: str
    tokens: int

    def minutes(self, tokens_per_second: float, processes: int) -> float:
        return self.tokens / (tokens_per_second * max(processes, 1)) / 60


def turns_per_context(ev: EvalConfig, controls: int = 1) -> int:
    """User turns sampled per context: `samples` per temperature (1 when greedy), for each control."""
    return sum(1 if t == 0 else ev.samples for t in ev.temperatures) * controls


def probe_controls(ev: EvalConfig) -> int:
    """The probe's controls, with `reseed` (the seed floor of % changed) added when `truncate` or `question` runs."""
    controls = list(dict.fromkeys(ev.perturbations))
    return len(controls) + (1 if {"truncate", "question"} & set(controls) else 0)


def contexts(items: list, ev: EvalConfig, field: str) -> int:
    """Contexts the evaluation reads: the rows of its readable datasets, `limit` each for those not readable."""
    return sum(i.rows if i.rows is not None else ev.limit for i in items if i.role == "eval" and i.field == field)


def lic_answer_turns(items: list, lic) -> float:
    """Answer turns per LiC task over its modes: 1 in FULL and CONCAT, the shards in SHARDED (their mean over the
    readable tasks, `SHARDS_ASSUMED` otherwise)."""
    from fic.data.sharding import shard_math_problem

    shards = []
    for item in (i for i in items if i.role == "eval" and i.field == "eval.lic.data"):
        for record in item.records:
            found = record.meta.get("shards") or shard_math_problem(record.messages[-1]["content"])
            shards.append(len(found) if found else 1)
    mean = sum(shards) / len(shards) if shards else SHARDS_ASSUMED
    return sum(mean if mode == "sharded" else 1 for mode in lic.modes)


def costs(recipe, items: list, fired: int, outside_saves: int) -> list[EvalCost]:
    """The evaluations of a recipe: the held-out rate before and after training (`outside_saves` = 2) and the
    in-training evaluations at each of `fired` checkpoints."""
    ev = recipe.get(EvalConfig)
    found = []
    heldout = contexts(items, ev, "eval.datasets")
    if outside_saves and heldout:
        turns = heldout * turns_per_context(ev) * ev.max_new_tokens
        answers = heldout * ev.response_tokens if ev.responses == "model" else 0
        found += [EvalCost("held-out rate", "before training", turns + answers),
                  EvalCost("held-out rate", "after training", turns)]  # fmt: skip
    if fired and ev.enabled:
        when = f"at each of {fired} checkpoints"
        if "probe" in ev.evaluations and heldout:
            answers = heldout * ev.response_tokens if ev.responses == "model" else 0
            tokens = heldout * turns_per_context(ev, probe_controls(ev)) * ev.max_new_tokens + answers
            found.append(EvalCost("probe", when, tokens))
        if "lic" in ev.evaluations:
            lic = ev.block("lic")
            tasks = sum(i.rows if i.rows is not None else lic.limit
                        for i in items if i.role == "eval" and i.field == "eval.lic.data") or lic.limit  # fmt: skip
            found.append(
                EvalCost("lic", when, round(tasks * lic.runs * lic_answer_turns(items, lic) * lic.max_new_tokens))
            )
    return found


def time_lines(recipe, args, items: list, fired: int, outside_saves: int, processes: int,
               tokens_per_second: float = TOKENS_PER_SECOND) -> list[str]:  # fmt: skip
    """The plan's lines: each evaluation's generated tokens and estimated minutes, then one warning line per
    evaluation that would pass `ddp_timeout` under several processes."""
    found = costs(recipe, items, fired, outside_saves)
    if not found:
        return []
    lines = [f"evaluation time (assumed {tokens_per_second:g} generated tokens/s per process, --tokens-per-second; "
             f"split over {processes} process(es); judge time not counted):"]  # fmt: skip
    timeout = getattr(args, "ddp_timeout", 1800) or 1800
    for cost in found:
        minutes = cost.minutes(tokens_per_second, processes)
        lines.append(f"  {cost.name} {cost.when}: {cost.tokens} tokens, ~{minutes:.1f} min")
    for cost in found:
        seconds = cost.minutes(tokens_per_second, processes) * 60
        if processes > 1 and seconds > timeout:
            lines.append(
                f"warning: the {cost.name} evaluation {cost.when} (~{seconds / 60:.0f} min) would pass ddp_timeout "
                f"({timeout / 60:.0f} min): set ddp_timeout={int(seconds * 2)} or lower eval.limit / eval.samples"
            )
    return lines

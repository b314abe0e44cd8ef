"""`fic regret`: hidden-intent clarification episodes, scored against a reference clarification policy.

Each episode (an under-specified request, its possible intents, the hidden one) is played under each user behaviour
profile twice: once by the reference policy (greedy expected information gain, stops when the value of information
is below the per-turn cost) and once by the policy under test, with identically seeded simulated users. The value of
an episode is V = 1[intent resolved] - cost x clarification turns and the regret is V(reference) - V(policy).
The reference plans with the profile's reply model (how such users answer, never what they want), so under its own
model it never does worse in expectation than answering at once; on few episodes a baseline can still beat it.

Output: OUT/episodes.jsonl (one line per episode x profile, resumable after a crash), OUT/settings.json (the settings;
a rerun must match them), OUT/summary.json (metrics overall and per profile; `regret` at the top level). An episode's
profiles share its request, so the intervals count episodes, not episodes x profiles (`fic.eval.clarify.stats`):
`regret_interval` (cluster bootstrap, not estimable under 10 episodes) and `resolution` (clustered Wilson), beside
`regret_parts` (`fic.metrics.regret_parts`). `--first N` adds the same metrics on the first N episodes of the draw
(those a `--limit N` run plays) under `first`; `--policy bag` adds BAG's first-turn `faithfulness`.

    fic regret --scenario products --policy always_answer --limit 50 --seed 0 --out runs/regret
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path

from fic import cli_args, metric_names
from fic.cli_args import backend_name
from fic.errors import FicError
from fic.eval.clarify.ambigqa import AmbigQAScenario
from fic.eval.clarify.bag import check_belief_temperature
from fic.eval.clarify.embed import get_embedder
from fic.eval.clarify.episode import run_episode
from fic.eval.clarify.model import load_chat_model
from fic.eval.clarify.policies import POLICIES, ReferencePolicy, get_policy
from fic.eval.clarify.products import ProductScenario
from fic.eval.clarify.scenarios import SCENARIOS, Scenario, resolve_data_path
from fic.eval.clarify.stats import episode_intervals, faithfulness, first_turns
from fic.eval.clarify.tracker import LLMTracker, RuleTracker
from fic.eval.clarify.user import PROFILES, LLMUser, SimulatedUser, check_profile
from fic.eval.report import report_dir
from fic.eval_config import EvalConfig, RegretConfig
from fic.jsonl import append_rows, check_settings, load_keyed, write_json, writer_lock
from fic.metrics import ineffective_clarification_rate, regret, regret_parts, stopping_error_rates

logger = logging.getLogger(__name__)


SCENARIO_CLASSES = {"products": ProductScenario, "ambigqa": AmbigQAScenario}  # the scenarios of `SCENARIOS`


def get_scenario(name: str) -> Scenario:
    """The scenario object for `name` (a key of `SCENARIO_CLASSES`)."""
    if name not in SCENARIO_CLASSES:
        raise ValueError(f"scenario={name!r} is unknown; choose one of {list(SCENARIOS)}.")
    return SCENARIO_CLASSES[name]()


def add_arguments(parser: argparse.ArgumentParser) -> None:

    parser.add_argument("--scenario", required=True, choices=SCENARIOS, help="products or ambigqa")
    parser.add_argument(
        "--data",
        default=None,
        help="data file (default: the shared data folder, via FIC_SHARED_DATA or ../shared/data)",
    )
    parser.add_argument("--policy", required=True, choices=POLICIES, help="the policy under test")
    cli_args.add_model_arguments(parser, required=False, tokenizer=False,
                                 help=f"{cli_args.MODEL_HELP}; for --policy model/bag")  # fmt: skip
    parser.add_argument("--profile", default="all", help=f"user profile: {', '.join(PROFILES)} or all")
    cli_args.add_limit_argument(parser, RegretConfig().limit, help="episodes (each played under every "
                                "profile)")  # fmt: skip
    parser.add_argument(
        "--first",
        type=int,
        default=None,
        help="also summarise the first FIRST episodes of the draw (those a --limit FIRST run plays), under `first` "
        "in summary.json: a cheap policy scored on the episodes of a smaller model-policy run",
    )
    cli_args.add_seed_argument(parser, required=True)
    cli_args.add_out_argument(parser)
    parser.add_argument("--cost", type=float, default=0.1, help="per-turn cost c in V = 1[resolved] - c x turns")
    parser.add_argument("--max-turns", type=int, default=6, help="clarification turns before an episode ends")
    parser.add_argument("--max-intents", type=int, default=10, help="products: candidates per episode")
    cli_args.add_user_arguments(parser, endpoint=False, model_help="model for --user/--tracker llm (default: --model)")
    parser.add_argument(
        "--tracker",
        default="rules",
        choices=("rules", "llm"),
        help="state tracker for the tested policy (the reference always uses the rules)",
    )
    parser.add_argument(
        "--embedder",
        default="minilm",
        choices=("minilm", "none"),
        help="embedding fallback of the rule-based user for questions its rules cannot place",
    )
    parser.add_argument("--k", type=int, default=5, help="bag: samples forming the belief state")
    parser.add_argument("--agree", type=float, default=0.7, help="bag: BAG+ answers when this share agrees")
    parser.add_argument(
        "--belief-temperature",
        type=float,
        default=1.0,
        help="bag: sampling temperature of the K belief samples, at the first turn and in BAG+ (> 0)",
    )
    cli_args.add_token_arguments(parser, EvalConfig().max_new_tokens, turn="model/bag: tokens per generated reply")


def _config(args) -> dict:
    keys = (
        "scenario",
        "data",
        "policy",
        "model",
        "profile",
        "seed",
        "cost",
        "max_turns",
        "max_intents",
        "user",
        "user_model",
        "tracker",
        "embedder",
        "k",
        "agree",
        "belief_temperature",
        "max_new_tokens",
    )
    return {k: getattr(args, k) for k in keys}


def _check_args(args) -> list[str]:
    if args.limit < 1:
        raise ValueError(f"--limit={args.limit}; pass a positive number of episodes.")
    if args.first is not None and not 1 <= args.first <= args.limit:
        raise ValueError(f"--first={args.first}; pass a number of episodes from 1 to --limit ({args.limit}).")
    if args.cost < 0:
        raise ValueError(f"--cost={args.cost} is negative; pass a per-turn cost >= 0.")
    if args.max_turns < 1:
        raise ValueError(f"--max-turns={args.max_turns}; pass at least 1.")
    if args.k < 1 or not 0 < args.agree <= 1 or args.max_new_tokens < 1:
        raise ValueError(
            f"--k={args.k} / --agree={args.agree} / --max-new-tokens={args.max_new_tokens}: need "
            "k >= 1, 0 < agree <= 1 and max-new-tokens >= 1."
        )
    check_belief_temperature(args.belief_temperature)
    if args.policy in ("model", "bag") and not args.model:
        raise ValueError(f"--policy {args.policy} needs --model PATH (a local checkpoint or hub id).")
    if (args.user == "llm" or args.tracker == "llm") and not (args.user_model or args.model):
        raise ValueError("--user llm / --tracker llm need a model: pass --user-model PATH (or --model PATH).")
    return list(PROFILES) if args.profile == "all" else [check_profile(args.profile)]


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def summarize_group(records: list[dict]) -> dict:
    """The regret metrics over `records` (episode records carrying their reference's value), with intervals
    clustered by episode (`fic.eval.clarify.stats.episode_intervals`)."""
    questions = [q for r in records for q in r["questions"]]
    return {
        "episodes": len(records),
        "regret": regret([r["reference"]["value"] for r in records], [r["value"] for r in records]),
        "regret_parts": regret_parts(records),
        "value": _mean(r["value"] for r in records),
        "reference_value": _mean(r["reference"]["value"] for r in records),
        **episode_intervals(records),
        "reference_resolution_rate": _mean(float(r["reference"]["resolved"]) for r in records),
        "turns_mean": _mean(r["turns"] for r in records),
        "reference_turns_mean": _mean(r["reference"]["turns"] for r in records),
        "user_tokens_mean": _mean(r["user_tokens"] for r in records),
        "ineffective_clarification": ineffective_clarification_rate(questions),
        "stopping_errors": stopping_error_rates([r["stopping"] for r in records]),
        "abstain_rate": _mean(float(r["final"]["act"] == "abstain") for r in records),
        "out_of_turns_rate": _mean(float(r["final"]["act"] == "out_of_turns") for r in records),
    }


def summarize(records: list[dict], header: dict, first: int | None = None, k: int | None = None) -> dict:
    """summary.json of a run: `summarize_group` overall (with `resolution_rate`) and `per_profile`; with `first`,
    the same on the first `first` episodes (in the order of `records`) under `first`; with `k` (a BAG run), the
    faithfulness of its first decisions (`fic.eval.clarify.stats.faithfulness`) under `faithfulness`."""
    overall = summarize_group(records)
    profiles = list(dict.fromkeys(r["profile"] for r in records))
    per_profile = {p: summarize_group([r for r in records if r["profile"] == p]) for p in profiles}
    summary = {**header, **overall, "resolution_rate": overall["resolution"]["rate"], "per_profile": per_profile}
    if first is not None:
        ids = set(list(dict.fromkeys(r["episode_id"] for r in records))[:first])
        summary["first"] = summarize_group([r for r in records if r["episode_id"] in ids])
    if k is not None:
        summary["faithfulness"] = faithfulness(first_turns(records), k)
    return summary


class _Factory:
    """Builds users and trackers for one run."""

    def __init__(self, args, scenario):
        self.args, self.scenario = args, scenario
        self._model = self._user_model = None
        self._embedder = None
        if args.embedder != "none":
            self._embedder = get_embedder(args.embedder)

    def model(self):
        if self._model is None and self.args.model:
            self._model = self._load(self.args.model)
        return self._model

    def user_model(self):
        if self.args.user_model in (None, self.args.model):
            return self.model()
        if self._user_model is None:
            self._user_model = self._load(self.args.user_model)
        return self._user_model

    def _load(self, name: str):
        args = self.args
        return load_chat_model(name, backend_name(args), args.base_url, getattr(args, "batch_size", None),
                               getattr(args, "max_batch_tokens", None))  # fmt: skip

    def user(self, episode, profile: str):
        if self.args.user == "llm":
            return LLMUser(self.scenario, episode, profile, self.user_model(), seed=self.args.seed)
        rng = random.Random(f"user|{self.args.seed}|{episode.id}|{profile}")
        return SimulatedUser(self.scenario, episode, profile, rng, embedder=self._embedder)

    def tracker(self):
        if self.args.tracker == "llm":
            return LLMTracker(self.scenario, self.user_model())
        return RuleTracker(self.scenario)


def run(args) -> int:
    """`fic regret`: `run_regret`, with a setup mistake printed as one line (exit status 2)."""
    try:
        run_regret(args)
    except SetupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


class SetupError(ValueError):
    """A `fic regret` setting that cannot run (bad arguments, data, policy); raised before any episode."""


def settings(scenario: str, policy: str, out: str | Path, **values) -> argparse.Namespace:
    """The settings `run_regret` takes, as `fic regret` would parse them: the command's defaults, with `values` (the
    flags' names with underscores: `model`, `limit`, `seed`, `data`, ...) on top."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--scenario", scenario, "--policy", policy, "--seed", str(values.pop("seed", 0)),
                              "--out", str(out)])  # fmt: skip
    unknown = [k for k in values if not hasattr(args, k)]
    if unknown:
        raise ValueError(f"regret settings: unknown {unknown}; valid: {sorted(vars(args))}")
    for key, value in values.items():
        setattr(args, key, value)
    return args


def run_regret(args) -> dict:
    """Play the episodes of `args` (resuming `OUT/episodes.jsonl`), write `OUT/summary.json` and return the summary.
    Raises `SetupError` when a setting cannot run, before any episode is played."""
    try:
        profiles = _check_args(args)
        scenario = get_scenario(args.scenario)
        if args.scenario == "products":
            scenario.max_intents = args.max_intents
        data_path = resolve_data_path(args.scenario, args.data)
        data = scenario.load(data_path)
        episodes = scenario.build_episodes(data, args.limit, args.seed)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        factory = _Factory(args, scenario)
        reference = ReferencePolicy(scenario, args.cost, args.max_turns)
        policy = reference
        if args.policy != "reference":
            policy = get_policy(
                args.policy,
                scenario,
                args.cost,
                args.max_turns,
                model=factory.model(),
                k=args.k,
                agree=args.agree,
                max_new_tokens=args.max_new_tokens,
                belief_temperature=args.belief_temperature,
            )
        if args.user == "llm" or args.tracker == "llm":
            factory.user_model()
        check_settings(out, _config(args))  # last: a setup error must not pin the folder to bad settings
    except (ValueError, FicError) as err:
        raise SetupError(str(err)) from None
    path = out / "episodes.jsonl"
    lock = writer_lock(path)  # noqa: F841 - held until this function returns: a second run into OUT is refused
    done = load_keyed(path)
    units = [(i, ep, p) for i, ep in enumerate(episodes) for p in profiles]
    todo = [u for u in units if f"{u[1].id}|{u[2]}" not in done]
    if done:
        logger.info("resuming %s: %d of %d episodes already done", path, len(units) - len(todo), len(units))
    from tqdm.auto import tqdm  # tqdm (~40 ms): `fic regret` starts in ~50 ms without it

    for i, episode, profile in tqdm(todo, desc=f"regret {args.scenario}/{args.policy}", disable=None):
        seed = args.seed * 100_003 + i
        ref = run_episode(
            scenario,
            episode,
            reference,
            factory.user(episode, profile),
            RuleTracker(scenario),
            args.cost,
            args.max_turns,
            seed=seed,
            profile=profile,
        )
        if policy is reference:
            rec = dict(ref)
        else:
            rec = run_episode(
                scenario,
                episode,
                policy,
                factory.user(episode, profile),
                factory.tracker(),
                args.cost,
                args.max_turns,
                seed=seed,
                profile=profile,
            )
        rec = {
            "key": f"{episode.id}|{profile}",
            "profile": profile,
            **rec,
            "reference": {k: ref[k] for k in ("value", "resolved", "turns", "user_tokens")},
        }
        rec["regret"] = rec["reference"]["value"] - rec["value"]
        append_rows(path, [rec])
        done[rec["key"]] = rec
    records = [done[f"{ep.id}|{p}"] for _, ep, p in units]
    header = {
        "scenario": args.scenario,
        "policy": args.policy,
        "profiles": profiles,
        "seed": args.seed,
        "cost": args.cost,
        "max_turns": args.max_turns,
        "data": str(data_path),
        "model": args.model,
        "belief_temperature": args.belief_temperature,
    }
    summary = summarize(records, header, first=args.first, k=args.k if args.policy == "bag" else None)
    write_json(out / "summary.json", summary)
    logger.info(
        "%s/%s: regret %.4f  value %.4f (reference %.4f)  resolution %.3f  turns %.2f  -> %s",
        args.scenario,
        args.policy,
        summary["regret"],
        summary["value"],
        summary["reference_value"],
        summary["resolution_rate"],
        summary["turns_mean"],
        out / "summary.json",
    )
    return summary


def evaluate(backend, tokenizer, config, out_dir: Path, model_path=None, progress: bool = False) -> dict[str, float]:
    """Regret as a registered evaluation (`fic.evaluations`): `run_regret` on the checkpoint folder (it loads its
    model from a path, not from `backend`), flat metrics."""

    if model_path is None:
        raise ValueError("eval.evaluations includes regret, which loads the model from its checkpoint folder; "
                         "no folder was given (evaluate a saved checkpoint)")  # fmt: skip
    block = config.block("regret")
    extra = {"data": block.data} if block.data else {}
    summary = run_regret(settings(block.scenario, block.policy, out_dir, model=str(model_path), limit=block.limit,
                                  seed=config.seed, **extra))  # fmt: skip
    report_dir("regret", out_dir)
    metrics = {metric_names.REGRET_MEAN: summary["regret"], metric_names.REGRET_VALUE: summary["value"]}
    for key in ("resolution_rate", "turns_mean", "abstain_rate"):
        if key in summary:
            metrics[metric_names.regret_metric(key)] = summary[key]
    for key, name in (("ineffective_clarification", "ineffective_rate"), ("stopping_errors", "stopping_error_rate")):
        if isinstance(summary.get(key), dict) and "rate" in summary[key]:
            metrics[metric_names.regret_metric(name)] = summary[key]["rate"]
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fic regret", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""Lost-in-Conversation simulation: FULL, CONCAT and SHARDED episodes, N runs per instruction, P / A90 / U90-10.

FULL gives the model the fully specified instruction in one turn; CONCAT gives all shards in one turn, as a list;
SHARDED has a simulated user reveal one shard per turn while the model answers each turn. A sharded episode ends on
the first correct answer attempt, or after the model's reply to the last shard. Each episode scores 1 or 0; P, A90
and U90-10 follow the Lost in Conversation paper (`fic.metrics.lic_scores`); `sharded_over_full` = p_sharded / p_full
(one model, one evaluation: not a recovery, which needs a before and an after, `fic.metrics.recovery`).

The rule-based user reveals each shard verbatim; `--user llm` rephrases it through an OpenAI-compatible chat
endpoint, as the paper's simulator does. Episodes are generated in fixed chunks of tasks, so sampling seeds do not
depend on what a previous, interrupted run finished: a rerun with the same `--out` skips finished chunks, redoes a
partial one, and ends with exactly the episodes of an uninterrupted run. Under a launch of several processes
(`accelerate launch -m fic.cli lic ...`) each process plays its share of the chunks into its own part, and the main
process merges them into the `episodes.jsonl` one process would write (`fic.distributed.RankedRows`).

`evaluate_views` is the same episodes as one greedy measurement of a model on synthetic tasks (p_full per phrasing,
p_concat, p_sharded and per-turn accuracy), what the VASD recipe reports before and after training.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fic import cli_args, metric_names
from fic.chat import concat_view, full_view, render, turn_end_strings
from fic.cli_args import ArgumentError, backend_kwargs, backend_name, parse_list
from fic.data import check_answer, load_source
from fic.data.sharding import shard_math_problem
from fic.data.synthetic import make_tasks
from fic.distributed import RankedRows, check_same_on_every_rank, end_launch, launch_state, main_process_first, on_main
from fic.eval_config import EvalConfig, LicConfig
from fic.generation import HFBackend, SamplingParams, get_backend
from fic.jsonl import check_settings, load_done, write_json
from fic.metrics import lic_scores
from fic.modeling import load_tokenizer

from .report import report_dir
from .simulated_user import ChatEndpoint, ChatModelUser

logger = logging.getLogger(__name__)

MODES = ("full", "concat", "sharded")


@dataclass
class LiCTask:
    """One instruction: its fully specified form, its shards, and a checker for a response."""

    id: str
    full_prompt: str
    shards: list[str]
    check: Callable[[str], bool]

    def opening(self, mode: str) -> list[dict]:
        if mode == "full":
            return full_view(self.full_prompt)
        if mode == "concat":
            return concat_view(self.shards)
        return full_view(self.shards[0])


def tasks_from_synthetic(n: int, seed: int = 0, split: str = "test") -> list[LiCTask]:
    """Tasks from `fic.data.synthetic` (the CPU task family)."""
    return [LiCTask(t.id, t.full_prompt, list(t.shards), t.check) for t in make_tasks(n, seed=seed, split=split)]


def tasks_from_source(spec: str, limit: int | None = None) -> list[LiCTask]:
    """Tasks from a dataset source: records with `meta["shards"]` as they are, GSM8K through the rule sharder.

    Records without an automatic answer checker cannot be scored offline and are skipped with a count.
    """
    records = load_source(spec, limit=limit)
    tasks, skipped = [], 0
    for record in records:
        shards = record.meta.get("shards")
        if not shards and record.verifier.get("type") == "gsm8k":
            shards = shard_math_problem(record.messages[-1]["content"])
        if not shards or check_answer(record, "") is None:  # None: the source has no automatic checker
            skipped += 1
            continue
        tasks.append(LiCTask(record.id, record.messages[-1]["content"], list(shards), _checker(record)))
    if skipped:
        logger.warning("%s: skipped %d of %d records (no shards or no automatic checker)", spec, skipped, len(records))
    return tasks


def _checker(record):
    return lambda text: bool(check_answer(record, text))


class RuleUser:
    """Reveals shard k verbatim at turn k."""

    name = "rule"

    def reveal(self, task: LiCTask, turn: int, history: list[dict]) -> str:
        return task.shards[turn]


class LLMUser(ChatModelUser):
    """Rephrases shard k as a natural user message through an OpenAI-compatible chat endpoint."""

    PROMPT = (
        "You are simulating a user talking to an assistant. Reveal ONLY the following piece of information, "
        "rephrased naturally as a short user message, without adding any other detail or answering anything:\n\n{shard}"
    )

    def __init__(self, base_url: str, model: str):
        super().__init__(ChatEndpoint(base_url, model), seed=None, max_new_tokens=None)

    def reveal(self, task: LiCTask, turn: int, history: list[dict]) -> str:
        return self.say(self.PROMPT.format(shard=task.shards[turn]))


def run_episodes(backend, tokenizer, tasks, mode, run, temperature, max_new_tokens, seed, user, play_to_end=False,
                 keep_special_tokens=True) -> list[dict]:  # fmt: skip
    """Play one chunk of episodes of `mode` in lockstep (one batched generation per turn); return their rows.

    A sharded episode stops at its first correct answer, or, with `play_to_end`, goes on to the last shard (the same
    score, and a reply at every turn for per-turn accuracy).
    """
    stop = turn_end_strings(tokenizer, "assistant")
    generate_kwargs = {} if keep_special_tokens else {"keep_special_tokens": False}
    params = SamplingParams(n=1, temperature=temperature, max_new_tokens=max_new_tokens, stop=stop, seed=seed)
    rows = [
        {"task_id": t.id, "mode": mode, "run": run, "turns": [], "correct": False, "messages": t.opening(mode)}
        for t in tasks
    ]
    n_turns = 1 if mode != "sharded" else max(len(t.shards) for t in tasks)
    active = list(range(len(tasks)))
    for turn in range(n_turns):
        if turn > 0:
            active = [i for i in active if turn < len(tasks[i].shards) and (play_to_end or not rows[i]["correct"])]
            for i in active:
                reveal = user.reveal(tasks[i], turn, rows[i]["messages"])
                rows[i]["messages"].append({"role": "user", "content": reveal})
        if not active:
            break
        prompts = [render(tokenizer, rows[i]["messages"], add_generation_prompt=True) for i in active]
        params.seed = seed * 1000 + turn
        outputs = backend.generate(prompts, params, **generate_kwargs)
        for i, out in zip(active, outputs):
            reply = out[0].strip()
            correct = tasks[i].check(reply)
            rows[i]["messages"].append({"role": "assistant", "content": reply})
            rows[i]["turns"].append({"turn": turn, "reply": reply, "correct": correct})
            rows[i]["correct"] = rows[i]["correct"] or correct
    for row in rows:
        row["n_turns"] = len(row["turns"])
    return rows


@dataclass
class ViewScores:
    """Greedy scores of one model on tasks: P per view, per-turn accuracy, and the sharded transcripts."""

    p_full: float
    p_concat: float
    p_sharded: float
    p_phrasings: list[float]
    sharded_turn_accuracy: list[float]
    sharded_final_turn: float
    sharded_turns: list[list[str]] = field(repr=False, default_factory=list)

    def summary(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "sharded_turns"}


def evaluate_views(
    model, tokenizer, tasks, batch_size: int = 256, backend=None, max_new_tokens: int = 8
) -> ViewScores:
    """p_full, p_concat and p_sharded of `model` on synthetic tasks (`fic.data.synthetic`) with greedy decoding.

    The episodes of `run_episodes`, all tasks in one chunk: FULL once per phrasing (p_full is the canonical one),
    CONCAT, and SHARDED played to the last shard with the rule user, so every turn has a reply (per-turn accuracy);
    an episode is correct when any answer attempt is, as in `run_lic`. Replies are decoded without special tokens.
    `backend` (a `fic.generation` backend) replaces the transformers backend built from `model`.
    """
    if backend is None:
        backend = HFBackend(model, tokenizer, batch_size=batch_size)
    n = max(len(tasks), 1)

    def play(lic_tasks, mode, play_to_end=False):
        return run_episodes(backend, tokenizer, lic_tasks, mode, 0, 0.0, max_new_tokens, 0, RuleUser(),
                            play_to_end=play_to_end, keep_special_tokens=False)  # fmt: skip

    def as_lic(task, prompt):
        return LiCTask(task.id, prompt, list(task.shards), task.check)

    phrasings = []
    for k in range(len(tasks[0].phrasings) if tasks else 0):
        rows = play([as_lic(t, t.phrasings[k]) for t in tasks], "full")
        phrasings.append(sum(r["correct"] for r in rows) / n)
    concat = play([as_lic(t, t.full_prompt) for t in tasks], "concat") if tasks else []
    sharded = play([as_lic(t, t.full_prompt) for t in tasks], "sharded", play_to_end=True) if tasks else []
    turns = [[turn["reply"] for turn in r["turns"]] for r in sharded]
    n_turns = len(sharded[0]["turns"]) if sharded else 0
    per_turn = [sum(r["turns"][k]["correct"] for r in sharded) / n for k in range(n_turns)]
    return ViewScores(
        p_full=phrasings[0] if phrasings else 0.0,
        p_concat=sum(r["correct"] for r in concat) / n,
        p_sharded=sum(r["correct"] for r in sharded) / n,
        p_phrasings=phrasings,
        sharded_turn_accuracy=per_turn,
        sharded_final_turn=per_turn[-1] if per_turn else 0.0,
        sharded_turns=turns,
    )


def summarize(rows: list[dict], modes: list[str]) -> dict:
    """P / A90 / U90-10 per mode from episode rows, and the ratios `sharded_over_full` = p_sharded / p_full and
    `concat_over_full` = p_concat / p_full (where p_full > 0)."""
    summary: dict = {"modes": {}}
    for mode in modes:
        by_task: dict[str, list[float]] = {}
        for row in rows:
            if row["mode"] == mode:
                by_task.setdefault(row["task_id"], []).append(1.0 if row["correct"] else 0.0)
        summary["modes"][mode] = {**lic_scores(by_task), "episodes": sum(len(v) for v in by_task.values())}
    p = {m: summary["modes"][m]["P"] for m in modes}
    for mode in modes:
        summary[f"p_{mode}"] = p[mode]
    if p.get("full"):
        summary["sharded_over_full"] = p.get("sharded", 0.0) / p["full"]
        summary["concat_over_full"] = p.get("concat", 0.0) / p["full"]
    return summary


def run_lic(backend, tokenizer, tasks: list[LiCTask], out_dir: str | Path, modes=MODES, runs: int = 1,
            temperature: float = 0.0, max_new_tokens: int = 64, seed: int = 0, user=None, chunk_size: int = 16,
            progress: bool = True, model: str | None = None, split: bool = False) -> dict:  # fmt: skip
    """Simulate every task under each mode `runs` times; write episodes.jsonl, summary.json, lic.png; return summary.

    `model` (the model's name), the temperature, token limit, seed, chunk size and user are stored beside the
    episodes: a rerun into `out_dir` resumes only with the same ones (`fic.jsonl.check_settings`); more modes, runs
    or tasks extend the run. `split`: under a launch of several processes, each takes its share of the chunks (every
    process calls `run_lic` with the same arguments); the episodes are merged into the file one process would write
    (`fic.distributed.RankedRows`) and the main process writes the summary, which every process returns.
    """
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"modes: unknown mode {mode!r}; valid: {', '.join(MODES)}")
    out_dir = Path(out_dir)
    path = out_dir / "episodes.jsonl"
    user = user or RuleUser()
    settings = {
        "model": model, "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
        "chunk_size": chunk_size, "user": getattr(user, "name", type(user).__name__),
    }  # fmt: skip
    check_same_on_every_rank("fic lic", {**settings, "modes": list(modes), "runs": runs, "tasks": [t.id for t in tasks]},
                             split)  # fmt: skip
    with main_process_first(split):
        check_settings(out_dir, settings)
    episodes = RankedRows(path, episode_key, split)
    chunks = [tasks[i : i + chunk_size] for i in range(0, len(tasks), chunk_size)]

    def play(job: tuple) -> list[dict]:
        # a chunk partly written by an interrupted run is replayed whole (same seeds) and only its missing rows kept
        mode, run, c = job
        return run_episodes(backend, tokenizer, chunks[c], mode, run, temperature, max_new_tokens, seed + 7919 * run,
                            user)  # fmt: skip

    jobs = [(mode, run, c) for mode in modes for run in range(runs) for c in range(len(chunks))]
    rows = episodes.run(jobs, lambda job: [(job[0], job[1], t.id) for t in chunks[job[2]]], play, desc="lic",
                        progress=progress)  # fmt: skip
    episodes.merge(rows)

    def summarize_run() -> dict:
        summary = summarize(load_done(path), list(modes))
        summary.update(runs=runs, temperature=temperature, n_tasks=len(tasks))
        write_json(out_dir / "summary.json", summary)
        plot(summary, out_dir / "lic.png")
        return summary

    return on_main(summarize_run, split)


def episode_key(row: dict) -> tuple:
    """The identity of one episode in `episodes.jsonl`: mode, run and task."""
    return (row["mode"], row["run"], row["task_id"])


def plot(summary: dict, path: Path) -> None:
    import matplotlib  # matplotlib: heavy, only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary["modes"])
    fig, ax = plt.subplots(figsize=(4.5, 3))
    p = [summary["modes"][m]["P"] for m in modes]
    a90 = [summary["modes"][m]["A90"] for m in modes]
    x = range(len(modes))
    ax.bar([i - 0.2 for i in x], p, width=0.4, label="P")
    ax.bar([i + 0.2 for i in x], a90, width=0.4, label="A90")
    ax.set_xticks(list(x), [m.upper() for m in modes])
    ax.set_ylim(0, 1.05)
    ax.set_title("Lost in Conversation")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = LicConfig()  # the checkpoint callback's `eval.lic` settings
    cli_args.add_model_arguments(parser)
    parser.add_argument("--data", default=defaults.data, help="`synthetic`, or NAME[:PATH] with shards "
                        "(lost_in_conversation, gsm8k)")  # fmt: skip
    parser.add_argument("--modes", default=",".join(defaults.modes), help="comma-separated: full, concat, sharded")
    parser.add_argument("--runs", type=cli_args.positive_int, default=defaults.runs, help="runs per instruction "
                        "and mode (N)")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=defaults.temperature,
                        help="sampling temperature of the assistant turns")  # fmt: skip
    cli_args.add_limit_argument(parser, defaults.limit, help="instructions")
    cli_args.add_token_arguments(parser, defaults.max_new_tokens, turn="tokens per assistant turn")
    cli_args.add_seed_argument(parser, EvalConfig().seed)
    cli_args.add_user_arguments(parser)
    cli_args.add_out_argument(parser)


def load_tasks(data: str, limit: int, seed: int, field: str, error: type[Exception] = ValueError) -> list:
    """`synthetic` tasks or those of a `NAME[:PATH]` source; `error` names `field` when none has shards and a checker."""
    tasks = tasks_from_synthetic(limit, seed=seed) if data == "synthetic" else tasks_from_source(data, limit=limit)
    if not tasks:
        raise error(f"{field}: no task with shards and an automatic checker")
    return tasks


def run(args: argparse.Namespace) -> int:
    if not args.model:
        raise ArgumentError("--model: required (a local path, a hub id, tiny:FAMILY, smollm2, or the served model's "
                            "name with --base-url)")  # fmt: skip
    modes = parse_list("--modes", args.modes, valid=MODES)
    tasks = load_tasks(args.data, args.limit, args.seed, f"--data {args.data}", ArgumentError)
    state = launch_state()  # under `accelerate launch` / torchrun: one group, the chunks split over its processes
    backend = get_backend(backend_name(args), model=args.model, **backend_kwargs(args, state))
    tokenizer = getattr(backend, "tokenizer", None) or load_tokenizer(args.tokenizer or args.model)
    user = LLMUser(args.user_base_url, args.user_model) if args.user == "llm" else RuleUser()
    summary = run_lic(
        backend, tokenizer, tasks, args.out, modes=modes, runs=args.runs,
        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed, user=user, model=args.model,
        split=True,
    )  # fmt: skip
    end_launch()  # every rank, after the merge: the lines below are the main process's alone
    if not state.is_main_process:
        return 0
    for mode, m in summary["modes"].items():
        print(f"{mode:>8}: P={m['P']:.3f} A90={m['A90']:.3f} U90-10={m['U90_10']:.3f} ({m['episodes']} episodes)")
    if "sharded_over_full" in summary:
        print(f"sharded_over_full p_sharded/p_full = {summary['sharded_over_full']:.3f}")
    return 0


def evaluate(backend, tokenizer, config, out_dir: Path, model_path=None, progress: bool = False,
             split: bool = False) -> dict[str, float]:  # fmt: skip
    """LiC as a registered evaluation (`fic.evaluations`): `run_lic` under the `eval:` block, flat metrics. `split`:
    every process of the launch calls this and runs its share of the chunks (`run_lic(split=True)`)."""
    lic = config.block("lic")
    tasks = load_tasks(lic.data, lic.limit, config.seed, f"eval.lic.data={lic.data!r}")
    summary = run_lic(
        backend, tokenizer, tasks, out_dir, modes=lic.modes, runs=lic.runs, temperature=lic.temperature,
        max_new_tokens=lic.max_new_tokens, seed=config.seed, progress=progress, split=split,
    )  # fmt: skip
    report_dir("lic", out_dir)
    metrics = {}
    for mode, scores in summary["modes"].items():
        for score in metric_names.LIC_SCORES:
            metrics[metric_names.lic_score(score, mode)] = scores[score]
    if "sharded_over_full" in summary:
        metrics[metric_names.LIC_SHARDED_OVER_FULL] = summary["sharded_over_full"]
    return metrics

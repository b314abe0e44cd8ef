"""The user-turn probe: what does a model write when it speaks as the *user* after its own answer?

For each item the model first answers in its normal chat format (greedy, recorded once in `responses.jsonl` and
reused across temperatures), or the data's own answer is used. The context `[system?, user, assistant]` is then
rendered with the model's template followed by the bare user header (`fic.chat.role_prefix`), and the model
generates the next user turn until the template's end of turn. A judge labels each turn `genuine_followup` or a
failure mode. Controls: `truncate` cuts the assistant answer in half, `question` appends "What do you think?";
% changed is the share of turns whose text differs from the unperturbed one at the same seed, read against its seed
floor `reseed` (the unperturbed context sampled again with another seed; added whenever a control runs). Every turn
is also judged after its answer is swapped for another item's (the generic floor). Answers, prompts, seeds, greedy
handling, controls, the context swap and judging are the follow-up sampler's (`fic.followup_eval`, which the
trainers' before/after measurement runs too), the summary is `fic.followup_summary`. Before any model loads, the
items are checked against the judge's fit (`fic.judges.provenance`).

Samples are generated in fixed chunks of items, with seeds that depend only on the chunk, the item's place in it
and the sample index (never on what an earlier run finished), so a rerun resumes exactly. The greedy answers are made
in the same chunks. Under a launch of several processes (`accelerate launch -m fic.cli
probe ...`, or `fic probe` under torchrun) each process takes its share of the answer chunks and of the jobs (one
chunk at one temperature and control), writes its own part and resumes from it; the main process merges the parts
into the `samples.jsonl` and `responses.jsonl` one process would write (`fic.distributed.RankedRows`; byte for byte
on the CPU, where it is tested).
"""

from __future__ import annotations

import argparse
import json
import logging
import uuid
from pathlib import Path

from fic import cli_args, metric_names
from fic.cli_args import ArgumentError, backend_kwargs, backend_name, parse_list
from fic.data import load_source, parse_spec
from fic.distributed import RankedRows, check_same_on_every_rank, end_launch, launch_state, main_process_first, on_main
from fic.eval_config import EvalConfig
from fic.followup_eval import (
    PERTURBATIONS,
    FollowupJobs,
    Item,
    answer_rows,
    context_limit,
    fits,
    perturb,
    with_seed_floor,
)
from fic.followup_summary import flat_metrics, row_key
from fic.generation import get_backend
from fic.jsonl import check_settings, write_json
from fic.judges import DEFAULT_JUDGE, JudgeSettings, make_judge
from fic.judges.provenance import check_overlap, judge_provenance, overlap_line, prompt_hash
from fic.judges.validity import judge_validity, validity_line
from fic.modeling import load_tokenizer

from .rates import META_FILE, estimate_lines, write_rates

logger = logging.getLogger(__name__)


def answer_key(row: dict) -> tuple:
    """The identity of one assistant answer in `responses.jsonl`: dataset and item."""
    return (row["dataset"], str(row["item_id"]))


def get_responses(out: RankedRows, backend, tokenizer, dataset: str, records, source: str, max_new_tokens: int,
                  chunk_size: int, progress: bool) -> list[dict]:  # fmt: skip
    """The answer rows of `records`, in order: made once in chunks of `chunk_size` records (the same batches whatever
    the number of processes, so the same greedy text) and kept in `responses.jsonl` (`out`)."""
    chunks = [records[i : i + chunk_size] for i in range(0, len(records), chunk_size)]
    return out.run(
        chunks,
        keys=lambda chunk: [(dataset, str(r.id)) for r in chunk],
        make=lambda chunk: answer_rows(backend, tokenizer, dataset, chunk, source, max_new_tokens, progress),
    )


def run_probe(backend, tokenizer, datasets: list[str], out_dir: str | Path, temperatures=(0.0, 0.3, 0.7, 1.0),
              samples: int = 1, perturbations=("none",), judge=None, limit: int | None = 20,
              max_new_tokens: int = 64, response_tokens: int = 128, responses: str = "model", seed: int = 0,
              chunk_size: int = 32, max_context: int | None = None, progress: bool = True,
              report: bool = True, model: str | None = None, allow_judge_overlap: bool = False,
              generic_floor: bool = True, outside_judge_fit: bool = False, split: bool = False) -> dict:  # fmt: skip
    """Run the probe and write samples.jsonl, responses.jsonl, summary.json, plots and report.html; return the summary.

    Args:
        backend: a `fic.generation` backend serving the model under test.
        tokenizer: the model's tokenizer (its chat template builds every prompt).
        datasets: `NAME` or `NAME:PATH` specs (`fic.data` sources).
        temperatures: sampling temperatures for the user turn (0 is greedy).
        samples: user turns per item, temperature and perturbation.
        perturbations: controls among `none`, `truncate`, `question` (`reseed`, the seed floor of % changed, is
            added whenever `truncate` or `question` is asked for).
        judge: a `fic.judges` judge (default: `fic.judges.DEFAULT_JUDGE`, the offline `learned` judge).
        responses: `model` (generate the assistant answer greedily) or `data` (the data's reference answer).
        max_context: the model's context length (default: read from the model config); items whose prompt plus
            `max_new_tokens` would not fit are skipped and counted in `summary["skipped_items"]`.
        model: the model's name, stored with the settings: a rerun into `out_dir` resumes only with the same model,
            judge, samples, token limits, responses and seed (`fic.jsonl.check_settings`); more datasets,
            temperatures, perturbations or a higher limit extend the run.
        allow_judge_overlap: evaluate items inside the judge's fit (refused otherwise); the summary records the
            overlap and leaves them out of the corrected and calibrated rates.
        generic_floor: judge every turn again after the context swap (`generic_genuine`, the generic floor).
        outside_judge_fit: take the first `limit` items of each dataset that are outside the judge's fit, instead of
            the first `limit` items.
        split: under a launch of several processes (`accelerate launch`, `torchrun`), split the answer chunks and the
            jobs over them; every process calls `run_probe` with the same arguments, and the files (merged by the
            main process, `fic.distributed.RankedRows`) and the summary are those of one process.
    """
    for kind in perturbations:
        perturb("x", kind)
    perturbations = with_seed_floor(perturbations)
    if responses not in ("model", "data"):
        raise ValueError(f"responses: expected 'model' or 'data', got {responses!r}")
    judge = judge or make_judge(DEFAULT_JUDGE)
    overlap = check_items(judge, datasets, limit, allow_judge_overlap, outside_judge_fit)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stored = {
        "model": model, "judge": getattr(judge, "name", type(judge).__name__), "samples": samples,
        "max_new_tokens": max_new_tokens, "response_tokens": response_tokens, "responses": responses, "seed": seed,
        "chunk_size": chunk_size,
    }  # fmt: skip
    settings = {
        "datasets": list(datasets), "temperatures": [float(t) for t in temperatures], "samples": samples,
        "perturbations": list(perturbations), "limit": limit, "max_new_tokens": max_new_tokens, "seed": seed,
        "responses": responses, "judge": stored["judge"], "outside_judge_fit": outside_judge_fit,
    }  # fmt: skip
    check_same_on_every_rank("fic probe", {**stored, **settings, "generic_floor": generic_floor}, split)
    with main_process_first(split):
        check_settings(out_dir, stored)
    samples_out = RankedRows(out_dir / "samples.jsonl", row_key, split)
    answers_out = RankedRows(out_dir / "responses.jsonl", answer_key, split)
    limit_tokens = context_limit(backend, max_new_tokens, max_context)
    accuracy, skipped, all_rows, all_answers = {}, {}, [], []
    for spec in datasets:
        name = parse_spec(spec)[0]
        records = probe_records(spec, limit, judge, outside_judge_fit)
        answer_list = get_responses(answers_out, backend, tokenizer, name, records, responses, response_tokens,
                                    chunk_size, progress)  # fmt: skip
        all_answers += answer_list
        answers = {row["item_id"]: row for row in answer_list}
        items = [r for r in records if answers.get(r.id, {}).get("response")]
        fitting = [r for r in items if fits(tokenizer, r.messages, answers[r.id]["response"], limit_tokens)]
        skipped[name] = {"no_response": len(records) - len(items), "too_long": len(items) - len(fitting)}
        if len(fitting) < len(items):
            logger.warning("%s: skipped %d items whose probe prompt does not fit the model's context (%d tokens)",
                           name, len(items) - len(fitting), limit_tokens)  # fmt: skip
        verdicts = [answers[r.id]["correct"] for r in fitting if answers[r.id]["correct"] is not None]
        accuracy[name] = {"accuracy": sum(verdicts) / len(verdicts) if verdicts else None, "n": len(verdicts)}
        # The context swap pairs each item with the next one of the dataset (a fixed order, so resuming keeps it).
        measured = [Item(name, r.id, r.messages, answers[r.id]["response"], {"correct": answers[r.id]["correct"]})
                    for r in fitting]  # fmt: skip
        jobs = FollowupJobs(backend, tokenizer, judge, measured, samples, max_new_tokens, seed, chunk_size,
                            generic_floor)  # fmt: skip
        all_rows += samples_out.run(jobs.jobs(temperatures, perturbations), jobs.keys, jobs.make,
                                    desc=f"probe {name}", progress=progress)  # fmt: skip
    samples_out.merge(all_rows)
    answers_out.merge(all_answers)

    def summarize_run() -> dict:
        validity = judge_validity(judge)
        write_json(out_dir / META_FILE, {
            "run_id": run_id(out_dir), "accuracy": accuracy, "skipped_items": skipped, "settings": settings,
            "judge_overlap": overlap, "judge_validity": {"name": validity["name"], "version": validity["version"]},
        })  # fmt: skip
        return write_rates(out_dir, judge=judge, report=report, empty_ok=True)

    return on_main(summarize_run, split)


def run_id(out_dir: Path) -> str:
    """The folder's run id (drawn at its first probe, kept on every resume): labels carry it."""
    path = out_dir / META_FILE
    if path.is_file():
        previous = json.loads(path.read_text()).get("run_id")
        if previous:
            return previous
    return uuid.uuid4().hex[:12]


def probe_records(spec: str, limit: int | None, judge, outside_judge_fit: bool) -> list:
    """The items of `spec` the probe runs: the first `limit`, or with `outside_judge_fit` the first `limit` whose prompt
    is not in the judge's fit (`fic.judges.provenance`; a judge of unknown provenance keeps every item)."""
    if not outside_judge_fit:
        return load_source(spec, limit=limit)
    fitted = judge_provenance(judge).get("fitted_items") or set()
    outside = [r for r in load_source(spec) if prompt_hash(r.messages) not in fitted]
    return outside[:limit] if limit is not None else outside


def check_items(judge, datasets: list[str], limit: int | None, allow: bool, outside_judge_fit: bool = False) -> dict:
    """The probe's items against the judge's fit (`fic.judges.provenance.check_overlap`), before any model loads."""
    items = [(parse_spec(spec)[0], r.id, r.messages) for spec in datasets
             for r in probe_records(spec, limit, judge, outside_judge_fit)]  # fmt: skip
    found = check_overlap(judge, items, allow, "--allow-judge-overlap (eval.allow_judge_overlap=true)")
    logger.info(overlap_line(found))
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = EvalConfig()  # the checkpoint callback's settings: the same checkpoint gives the same numbers
    cli_args.add_model_arguments(parser)
    parser.add_argument("--datasets", required=True, help="comma-separated NAME[:PATH] specs, e.g. gsm8k:test.jsonl "
                        "(`fic sources` lists the names)")  # fmt: skip
    parser.add_argument("--temperatures", default=",".join(f"{t:g}" for t in defaults.temperatures),
                        help="comma-separated user-turn sampling temperatures")  # fmt: skip
    cli_args.add_samples_argument(parser, defaults.samples)
    parser.add_argument("--perturbations", default=",".join(defaults.perturbations),
                        help="comma-separated controls: none, truncate, question")  # fmt: skip
    cli_args.add_judge_arguments(parser, defaults.judge)
    cli_args.add_limit_argument(parser, defaults.limit)
    cli_args.add_token_arguments(parser, defaults.max_new_tokens, defaults.response_tokens)
    cli_args.add_responses_argument(parser, defaults.responses)
    cli_args.add_seed_argument(parser, defaults.seed)
    cli_args.add_judge_overlap_argument(parser)
    parser.add_argument(
        "--outside-judge-fit",
        action="store_true",
        help="take the first --limit items of each dataset that the judge was not fitted on",
    )
    parser.add_argument("--chunk-size", type=cli_args.positive_int, default=32, help="items per generate call (the "
                        "unit of resuming, of the seeds and of the split over a launch's processes)")  # fmt: skip
    parser.add_argument("--no-generic-floor", action="store_true",
                        help="skip the context-swap control (each turn judged again after another item's answer)")  # fmt: skip
    cli_args.add_out_argument(parser)


def run(args: argparse.Namespace) -> int:
    if not args.model:
        raise ArgumentError(
            "--model: required (a local path, a hub id, tiny:FAMILY, smollm2, or the served model's name with --base-url)"
        )
    datasets = parse_list("--datasets", args.datasets)
    temperatures = parse_list("--temperatures", args.temperatures, float, minimum=0.0)
    perturbations = parse_list("--perturbations", args.perturbations, valid=PERTURBATIONS)
    for spec in datasets:  # unknown names, missing files and malformed rows fail here, before a model loads
        load_source(spec, limit=args.limit)
    judge = JudgeSettings.from_args(args).build()
    check_items(judge, datasets, args.limit, args.allow_judge_overlap, args.outside_judge_fit)  # before a model loads
    state = launch_state()  # under `accelerate launch` / torchrun: one group, the work split over its processes
    backend = get_backend(backend_name(args), model=args.model, **backend_kwargs(args, state))
    tokenizer = getattr(backend, "tokenizer", None) or load_tokenizer(args.tokenizer or args.model)
    summary = run_probe(
        backend, tokenizer, datasets, args.out, temperatures=temperatures, samples=args.samples,
        perturbations=perturbations, judge=judge, limit=args.limit,
        max_new_tokens=args.max_new_tokens, response_tokens=args.response_tokens, responses=args.responses,
        seed=args.seed, model=args.model, allow_judge_overlap=args.allow_judge_overlap,
        generic_floor=not args.no_generic_floor, outside_judge_fit=args.outside_judge_fit, chunk_size=args.chunk_size,
        split=True,
    )  # fmt: skip
    end_launch()  # every rank, after the merge: the summary below is the main process's alone
    if not state.is_main_process:
        return 0
    for dataset, temps in summary["genuine_rate"].items():
        for temp, perts in temps.items():
            for pert, cell in perts.items():
                floor = cell.get("generic_floor")
                print(f"{dataset:>14} {temp:>5} {pert:>9}: genuine {cell['rate']:.3f} "
                      f"[{cell['low']:.3f}, {cell['high']:.3f}] n={cell['n']} items={cell['n_items']} "
                      f"errors={cell['judge_errors']}" + (f" generic floor {floor['rate']:.3f}" if floor else ""))  # fmt: skip
    for line in estimate_lines(summary):
        print(line)
    if summary["judge_overlap"].get("n_overlap"):
        print(overlap_line(summary["judge_overlap"]))
    print(validity_line(summary["judge_validity"]))
    print(f"wrote {Path(args.out) / 'summary.json'}")
    return 0


def evaluate(backend, tokenizer, config, out_dir: Path, model_path=None, progress: bool = False,
             split: bool = False) -> dict[str, float]:  # fmt: skip
    """The probe as a registered evaluation (`fic.evaluations`): `run_probe` under the `eval:` block, flat metrics.
    `split`: every process of the launch calls this and runs its share (`run_probe(split=True)`)."""
    judge = config.judge_settings().build()
    summary = run_probe(
        backend, tokenizer, list(config.datasets), out_dir, temperatures=config.temperatures, samples=config.samples,
        perturbations=config.perturbations, judge=judge, limit=config.limit, max_new_tokens=config.max_new_tokens,
        response_tokens=config.response_tokens, responses=config.responses, seed=config.seed, progress=progress,
        allow_judge_overlap=config.allow_judge_overlap, split=split,
    )  # fmt: skip
    metrics = flat_metrics(summary, perturbations=tuple(config.perturbations))
    for pert, cells in (summary.get("percent_changed") or {}).items():
        metrics[metric_names.probe_pct_changed(pert)] = cells["overall"]["changed"]
    if summary.get("n_samples"):
        metrics[metric_names.PROBE_JUDGE_ERROR_RATE] = summary.get("judge_errors", 0) / summary["n_samples"]
    return metrics

"""`fic build-followups`: an SFT set of conversations whose user turns after an answer are genuine follow-ups.

The command over `fic.data.followups`: real conversations as they are (`--real`), and contexts (`--contexts`) whose
`--samples` candidate user turns, written by the model or by templates (`--candidates`), the judge filters (up to
`--keep` genuine ones per context). Counts per label are logged and written to `summary.json` beside
`followups.jsonl` in the `--out` folder.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from fic import cli_args
from fic.data.followups import (
    contexts_from_records,
    load_records,
    real_conversations,
    rejection_sample,
    sample_candidates,
    template_followups,
)
from fic.data.records import DataError
from fic.judges import JudgeSettings, is_genuine
from fic.judges.provenance import check_overlap
from fic.metrics import genuine_rate

logger = logging.getLogger(__name__)

OUT_FILE = "followups.jsonl"  # in the --out folder, beside summary.json
CANDIDATES = ("templates", "model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--contexts",
        action="append",
        default=[],
        metavar="SPEC",
        help="dataset (NAME or NAME:PATH) whose items become contexts for sampled follow-ups",
    )
    parser.add_argument(
        "--real",
        action="append",
        default=[],
        metavar="SPEC",
        help="dataset of real multi-turn conversations to keep as they are (mt_bench, healthbench, conversations)",
    )
    cli_args.add_limit_argument(parser, None, help="items per dataset (default: all)")
    cli_args.add_responses_argument(parser, "data")
    parser.add_argument(
        "--candidates",
        choices=CANDIDATES,
        default="model",
        help="who writes candidate user turns: the model (sampled) or offline templates",
    )
    cli_args.add_model_arguments(parser, required=False, help=f"{cli_args.MODEL_HELP}; writes model answers "
                                 "(--responses model) and candidates (--candidates model)")  # fmt: skip
    cli_args.add_samples_argument(parser, 4, help="candidate user turns per context")
    parser.add_argument("--keep", type=cli_args.positive_int, default=1, help="genuine follow-ups kept per context")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the candidates")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling of the candidates")
    cli_args.add_token_arguments(parser, 96, 512, turn="tokens per candidate user turn")
    cli_args.add_judge_arguments(parser)
    cli_args.add_judge_overlap_argument(parser)
    cli_args.add_seed_argument(parser)
    cli_args.add_out_argument(parser, help=f"output folder: {OUT_FILE} (an SFT set: conversations:DIR/{OUT_FILE}) "
                              "and summary.json")  # fmt: skip


def _model_pieces(args):
    """(backend, tokenizer) for the model arguments, or (None, None) when no model is needed."""
    needs_model = bool(args.contexts) and (args.responses == "model" or args.candidates == "model")
    if not needs_model:
        return None, None
    if not args.model:
        raise DataError("--model: needed to write model answers or sample candidate user turns; pass a model name")
    from fic.generation import get_backend
    from fic.modeling import load_tokenizer, resolve_model_name

    model = resolve_model_name(args.model)
    tokenizer = load_tokenizer(resolve_model_name(args.tokenizer) if args.tokenizer else model)
    name = cli_args.backend_name(args)
    kwargs = cli_args.backend_kwargs(args)
    if name == "transformers":
        kwargs["tokenizer"] = tokenizer
    return get_backend(name, model=model, **kwargs), tokenizer


def build(args) -> tuple[list[dict], dict]:
    """The SFT rows and the summary for parsed `fic build-followups` arguments."""
    if not args.contexts and not args.real:
        raise DataError("nothing to build: pass --contexts SPEC (sampled follow-ups) and/or --real SPEC")
    if args.samples < 1 or args.keep < 1:
        raise DataError(f"--samples {args.samples} / --keep {args.keep}: both must be at least 1")
    judge = None
    if args.contexts:  # the contexts against the judge's fit, before a model loads
        judge = JudgeSettings.from_args(args).build()
        items = [(r.source, r.id, r.messages) for r in load_records(args.contexts, args.limit)]
        check_overlap(judge, items, getattr(args, "allow_judge_overlap", False), "--allow-judge-overlap")
    backend, tokenizer = _model_pieces(args)
    rows, summary = [], {}
    if args.real:
        real, skipped = real_conversations(load_records(args.real, args.limit))
        rows += real
        summary["real"] = {"kept": len(real), "skipped_no_followup": skipped}
    if args.contexts:
        contexts = contexts_from_records(load_records(args.contexts, args.limit), args.responses, backend,
                                         tokenizer, args.response_tokens)  # fmt: skip
        if args.candidates == "templates":
            candidates = [template_followups(c["messages"], args.samples, args.seed) for c in contexts]
        else:
            candidates = sample_candidates(backend, tokenizer, contexts, args.samples, args.temperature,
                                           args.max_new_tokens, args.top_p, args.seed)  # fmt: skip
        origin = "template" if args.candidates == "templates" else "sampled"
        sampled, counts = rejection_sample(contexts, candidates, judge, args.keep, origin)
        rows += sampled
        summary["sampled"] = {
            "contexts": len(contexts), "candidates": sum(counts.values()), "kept": len(sampled),
            "labels": dict(counts), "genuine_rate": genuine_rate(map(is_genuine, counts.elements())),
            "judge": judge.name,
        }  # fmt: skip
    summary["rows"] = len(rows)
    return rows, summary


def run(args: argparse.Namespace) -> int:
    rows, summary = build(args)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / OUT_FILE
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2))
    logger.info("wrote %d conversations to %s (summary: %s)", len(rows), out, summary_path)
    print(json.dumps(summary, indent=2))
    return 0

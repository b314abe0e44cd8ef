"""The flags the `fic` commands share: one name per idea, one help text, defaults shown by `-h`.

| idea                     | flag                                                                   |
|--------------------------|------------------------------------------------------------------------|
| the model under test     | `--model`, `--tokenizer`, `--backend`, `--base-url`                    |
| its engine with vLLM     | `--tensor-parallel-size`, `--max-model-len` (one engine per process)   |
| the follow-up judge      | `--judge`, `--judge-base-url`, `--judge-model`, `--contrast`           |
| where results go         | `--out DIR` (always a folder)                                          |
| how many items           | `--limit` (items per dataset, instructions, episodes)                  |
| generations per item     | `--samples`                                                            |
| token budgets            | `--max-new-tokens` (a generated turn), `--response-tokens` (an answer) |
| whose assistant answer   | `--responses model|data`                                               |
| the simulated user       | `--user rules|llm`, `--user-base-url`, `--user-model`                  |

The evaluation commands take their defaults from `fic.eval_config.EvalConfig`, so `fic probe` and the checkpoint
callback measure a checkpoint the same way; the judge flags are one `fic.judges.JudgeSettings`
(`JudgeSettings.from_args`), checked by its rule. This module imports only `fic.errors` and the judge table of fic.
"""

from __future__ import annotations

import argparse
import os

from fic.errors import FicError
from fic.judges.registry import DEFAULT_JUDGE, JUDGES, JudgeSettings

BACKENDS = ("transformers", "vllm", "openai")
USERS = ("rules", "llm")  # as regret's `--tracker rules|llm`
MODEL_HELP = (
    "hub id, local folder, tiny:FAMILY (an offline test model, e.g. tiny:chatml), smollm2 (SmolLM2-135M-Instruct, "
    "offline) or a .gguf file; with --base-url, the served model's name"
)


class ArgumentError(FicError, ValueError):
    """A command-line value that is wrong; the message names the flag, the value and the fix."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`-h` shows each option's default, except where there is none (None, False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def parse_list(flag: str, text: str, cast=str, valid=None, minimum=None) -> list:
    """A comma-separated flag value as a list, or `ArgumentError` naming the flag, the value and what is valid."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    kind = "numbers" if cast in (int, float) else "names"
    try:
        values = [cast(x) for x in items]
    except ValueError:
        raise ArgumentError(f"{flag} {text!r}: expected comma-separated {kind}, e.g. 0,0.7,1.0") from None
    if not values:
        raise ArgumentError(f"{flag} {text!r}: empty; pass at least one value")
    bad = [v for v in values if (valid is not None and v not in valid) or (minimum is not None and v < minimum)]
    if bad:
        fix = f"valid: {', '.join(map(str, valid))}" if valid is not None else f"each must be >= {minimum}"
        raise ArgumentError(f"{flag} {text!r}: {bad} not allowed; {fix}")
    return values


def add_model_arguments(parser, *, required: bool = True, backends=BACKENDS, tokenizer: bool = True,
                        help: str = MODEL_HELP) -> None:  # fmt: skip
    """`--model`, `--tokenizer`, `--backend` and `--base-url` (an OpenAI-compatible completions server)."""
    parser.add_argument("--model", required=required, help=help)
    if tokenizer:
        parser.add_argument("--tokenizer", help="tokenizer (same names as --model), if not the model's; needed with "
                            "--base-url")  # fmt: skip
    parser.add_argument("--backend", default=backends[0], choices=backends, help="generation backend")
    parser.add_argument("--base-url", help="OpenAI-compatible /v1 completions endpoint serving --model (selects the "
                        "openai backend)")  # fmt: skip
    parser.add_argument("--batch-size", type=positive_int, default=8, help="transformers backend: prompts per batch "
                        "(the decode batch holds batch-size x samples rows; larger is faster until memory runs out)")  # fmt: skip
    parser.add_argument("--max-batch-tokens", type=positive_int, help="transformers backend: at most this many padded "
                        "prompt tokens per batch (prompts x the longest); long prompts then run in smaller batches")  # fmt: skip
    if "vllm" in backends:
        parser.add_argument("--tensor-parallel-size", type=positive_int, default=1, help="vllm backend: GPUs each "
                            "copy of the model is split over (vllm.LLM's tensor_parallel_size)")  # fmt: skip
        parser.add_argument("--max-model-len", type=positive_int, help="vllm backend: the engine's context length "
                            "(vllm.LLM's max_model_len; default: the model's); longer probe items are skipped")  # fmt: skip


def backend_name(args) -> str:
    """The backend the model arguments select: `--base-url` means the OpenAI-compatible one."""
    return "openai" if getattr(args, "base_url", None) else args.backend


def backend_kwargs(args, state=None) -> dict:
    """`get_backend` keywords of the model arguments: the endpoint for openai, the batch size for transformers, the
    engine settings for vllm.

    `state`: the launch's `accelerate.PartialState` when the command splits its work over the processes of a launch
    (`fic.distributed.launch_state`): each process then loads the model on its own device(s): transformers on the
    process's device, vLLM an engine of its own on the process's `--tensor-parallel-size` GPUs (`local_rank`).
    (One `vllm.LLM` cannot hold several data-parallel copies; fic's split over processes is the data parallelism.)
    """
    name = backend_name(args)
    processes = state.num_processes if state is not None else 1
    if name == "openai":
        return {"base_url": args.base_url}
    if name == "transformers":
        kwargs = {
            "batch_size": getattr(args, "batch_size", 8),
            "max_batch_tokens": getattr(args, "max_batch_tokens", None),
        }
        return {**kwargs, "device": str(state.device)} if processes > 1 else kwargs
    kwargs = {"tensor_parallel_size": getattr(args, "tensor_parallel_size", 1)}
    if getattr(args, "max_model_len", None):
        kwargs["max_model_len"] = args.max_model_len
    return {**kwargs, "local_rank": state.local_process_index} if processes > 1 else kwargs


def add_judge_arguments(parser, default: str = DEFAULT_JUDGE) -> None:
    """`--judge`, `--judge-base-url`, `--judge-model`, `--contrast`."""
    endpoint = [kind for kind, spec in JUDGES.items() if spec.endpoint]
    parser.add_argument("--judge", default=default, choices=JUDGES, help=f"follow-up judge (fic.judges.JUDGES; "
                        f"{' and '.join(endpoint)} need an endpoint)")  # fmt: skip
    parser.add_argument("--judge-base-url", help="OpenAI-compatible chat endpoint of the llm / cascade judge")
    parser.add_argument("--judge-model", help="judge model name at that endpoint")
    parser.add_argument("--contrast", action="store_true", help="contrastive judging: a turn is genuine only if the "
                        "judge does not also call it genuine after another item's answer (fic.judges.contrast)")  # fmt: skip


def add_judge_overlap_argument(parser) -> None:
    """`--allow-judge-overlap`: evaluate items inside the judge's fit (refused otherwise; `fic.judges.provenance`)."""
    parser.add_argument("--allow-judge-overlap", action="store_true",
                        help="evaluate items the judge was fitted on; the summary records the overlap and leaves "
                        "them out of corrected and calibrated rates")  # fmt: skip


def add_out_argument(parser, help: str = "output folder (rerun with the same folder to resume)") -> None:
    """`--out DIR`, required; always a folder."""
    parser.add_argument("--out", required=True, metavar="DIR", help=help)


def add_limit_argument(parser, default: int | None, help: str = "items per dataset") -> None:
    parser.add_argument("--limit", type=positive_int, default=default, help=help)


def add_samples_argument(parser, default: int | None, help: str = "user turns per item and temperature") -> None:
    parser.add_argument("--samples", type=positive_int, default=default, help=help)


def add_token_arguments(parser, max_new_tokens: int, response_tokens: int | None = None,
                        turn: str = "tokens per generated user turn") -> None:  # fmt: skip
    """`--max-new-tokens` (a generated turn) and, when `response_tokens` is given, `--response-tokens`."""
    parser.add_argument("--max-new-tokens", type=positive_int, default=max_new_tokens, help=turn)
    if response_tokens is not None:
        parser.add_argument("--response-tokens", type=positive_int, default=response_tokens,
                            help="tokens per assistant answer the model writes (--responses model)")  # fmt: skip


def add_responses_argument(parser, default: str = "model") -> None:
    parser.add_argument("--responses", default=default, choices=("model", "data"),
                        help="the assistant answer in each context: the model's greedy answer or the data's")  # fmt: skip


def add_user_arguments(parser, *, endpoint: bool = True, model_help: str = "model name for --user llm") -> None:
    """`--user rules|llm` (the simulated user), `--user-model` and, for a served user, `--user-base-url`."""
    parser.add_argument("--user", default="rules", choices=USERS, help="simulated user: rule-based or "
                        "an LLM")  # fmt: skip
    if endpoint:
        parser.add_argument("--user-base-url", help="OpenAI-compatible chat endpoint for --user llm")
    parser.add_argument("--user-model", help=model_help)


def add_seed_argument(parser, default: int | None = 0, required: bool = False) -> None:
    if required:
        parser.add_argument("--seed", type=int, required=True, help="sampling seed")
    else:
        parser.add_argument("--seed", type=int, default=default, help="sampling seed")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations argparse cannot express, refused with `parser.error` (one line, exit 2) before anything loads."""
    if getattr(args, "judge", None) is not None and hasattr(args, "judge_base_url"):
        try:
            JudgeSettings.from_args(args)  # the judge's endpoint rule
        except ValueError as err:
            parser.error(str(err))
    if getattr(args, "backend", None) == "openai" and hasattr(args, "base_url") and not args.base_url:
        parser.error("--backend openai needs --base-url URL (an OpenAI-compatible /v1 completions endpoint)")
    for flag in ("tensor_parallel_size", "max_model_len"):
        if getattr(args, flag, None) not in (None, 1) and backend_name(args) != "vllm":
            parser.error(f"--{flag.replace('_', '-')} is a vllm backend setting; add --backend vllm or leave it out")
    if getattr(args, "user", None) == "llm" and hasattr(args, "user_base_url") and not args.user_base_url:
        parser.error("--user llm needs --user-base-url URL and --user-model NAME (an OpenAI-compatible chat endpoint)")
    out = getattr(args, "out", None)
    if isinstance(out, str) and os.path.isfile(out):
        parser.error(f"--out {out}: is a file; --out is always a folder (it holds the command's files)")

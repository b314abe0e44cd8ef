"""The held-out measurement both collaboration trainers make before and after training: the `eval:` block's items,
their contexts (the data's answers or the base model's, generated once), the judge and its firewall check, and the
genuine follow-up rate through the follow-up sampler (`fic.followup_eval`, the one `fic probe` runs: the same items,
answers and settings give the rows `fic probe` writes); plus the training-data loader both use."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from fic.data.followups import load_records
from fic.data.splits import load_training
from fic.distributed import map_across_ranks
from fic.followup_eval import CHUNK_SIZE, answer_rows, chunks_by_dataset, genuine_followup_rate
from fic.generation import HFBackend
from fic.judges.provenance import check_overlap
from fic.judges.validity import judge_validity


def local_backend(model, tokenizer, batch_size: int = 8):
    """A transformers backend on the in-memory model, on the GPU when there is one (prepare() loads on CPU)."""
    return HFBackend(model, tokenizer, device="cuda" if torch.cuda.is_available() else None, batch_size=batch_size)


def heldout_records(eval_config) -> list:
    """The held-out items of the `eval:` block's datasets (`eval.limit` each); every rank reads them, so every rank
    drops the same overlapping training conversations."""
    return load_records(eval_config.datasets, eval_config.limit) if eval_config.datasets else []


def heldout_contexts(records: list, eval_config, model=None, tokenizer=None) -> list[dict]:
    """Held-out contexts `{"id", "source", "item_id", "correct", "messages"}`: the held-out items with the answers
    `eval.responses` names: `data` (the data's) or `model` (the base model's greedy answer within
    `eval.response_tokens`, generated once so before and after share them), made as `fic probe` makes them
    (`fic.followup_eval.answer_rows`, in the same chunks); items without an answer are left out."""
    if not records:
        return []
    backend = local_backend(model, tokenizer, eval_config.batch_size) if eval_config.responses == "model" else None
    chunks = [c for group in chunks_by_dataset(records, lambda r: r.source, CHUNK_SIZE).values() for c in group]

    def answer(share: list[list]) -> list[dict]:
        return [
            {"id": f"{r.source}:{r.id}", "source": r.source, "item_id": r.id, "correct": row["correct"],
             "messages": [*r.messages, {"role": "assistant", "content": row["response"]}]}
            for chunk in share
            for r, row in zip(chunk, answer_rows(backend, tokenizer, chunk[0].source, chunk, eval_config.responses,
                                                 eval_config.response_tokens))
            if row["response"]
        ]  # fmt: skip

    # Each rank answers its share of the chunks (every rank gets every context): once, not once per rank.
    return map_across_ranks(answer, chunks)


def eval_judge(eval_config):
    """The `eval:` block's judge (`eval.judge*`)."""
    return eval_config.judge_settings().build()


def check_heldout_judge(records: list, eval_config, judge) -> dict:
    """The held-out items against the judge's fit: refused in one line unless `eval.allow_judge_overlap`."""
    items = [(r.source, r.id, r.messages) for r in records]
    return check_overlap(judge, items, eval_config.allow_judge_overlap, "eval.allow_judge_overlap=true")


def evaluate_followups(model, tokenizer, contexts: list[dict], eval_config, judge, split: bool = True) -> dict:
    """Genuine follow-up rate (with interval) of `model` on the held-out `contexts`, as the `eval:` block says.

    `split`: every rank calls this and samples and judges its share of the contexts (the evaluations before and after
    training: no rank idles at a collective meanwhile); `False` evaluates all of them in this process."""
    return genuine_followup_rate(
        local_backend(model, tokenizer, eval_config.batch_size),
        tokenizer,
        [c["messages"] for c in contexts],
        judge,
        temperatures=eval_config.temperatures,
        samples=eval_config.samples,
        max_new_tokens=eval_config.max_new_tokens,
        seed=eval_config.seed,
        map_fn=map_across_ranks if split else None,
        meta=[{"dataset": c["source"], "item_id": c["item_id"], "correct": c["correct"]} for c in contexts],
        validity=judge_validity(judge),
    )


def training_precision(args):
    """The context in which the in-memory model generates as training computes: bf16 / fp16 autocast on CUDA when the
    run trains with `bf16` / `fp16` (its fp32 master weights stay as they are), nothing otherwise."""
    dtype = torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if getattr(args, "fp16", False) else None
    if dtype is None or not torch.cuda.is_available():
        return nullcontext()
    return torch.autocast("cuda", dtype=dtype)


def trained_model(trainer, output_dir: str):
    """The trained model each rank evaluates: the one in memory (unwrapped), or, where its parameters are sharded
    across the processes (FSDP, DeepSpeed ZeRO-3) so that no rank holds it whole, the final model `save_model` wrote to
    `output_dir`, read back by every rank in the training dtype (`fic.eval.checkpoint_io.load_checkpoint`)."""
    from accelerate.utils import extract_model_from_parallel

    from fic.distributed import parameters_sharded
    from fic.eval.checkpoint_io import load_checkpoint

    if parameters_sharded():
        return load_checkpoint(output_dir)[0]
    return extract_model_from_parallel(trainer.model)


def evaluate_after_training(trainer, run, contexts: list[dict], judge) -> dict:
    """`evaluate_followups` of the trained model, split over every rank: each rank calls this after `save_model`,
    samples and judges its share of the held-out contexts, and gets every row (one gather at the end), so no rank waits
    at a barrier while another evaluates alone (bounded by `ddp_timeout`). `{}` without held-out contexts."""
    if not contexts:
        return {}
    with training_precision(run.args):
        return evaluate_followups(
            trained_model(trainer, run.args.output_dir), run.tokenizer, contexts, run.eval, judge
        )


def load_training_records(field: str, specs: list[str], limit: int | None, allow_test: bool = False) -> list:
    """Records of training datasets: a bare hub name reads its train split, a test split is refused
    (`fic.data.splits`)."""
    return [record for spec in specs for record in load_training(field, spec, limit=limit, allow_test=allow_test)]

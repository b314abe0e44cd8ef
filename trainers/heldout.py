"""The held-out measurement both collaboration trainers make before and after training: the `eval:` block's items,
their contexts (the data's answers or the base model's, generated once), the judge and its firewall check, and the
genuine follow-up rate through `fic.followup_eval`; plus the training-data loader both use."""

from __future__ import annotations

import torch

from fic.data.followups import contexts_from_records, load_records
from fic.data.splits import load_training
from fic.distributed import map_across_ranks
from fic.followup_eval import genuine_followup_rate
from fic.generation import HFBackend
from fic.judges import make_judge
from fic.judges.provenance import check_overlap
from fic.judges.validity import judge_validity


def local_backend(model, tokenizer):
    """A transformers backend on the in-memory model, on the GPU when there is one (prepare() loads on CPU)."""
    return HFBackend(model, tokenizer, device="cuda" if torch.cuda.is_available() else None)


def heldout_records(eval_config) -> list:
    """The held-out items of the `eval:` block's datasets (`eval.limit` each); every rank reads them, so every rank
    drops the same overlapping training conversations."""
    return load_records(eval_config.datasets, eval_config.limit) if eval_config.datasets else []


def heldout_contexts(records: list, eval_config, model=None, tokenizer=None) -> list[dict]:
    """Held-out contexts: the held-out items with the answers `eval.responses` names: `data` (the data's) or `model`
    (the base model's greedy answer within `eval.response_tokens`, generated once so before and after share them)."""
    if not records:
        return []
    answers = eval_config.responses
    backend = local_backend(model, tokenizer) if answers == "model" else None
    # Each rank answers its share of the items (every rank gets every context): once, not once per rank.
    return map_across_ranks(
        lambda share: contexts_from_records(share, answers, backend, tokenizer, eval_config.response_tokens), records
    )


def eval_judge(eval_config):
    return make_judge(
        eval_config.judge, eval_config.judge_base_url, eval_config.judge_model, contrast=eval_config.judge_contrast
    )


def check_heldout_judge(records: list, eval_config, judge) -> dict:
    """The held-out items against the judge's fit: refused in one line unless `eval.allow_judge_overlap`."""
    items = [(r.source, r.id, r.messages) for r in records]
    return check_overlap(judge, items, eval_config.allow_judge_overlap, "eval.allow_judge_overlap=true")


def evaluate_followups(model, tokenizer, contexts: list[dict], eval_config, judge, split: bool = True) -> dict:
    """Genuine follow-up rate (with interval) of `model` on the held-out `contexts`, as the `eval:` block says.

    `split`: every rank calls this and samples and judges its share of the contexts (the evaluation before training:
    no rank idles at a collective meanwhile); `False` evaluates all of them in this process."""
    return genuine_followup_rate(
        local_backend(model, tokenizer),
        tokenizer,
        [c["messages"] for c in contexts],
        judge,
        temperatures=eval_config.temperatures,
        samples=eval_config.samples,
        max_new_tokens=eval_config.max_new_tokens,
        seed=eval_config.seed,
        map_fn=map_across_ranks if split else None,
        meta=[{"dataset": c["source"], "item_id": c["id"]} for c in contexts],
        validity=judge_validity(judge),
    )


def load_training_records(field: str, specs: list[str], limit: int | None, allow_test: bool = False) -> list:
    """Records of training datasets: a bare hub name reads its train split, a test split is refused
    (`fic.data.splits`)."""
    return [record for spec in specs for record in load_training(field, spec, limit=limit, allow_test=allow_test)]

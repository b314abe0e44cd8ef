"""Trainer callbacks every fic method adds: the recipe in the wandb config, and an evaluation of each checkpoint.

`EvalCallback` runs on every save (or every n-th, `eval.every_n_saves`). It evaluates the model just saved, as
configured by the recipe's `eval:` block (user-turn probe, LiC, regret; see `fic.eval_config`), split over every
process of the training: each rank generates and judges its share of the probe's and LiC's chunks
(`fic.distributed.RankedRows`), so no rank waits alone at a barrier while another evaluates (bounded by
`ddp_timeout`, 30 minutes by default; `train.py --plan` estimates each evaluation's minutes). The main process writes
the evaluation files into `checkpoint-N/eval/`, appends the metrics to `OUTPUT_DIR/eval/history.jsonl`, rewrites the
run's comparison table, plots and `OUTPUT_DIR/eval/report.html`, and logs the metrics
(`probe/<dataset>/genuine_rate@t<T>`, `lic/p_sharded`, ...; named by `fic.metric_names`) and a table of generated
user turns to wandb at the checkpoint's step. Regret, which does not split, runs on the main process.

What is evaluated is the model being trained, with its LoRA adapters active (`load_from: memory`), except where
its parameters are sharded across processes (FSDP, DeepSpeed ZeRO-3): there every rank reloads the checkpoint just
written (`load_from: disk`, in the training dtype; with ZeRO-3 save 16-bit weights,
`stage3_gather_16bit_weights_on_model_save`). The model in memory generates under the training's bf16/fp16 autocast
on CUDA.
The training callback generates with transformers; vLLM evaluation runs outside training, in `fic eval-checkpoints`.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path

from accelerate import PartialState
from accelerate.utils import extract_model_from_parallel
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from transformers import TrainerCallback

from fic.distributed import fsdp_enabled, parameters_sharded
from fic.eval.checkpoint_io import CheckpointLock, make_backend
from fic.eval.checkpoint_runs import evaluate_checkpoint
from fic.eval.report import spread
from fic.eval_config import EvalConfig
from fic.generation import get_backend
from fic.jsonl import load_done, write_json
from fic.recipe import RecipeError
from fic.tracking import redact, update_wandb_config, wandb_run
from fic.trainers.heldout import training_precision

logger = logging.getLogger(__name__)


def wait_for_everyone() -> None:
    """Barrier across training processes (a no-op in a single process)."""
    PartialState().wait_for_everyone()


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def full_weights(checkpoint: Path, model, tokenizer) -> Path:
    """A folder with whole weights for `checkpoint` (called on every rank under FSDP; returns the same path on all).

    With `fsdp_state_dict_type: SHARDED_STATE_DICT` (accelerate_configs/fsdp.yaml) a checkpoint holds per-rank shards
    that `from_pretrained` cannot read: the full state dict is gathered (a collective) and the main process writes it
    with the tokenizer to `checkpoint-N/full_model/`, which the evaluation loads. A checkpoint that already has whole
    weights is used as it is.
    """
    if any((checkpoint / name).is_file() for name in WEIGHT_FILES):
        return checkpoint
    state_dict = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    target = checkpoint / "full_model"
    if PartialState().is_main_process:
        extract_model_from_parallel(model).save_pretrained(target, state_dict=state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(target)
    wait_for_everyone()
    return target


class RecipeConfigCallback(TrainerCallback):
    """Adds the recipe (secrets redacted) to the wandb run's config under `recipe`, next to the Trainer's args."""

    def __init__(self, recipe_raw: dict, recipe_name: str | None = None):
        self.values = {"recipe": redact(recipe_raw), **({"recipe_name": recipe_name} if recipe_name else {})}

    def on_train_begin(self, args, state, control, **kwargs):
        # The Trainer's WandbCallback runs first (report integrations precede user callbacks) and starts the run.
        if state.is_world_process_zero:
            update_wandb_config(self.values)


def _tokenizer_of(processing_class):
    return getattr(processing_class, "tokenizer", None) or processing_class


def sample_table_rows(samples: list[dict], limit: int, step: int) -> list[list]:
    """Up to `limit` probe rows, spread over (dataset, temperature, control) cells, as wandb table rows."""
    picked = spread(samples, limit, lambda r: (r["dataset"], float(r["temperature"]), r.get("perturbation", "none")))
    rows = []
    for r in picked:
        context = r.get("messages") or []
        last = context[-1].get("content", "") if context and isinstance(context[-1], dict) else ""
        rows.append([step, r["dataset"], float(r["temperature"]), r.get("perturbation", "none"), r.get("item_id"),
                     str(last)[-1000:], r.get("user_turn", ""), r.get("label"), r.get("genuine")])  # fmt: skip
    return rows


SAMPLE_COLUMNS = ["step", "dataset", "temperature", "control", "item_id", "assistant_turn", "user_turn", "label",
                  "genuine"]  # fmt: skip


def write_eval_config(output_dir, config: EvalConfig) -> None:
    """`OUTPUT_DIR/eval/config.json`: `fic eval-checkpoints` reads it, so later evaluations of the run (and a watch
    started alongside training) use the recipe's settings. It also marks the folder as a run."""
    write_json(Path(output_dir) / "eval" / "config.json", redact(config.to_dict()))


class WatchCommandCallback(TrainerCallback):
    """With the in-training evaluation off (`eval.enabled: false`): when training starts, write the recipe's `eval:`
    block for `fic eval-checkpoints` and log the command that evaluates the checkpoints off the training nodes as
    they are saved (`slurm/eval.sbatch` runs it)."""

    def __init__(self, config: EvalConfig):
        self.config = config

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or args.save_strategy == "no":
            return
        write_eval_config(args.output_dir, self.config)
        logger.info("in-training evaluation is off (eval.enabled=false); evaluate each checkpoint as it is saved, on "
                    "another node, with: fic eval-checkpoints %s --watch", args.output_dir)  # fmt: skip


class EvalCallback(TrainerCallback):
    """Evaluate each saved checkpoint (see the module docstring).

    Args:
        config: the recipe's `eval:` block.
        tokenizer: the model's tokenizer (default: the Trainer's `processing_class`).
        recipe: the `fic.recipe.Recipe` being trained; when given, its mapping (secrets redacted) goes into the
            wandb config, as `RecipeConfigCallback` does.
    """

    def __init__(self, config: EvalConfig, tokenizer=None, recipe=None):
        if config.backend != "transformers":
            raise RecipeError(
                f"eval.backend={config.backend!r}: the training callback evaluates the model in memory with "
                "transformers. Use eval.backend=transformers, or set eval.enabled=false and run "
                f"`fic eval-checkpoints OUTPUT_DIR --backend {config.backend}` on the saved checkpoints."
            )
        config.check_probe_datasets()
        self.config = config
        self.tokenizer = tokenizer
        self.recipe_config = RecipeConfigCallback(recipe.raw, recipe.name) if recipe is not None else None
        self.saves = 0
        self.records: list[dict] = []  # what this process evaluated (main process only)

    def on_train_begin(self, args, state, control, **kwargs):
        if args.save_strategy == "no":
            logger.warning("eval.enabled is true but save_strategy is 'no': no checkpoint will be evaluated")
        if self.recipe_config is not None:
            self.recipe_config.on_train_begin(args, state, control)
        if state.is_world_process_zero:
            write_eval_config(args.output_dir, self.config)

    def on_save(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.saves += 1
        if self.saves % self.config.every_n_saves:
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        weights = None
        if self._load_from() == "disk" and fsdp_enabled() and model is not None:
            # every rank: gathering a full state dict out of FSDP shards is a collective
            weights = full_weights(checkpoint, model, self.tokenizer or _tokenizer_of(processing_class))
        precision = training_precision(args) if self._load_from() == "memory" else nullcontext()
        try:  # every rank: each evaluates its share
            with precision:
                self.evaluate(checkpoint, state.global_step, model, processing_class, args.output_dir, weights)
        finally:
            wait_for_everyone()

    def _load_from(self) -> str:
        load_from = self.config.load_from
        return ("disk" if parameters_sharded() else "memory") if load_from == "auto" else load_from

    def evaluate(self, checkpoint: Path, step: int, model, processing_class, output_dir, weights=None) -> dict:
        """`fic.eval.checkpoints.evaluate_checkpoint` (the step `fic eval-checkpoints` takes) on the model in memory or
        on the checkpoint read back from disk, split over the launch's processes (every rank calls this); then the
        main process sends the record to wandb."""
        load_from = self._load_from()
        if load_from == "memory" and model is None:
            raise ValueError("EvalCallback: the Trainer passed no model to on_save; set eval.load_from=disk")

        def open_backend():
            if load_from == "disk":
                return make_backend(weights or checkpoint, "transformers", self.config.batch_size)
            tokenizer = self.tokenizer or _tokenizer_of(processing_class)
            if tokenizer is None:
                raise ValueError("EvalCallback: no tokenizer; pass tokenizer= or give the Trainer a processing_class")
            backend = get_backend("transformers", extract_model_from_parallel(model), tokenizer=tokenizer,
                                  batch_size=self.config.batch_size)  # fmt: skip
            return backend, tokenizer, None

        main = PartialState().is_main_process
        if main:
            logger.info("evaluating %s (%s, %s)", checkpoint.name, ", ".join(self.config.evaluations), load_from)
        record = evaluate_checkpoint(checkpoint, self.config, open_backend, output_dir, step=step, split=True)
        if not main:
            return record or {}
        if record is None:  # `fic eval-checkpoints` on another node got there first
            logger.warning("%s is being evaluated by %s; the callback skips it", checkpoint.name,
                           CheckpointLock(checkpoint).owner())  # fmt: skip
            return {}
        self.records.append(record)
        self._log_wandb(record, checkpoint, step)
        shown = ", ".join(f"{k}={v:.3f}" for k, v in list(record["metrics"].items())[:6])
        logger.info("%s evaluated in %.1f s: %s", checkpoint.name, record["elapsed_s"], shown)
        return record

    def _log_wandb(self, record: dict, checkpoint: Path, step: int) -> None:
        run = wandb_run()
        if run is None:
            return
        import wandb  # heavy: wandb loads only when a wandb run is active

        logs = {**record["metrics"], "train/global_step": step}
        samples_path = checkpoint / "eval" / "probe" / "samples.jsonl"
        if self.config.log_samples and samples_path.is_file():
            rows = sample_table_rows(load_done(samples_path), self.config.log_samples, step)
            logs["probe/samples"] = wandb.Table(columns=SAMPLE_COLUMNS, data=rows)
        run.log(logs)

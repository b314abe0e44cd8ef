"""Two processes on the CPU (`accelerate_configs/cpu.yaml --num_processes 2`, one gloo group), for every trainer.

* The `fic_llama3b` recipe on the tiny Llama-3 model, real generation (shard replies, on-policy samples), finishes
  all its steps (it hung after its first step: ranks made different numbers of gathers).
* VASD (token mode, `shards` rows, `lmbda > 0`, `single_turn_mix > 0`), collab SFT and follow-up RL: a two-process
  run has the losses and final weights of a one-process run over the same global batch, and each step's rows are
  split between the ranks (disjoint shares whose union is the one-process batch). Generation is a content-seeded
  stand-in there (tests/multiproc_entry.py), since real sampling differs with the per-process seeds.
* SIGTERM to one rank: both ranks save the same checkpoint at the same step and exit 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_reliability_eval import child_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = str(Path(sys.executable).parent / "accelerate")


def launch_command(out: Path, processes: int, args: list[str], config: str = "cpu.yaml",
                   launch_args: tuple[str, ...] = ("--main_process_port", "0")) -> list[str]:  # fmt: skip
    """`accelerate launch` of train.py args through the test entry, which writes per-rank records to `out/ranks`."""
    return [ACCELERATE, "launch", "--config_file", str(ROOT / "accelerate_configs" / config),
            "--num_processes", str(processes), *launch_args,
            str(ROOT / "tests" / "multiproc_entry.py"), str(out / "ranks"), *args, f"output_dir={out}"]  # fmt: skip


def launch_env(**env) -> dict:
    """The children's environment: offline, one thread per process, no GPU, the test entry importable."""
    return {**child_env(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT / "tests")), "WANDB_MODE": "disabled", **env}


def launch_failure(stderr: str, lines: int = 25) -> str:
    """A failed launch's stderr for an assertion message: each rank's last `lines` tagged lines (`[rank0]: ...`),
    then the tail. The tail alone often holds only the rank torchrun stopped, not the one that failed first."""
    by_rank: dict[str, list[str]] = {}
    for line in stderr.splitlines():
        if line.startswith("[rank") and "]:" in line:
            by_rank.setdefault(line[: line.index("]:") + 1], []).append(line)
    tagged = [line for rank in sorted(by_rank) for line in by_rank[rank][-lines:]]
    return "\n".join([*tagged, "--- tail ---", stderr[-2000:]])


def rank_records(out: Path, processes: int) -> dict:
    """The per-rank records a run through the test entry wrote, checked to come from one group of `processes`."""
    records = {int(p.stem[4:]): json.loads(p.read_text()) for p in (out / "ranks").glob("rank*.json")}
    assert sorted(records) == list(range(processes))
    assert all(r["world_size"] == processes for r in records.values())
    return records


def launch(out: Path, processes: int, args: list[str], timeout: float = 300, config: str = "cpu.yaml",
           **env) -> dict:  # fmt: skip
    """Run train.py args through the test entry on `processes` CPU processes; the per-rank records."""
    command = launch_command(out, processes, args, config)
    started = time.time()
    try:
        done = subprocess.run(command, cwd=ROOT, env=launch_env(**env), capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as err:
        tail = (err.stderr or b"")[-3000:]
        pytest.fail(f"{processes}-process run did not finish in {timeout} s (a rank waits on a collective): {tail}")
    assert done.returncode == 0, launch_failure(done.stderr)
    records = rank_records(out, processes)
    print(f"{processes}-process run: {time.time() - started:.1f} s")
    return records


def losses(record: dict) -> list[tuple[int, float]]:
    return [(e["step"], e["loss"]) for e in record.get("logs", []) if "loss" in e]


def assert_sharded(two: dict, one: dict, steps: int) -> None:
    """Each step, the ranks of the two-process run trained on disjoint shares of the one-process run's batch."""
    for step in map(str, range(1, steps + 1)):
        a, b, whole = two[0]["steps"][step], two[1]["steps"][step], one[0]["steps"][step]
        assert a and b, f"step {step}: a rank trained on nothing"
        assert sorted(a + b) == sorted(whole), f"step {step}: the ranks' rows are not the one-process batch"
        assert not set(a) & set(b), f"step {step}: both ranks trained on the same row"


def weights(out: Path) -> dict:
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (out / "adapter_model.safetensors").is_file() else "model.safetensors"
    return load_file(str(out / name))


def assert_same_training(tmp_path: Path, args: list[str], batch: int, steps: int, tol: float = 1e-3, **env) -> None:
    one = launch(tmp_path / "one", 1, [*args, f"per_device_train_batch_size={2 * batch}"], **env)
    two = launch(tmp_path / "two", 2, [*args, f"per_device_train_batch_size={batch}"], **env)
    assert_sharded(two, one, steps)
    l1, l2 = losses(one[0]), losses(two[0])
    assert [s for s, _ in l1] == [s for s, _ in l2] == list(range(1, steps + 1))
    assert any(abs(x) > 1e-6 for _, x in l1), f"the losses are all zero, nothing is compared: {l1}"
    assert l1[0][1] != l1[-1][1], f"the loss did not move, the run did not train: {l1}"
    # relative: the divergence of the first VASD steps is ~1e-4 and float32 sums in another order differ by ~1e-4 of it
    assert [x for _, x in l2] == pytest.approx([x for _, x in l1], rel=tol, abs=1e-9)
    w1, w2 = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert w1.keys() == w2.keys()
    worst = max((w1[k].float() - w2[k].float()).abs().max().item() for k in w1)
    assert worst <= 1e-5, f"final weights differ by up to {worst}"
    print("losses one/two processes:", l1, l2, "worst weight difference:", worst)


def gsm8k(shared_data: Path, split: str = "train") -> str:
    return f"gsm8k:{shared_data / 'gsm8k' / f'{split}.jsonl'}"


def test_fic_llama3b_finishes_on_two_processes(tmp_path, shared_data):
    # The command (tiny model, 32 problems, 6 steps); short shard replies keep it to seconds on a CPU.
    args = ["recipe=fic_llama3b", "model_name_or_path=tiny:llama3", "use_vllm=false", f"train_data={gsm8k(shared_data)}",
            "train_limit=32", "max_steps=6", "per_device_train_batch_size=4", "bf16=false", "dtype=float32",
            "report_to=none", "eval.enabled=false", "gradient_accumulation_steps=1", "logging_steps=1",
            "rollout_max_new_tokens=24", "max_completion_length=48"]  # fmt: skip
    records = launch(tmp_path / "run", 2, args, timeout=400)
    assert [s for s, _ in losses(records[0])] == [1, 2, 3, 4, 5, 6]
    steps = records[0]["steps"]
    assert sorted(map(int, steps)) == [1, 2, 3, 4, 5, 6]
    for step in steps:  # 4 rows per rank per step, none shared
        assert len(records[0]["steps"][step]) == len(records[1]["steps"][step]) == 4
        assert not set(records[0]["steps"][step]) & set(records[1]["steps"][step])


VASD = ["recipe=fic_llama3b", "model_name_or_path=tiny:llama3", "use_vllm=false", "train_limit=16", "max_steps=2", "bf16=false",
        "dtype=float32", "report_to=none", "eval.enabled=false", "gradient_accumulation_steps=1", "logging_steps=1",
        "save_strategy=no", "lmbda=0.5", "single_turn_mix=0.5", "learning_rate=1e-3", "warmup_steps=0",
        "max_prompt_length=4096", "max_completion_length=32"]  # fmt: skip


def test_vasd_two_processes_train_like_one(tmp_path, shared_data):
    assert_same_training(tmp_path, [*VASD, f"train_data={gsm8k(shared_data)}"], batch=4, steps=2, FIC_TEST_STANDIN="1")


def conversations(path: Path, n: int = 16) -> str:
    """`n` short conversations, each with a user follow-up after an answer (what collab SFT trains on)."""
    rows = []
    for i in range(n):
        rows.append({"messages": [
            {"role": "user", "content": f"What is {i} plus {i + 3}?"},
            {"role": "assistant", "content": f"{i} plus {i + 3} is {2 * i + 3}."},
            {"role": "user", "content": "Why is that?" + " Please explain." * (i % 4)},
            {"role": "assistant", "content": f"Because adding {i + 3} to {i} gives {2 * i + 3}."},
        ]})  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"conversations:{path}"


# SGD with a constant rate: weight differences then scale with gradient differences (Adam's normalised step turns
# float noise in near-zero gradients into differences of the size of the learning rate).
SGD = ["optim=sgd", "lr_scheduler_type=constant", "warmup_steps=0"]


def test_collab_sft_two_processes_train_like_one(tmp_path, shared_data):
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    args = ["recipe=collab_sft_tiny", f"train_datasets=[{data}]", "followup_contexts=[]", "max_steps=2",
            "train_sampling_strategy=random", "save_strategy=no", "report_to=none", "logging_steps=1",
            "learning_rate=0.5", *SGD, "eval.enabled=false", f"eval.datasets=[{gsm8k(shared_data, 'test')}]",
            "eval.limit=4", "eval.responses=model", "eval.response_tokens=8", "eval.temperatures=[0.0]",
            "eval.max_new_tokens=8", "seed=0"]  # fmt: skip
    assert_same_training(tmp_path, args, batch=4, steps=2)


def test_followup_rl_two_processes_train_like_one(tmp_path, shared_data):
    args = ["recipe=followup_rl_tiny", "model_name_or_path=tiny:chatml", "context_limit=8", "num_generations=4",
            "max_steps=2", "logging_steps=1", "save_strategy=no", "report_to=none", "learning_rate=0.5", *SGD,
            f"eval.datasets=[{gsm8k(shared_data, 'test')}]", "eval.limit=4", "eval.temperatures=[1.0]",
            "eval.samples=2", "eval.max_new_tokens=8"]  # fmt: skip
    assert_same_training(tmp_path, args, batch=4, steps=2, FIC_TEST_STANDIN="1")


def test_sigterm_to_one_rank_stops_both_at_the_same_step(tmp_path, shared_data):
    args = ["recipe=collab_sft_tiny", "dataset_limit=12", "followup_contexts=[]", "max_steps=8",
            "per_device_train_batch_size=2", "save_strategy=no", "report_to=none", "logging_steps=1",
            "eval.enabled=false", "eval.datasets=[]", "ddp_timeout=60"]  # fmt: skip
    records = launch(tmp_path / "run", 2, args, timeout=240, FIC_TEST_SIGTERM="1:2")
    assert sorted(map(int, records[0]["steps"])) == sorted(map(int, records[1]["steps"])) == [1, 2]
    assert (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").is_file()
    assert not (tmp_path / "run" / "checkpoint-3").exists()


TOPOLOGY = ["recipe=fic_llama3b", "model_name_or_path=tiny:llama3", "use_vllm=false", "train_limit=32", "max_steps=2",
            "per_device_train_batch_size=4", "gradient_accumulation_steps=1", "bf16=false", "dtype=float32",
            "report_to=none", "eval.enabled=false", "logging_steps=1", "save_strategy=no",
            "rollout_max_new_tokens=16", "max_completion_length=24", "gradient_checkpointing=false"]  # fmt: skip


@pytest.mark.parametrize(
    "config,extra",
    [("zero2_cpu.yaml", []), ("zero3_cpu.yaml", []), ("zero3_cpu.yaml", ["use_peft=false"]), ("fsdp2_cpu.yaml", [])],
    ids=["zero2", "zero3-lora", "zero3-full", "fsdp2"],
)
def test_vasd_on_sharded_topologies(tmp_path, shared_data, config, extra):
    """DeepSpeed ZeRO-2/3 (DS_ACCELERATOR=cpu) and FSDP2 on 2 CPU processes: one gloo group of 2 (not two lone main
    processes), each rank training on 4 of the 8 rows of every step, and VASD's 2 steps logged. ZeRO-3 full-parameter
    has a separate frozen teacher whose lm_head the loss reads outside its forward (the gathered-weight path)."""
    if config.startswith("zero"):
        pytest.importorskip("deepspeed")
    records = launch(tmp_path / "run", 2, [*TOPOLOGY, f"train_data={gsm8k(shared_data)}", *extra], config=config)
    assert [s for s, _ in losses(records[0])] == [1, 2]
    for step in ("1", "2"):
        a, b = records[0]["steps"][step], records[1]["steps"][step]
        assert len(a) == len(b) == 4 and not set(a) & set(b)


def test_checkpoint_evaluation_under_fsdp_reads_the_checkpoint_from_disk(tmp_path, shared_data):
    """FSDP2 on 2 processes with `eval.load_from=disk` and SHARDED_STATE_DICT: the checkpoint is evaluated once,
    from whole weights (transformers 5 writes a full `model.safetensors` here; where a checkpoint holds only shards,
    `fic.trainers.callbacks.full_weights` gathers them first, see the test below)."""
    args = [*TOPOLOGY, f"train_data={gsm8k(shared_data)}", "save_strategy=steps", "save_steps=2", "use_peft=false",
            "eval.enabled=true", "eval.every_n_saves=1", "eval.load_from=disk", "eval.evaluations=[lic]",
            "eval.lic.data=synthetic", "eval.lic.limit=2", "eval.lic.max_new_tokens=4", "eval.datasets=[]"]  # fmt: skip
    config = tmp_path / "fsdp2_sharded.yaml"  # accelerate sets FSDP_STATE_DICT_TYPE from the config file
    text = (ROOT / "accelerate_configs" / "fsdp2_cpu.yaml").read_text()
    config.write_text(text.replace("FULL_STATE_DICT", "SHARDED_STATE_DICT"))
    launch(tmp_path / "run", 2, args, config=str(config))
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / "eval" / "metrics.json").is_file()
    history = (tmp_path / "run" / "eval" / "history.jsonl").read_text().splitlines()
    assert len(history) == 1  # once, by the main process


def test_full_weights_are_written_for_a_checkpoint_without_them(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fic.tiny import tiny_model
    from fic.trainers.callbacks import full_weights

    path = tiny_model("chatml")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / "pytorch_model_fsdp_0").mkdir()  # what a sharded FSDP save leaves instead of model.safetensors
    target = full_weights(checkpoint, model, tokenizer)
    assert target == checkpoint / "full_model"
    reloaded = AutoModelForCausalLM.from_pretrained(target)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
    assert full_weights(target, model, tokenizer) == target  # whole weights: used as they are


def test_the_evaluation_after_training_is_split_across_ranks_and_equals_one_process(tmp_path, shared_data):
    """Collab SFT's held-out evaluation after training runs on both ranks (it ran on rank 0 while rank 1 waited at a
    barrier, bounded by ddp_timeout): each rank samples the user turns of its chunks of the 34 contexts (32 + 2), and
    the merged rows and summary equal a one-process run's. learning_rate=0 keeps the trained weights identical in
    both runs, so any difference would come from the evaluation."""
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    args = ["recipe=collab_sft_tiny", f"train_datasets=[{data}]", "followup_contexts=[]", "max_steps=1",
            "save_strategy=no", "report_to=none", "learning_rate=0.0", "eval.enabled=false",
            f"eval.datasets=[{gsm8k(shared_data, 'test')}]", "eval.limit=34", "eval.responses=data",
            "eval.temperatures=[0.0,1.0]", "eval.samples=2", "eval.max_new_tokens=6", "seed=0"]  # fmt: skip
    one = launch(tmp_path / "one", 1, [*args, "per_device_train_batch_size=4"])
    two = launch(tmp_path / "two", 2, [*args, "per_device_train_batch_size=2"])
    assert one[0]["sampled_after"] == 2 * 34  # two temperatures
    assert [two[r]["sampled_after"] for r in (0, 1)] == [2 * 32, 2 * 2]
    assert [two[r]["sampled_before"] for r in (0, 1)] == [2 * 32, 2 * 2]
    turns = {n: (tmp_path / n / "eval_turns" / "after.jsonl").read_text().splitlines() for n in ("one", "two")}
    assert len(turns["two"]) == 34 * (2 + 2) and turns["two"] == turns["one"]  # greedy too: `samples` rows
    summary = {n: json.loads((tmp_path / n / "eval_summary.json").read_text()) for n in ("one", "two")}
    assert summary["two"]["after"] == summary["one"]["after"]
    assert summary["two"]["difference"] == summary["one"]["difference"]


def test_the_checkpoint_evaluation_in_training_is_split_across_ranks(tmp_path, shared_data):
    """The in-training evaluation (EvalCallback, probe + LiC) runs on both ranks, each its chunks (it ran on rank 0
    while rank 1 waited at a barrier, bounded by ddp_timeout); the checkpoint is evaluated once (one history line) and
    its probe rows equal a one-process run's (learning_rate=0: the same weights)."""
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    args = ["recipe=collab_sft_tiny", f"train_datasets=[{data}]", "followup_contexts=[]", "max_steps=1",
            "save_strategy=steps", "save_steps=1", "report_to=none", "learning_rate=0.0", "eval.enabled=true",
            "eval.every_n_saves=1", "eval.evaluations=[probe,lic]", f"eval.datasets=[{gsm8k(shared_data, 'test')}]",
            "eval.limit=4", "eval.responses=data", "eval.temperatures=[0.0,1.0]", "eval.samples=2",
            "eval.max_new_tokens=4", "eval.lic.data=synthetic", "eval.lic.limit=4", "eval.lic.max_new_tokens=4",
            "eval.lic.modes=[full,sharded]", "seed=0"]  # fmt: skip
    one = launch(tmp_path / "one", 1, [*args, "per_device_train_batch_size=4"], timeout=400)
    two = launch(tmp_path / "two", 2, [*args, "per_device_train_batch_size=2"], timeout=400)
    for name in ("samples.jsonl", "episodes.jsonl"):
        assert all(two[r].get("jobs", {}).get(name, 0) > 0 for r in (0, 1)), (
            name,
            two[0].get("jobs"),
            two[1].get("jobs"),
        )
        assert two[0]["jobs"][name] + two[1]["jobs"][name] == one[0]["jobs"][name]
    rows = {
        n: (tmp_path / n / "checkpoint-1" / "eval" / "probe" / "samples.jsonl").read_text() for n in ("one", "two")
    }
    assert rows["two"] and rows["two"] == rows["one"]
    assert len((tmp_path / "two" / "eval" / "history.jsonl").read_text().splitlines()) == 1


def test_model_answers_and_the_evaluation_before_training_are_split_across_ranks(tmp_path, shared_data):
    """`context_answers: model` and `eval.responses: model`: every item is answered once over the two ranks, not
    once per rank, and both ranks take part (the main process does not work alone while the other waits)."""
    args = ["recipe=followup_rl_tiny", "model_name_or_path=tiny:chatml", "context_limit=8", "context_answers=model",
            "num_generations=4", "per_device_train_batch_size=4", "max_steps=1", "save_strategy=no",
            "report_to=none", f"eval.datasets=[{gsm8k(shared_data, 'test')}]", "eval.limit=4",
            "eval.responses=model", "eval.response_tokens=8", "eval.temperatures=[1.0]", "eval.samples=2",
            "eval.max_new_tokens=8"]  # fmt: skip
    records = launch(tmp_path / "run", 2, args, FIC_TEST_STANDIN="1")
    answered = [records[r].get("answered", 0) for r in (0, 1)]
    assert sum(answered) == 8 + 4 and min(answered) > 0, answered

"""The SLURM job's commands (`src/fic/slurm.py`, `slurm/train.sbatch`): what each node runs for given SLURM variables.

Only the commands are checked here; SLURM itself, real nodes and vLLM servers are not run (the multi-node launch path
runs on one host in tests/test_multinode.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fic import slurm

ROOT = Path(__file__).resolve().parents[1]
JUDGE = "Qwen/Qwen3-30B-A3B-Instruct-2507"


def env_for(train_nodes: int, vllm: bool, recipe: str = "fic_llama3b", **extra) -> dict:
    """SLURM variables of an allocation of `train_nodes` GPU nodes (+1 with `vllm`), 8 GPUs each."""
    count = train_nodes + int(vllm)
    env = {"SLURM_JOB_NODELIST": f"gpu[01-{count:02d}]" if count > 1 else "gpu01", "SLURM_JOB_NUM_NODES": str(count),
           "SLURM_GPUS_ON_NODE": "8", "FIC_RECIPE": recipe, **extra}  # fmt: skip
    if vllm:
        env["FIC_VLLM_NODE"] = "1"
    return env


def test_nodelists_expand_like_scontrol_show_hostnames():
    assert slurm.expand_nodelist("gpu[01-03,07],login2") == ["gpu01", "gpu02", "gpu03", "gpu07", "login2"]
    assert slurm.expand_nodelist("node9") == ["node9"]
    assert slurm.expand_nodelist("a[8-10]") == ["a8", "a9", "a10"]


@pytest.mark.parametrize("nodes", [1, 4])
def test_training_nodes_without_vllm(nodes):
    job = slurm.job_from_env(env_for(nodes, vllm=False), ROOT)
    commands = [slurm.train_command(job, rank) for rank in range(nodes)]
    for rank, command in enumerate(commands):
        flags = dict(zip(command[2:-3:2], command[3:-3:2]))
        assert command[:2] == ["accelerate", "launch"]
        assert flags["--config_file"] == "accelerate_configs/multinode_zero3.yaml"
        assert flags["--num_machines"] == str(nodes) and flags["--num_processes"] == str(8 * nodes)
        assert flags["--machine_rank"] == str(rank) and flags["--main_process_ip"] == "gpu01"
        assert flags["--main_process_port"] == "29500"
        assert flags["--rdzv_backend"] == ("c10d" if nodes > 1 else "static")
        assert command[-3:] == ["train.py", "recipe=fic_llama3b", "resume_from_checkpoint=auto"]
    assert slurm.vllm_commands(job) == [] and "vLLM" not in slurm.plan(job)


@pytest.mark.parametrize("nodes", [1, 4])
def test_training_nodes_with_a_vllm_node_for_rollouts_and_the_judge(nodes):
    env = env_for(nodes, vllm=True, recipe="followup_rl_qwen2b", FIC_JUDGE_MODEL=JUDGE, FIC_OVERRIDES="max_steps=9")
    job = slurm.job_from_env(env, ROOT)
    server = f"gpu{nodes + 1:02d}"
    assert job.train_hosts == [f"gpu{i:02d}" for i in range(1, nodes + 1)] and job.vllm_host == server
    for rank in range(nodes):
        command = slurm.train_command(job, rank)
        assert command[command.index("--num_machines") + 1] == str(nodes)  # the vLLM node does not train
        tail = command[command.index("train.py") + 1 :]
        assert tail == [
            "recipe=followup_rl_qwen2b", "resume_from_checkpoint=auto", "use_vllm=true", "vllm_mode=server",
            f"vllm_server_base_url=http://{server}:8000", "eval.judge=llm",
            f"eval.judge_base_url=http://{server}:8001/v1", f"eval.judge_model={JUDGE}", "reward_judge=llm",
            f"reward_judge_base_url=http://{server}:8001/v1", f"reward_judge_model={JUDGE}", "max_steps=9",
        ]  # fmt: skip
    assert slurm.vllm_commands(job) == [
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, ["trl", "vllm-serve", "--model", "Qwen/Qwen3.5-2B", "--host", "0.0.0.0",
                                               "--port", "8000", "--data-parallel-size", "4"]),
        ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, ["vllm", "serve", JUDGE, "--host", "0.0.0.0", "--port", "8001",
                                               "--tensor-parallel-size", "4"]),
    ]  # fmt: skip
    assert slurm.health_urls(job) == [f"http://{server}:8000/health/", f"http://{server}:8001/health"]


def test_a_judge_only_vllm_node_for_a_method_without_vllm_rollouts():
    job = slurm.job_from_env(env_for(4, vllm=True, FIC_JUDGE_MODEL=JUDGE), ROOT)  # VASD: no rollout server
    assert [c[:2] for _, c in slurm.vllm_commands(job)] == [["vllm", "serve"]]
    assert slurm.vllm_commands(job)[0][0] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert not any(o.startswith(("use_vllm", "reward_judge")) for o in slurm.server_overrides(job))
    with pytest.raises(slurm.SlurmError, match="nothing to serve"):
        slurm.job_from_env(env_for(4, vllm=True), ROOT)


def dry_run(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "FIC_"))}
    command = [sys.executable, "-m", "fic.slurm", "--dry-run"]
    return subprocess.run(command, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("missing", ["SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "FIC_RECIPE"])
def test_a_dry_run_without_a_needed_variable_names_it_in_one_line(missing):
    env = env_for(2, vllm=False)
    del env[missing]
    done = dry_run(env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: {missing} is not set") and len(done.stderr.strip().splitlines()) == 1


def test_a_multinode_config_whose_processes_do_not_divide_by_its_machines_is_refused(tmp_path):
    config = tmp_path / "accelerate_configs" / "multinode_zero3.yaml"
    config.parent.mkdir()
    text = (ROOT / "accelerate_configs" / "multinode_zero3.yaml").read_text()
    config.write_text(text.replace("num_processes: 16", "num_processes: 15"))
    with pytest.raises(slurm.SlurmError) as err:
        slurm.job_from_env(env_for(2, vllm=False), tmp_path)
    message = str(err.value)
    assert "num_processes 15 does not divide by num_machines 2" in message and "\n" not in message
    for name in ("multinode_zero3.yaml", "multinode_fsdp2.yaml", "multinode_cpu.yaml", "multinode_zero2.yaml"):
        slurm.read_accelerate_config(ROOT / "accelerate_configs" / name)  # the shipped ones divide


def test_the_batch_script_dry_run_prints_each_nodes_command():
    env = env_for(4, vllm=True, recipe="followup_rl_qwen2b", FIC_JUDGE_MODEL=JUDGE, FIC_TOPOLOGY="fsdp2",
                  FIC_DRY_RUN="1", FIC_PYTHON=sys.executable)  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "FIC_"))}
    done = subprocess.run(["bash", "slurm/train.sbatch"], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == slurm.plan(slurm.job_from_env(env, ROOT))
    lines = done.stdout.splitlines()
    launches = [shlex.split(line) for line in lines if line.startswith("accelerate launch")]
    assert [c[c.index("--machine_rank") + 1] for c in launches] == ["0", "1", "2", "3"]
    assert all("accelerate_configs/multinode_fsdp2.yaml" in c for c in launches)
    assert lines[-2].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 trl vllm-serve")
    assert lines[-1].startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve")
    evaluation = subprocess.run(["bash", "slurm/eval.sbatch", "outputs/run"], cwd=ROOT, capture_output=True,
                                text=True, env={**clean, "FIC_DRY_RUN": "1", "FIC_PYTHON": "python"}, timeout=60)  # fmt: skip
    assert evaluation.stdout.strip() == ("python -m fic.cli eval-checkpoints outputs/run --watch --poll 60 "
                                         "--idle-timeout 14400 --backend vllm")  # fmt: skip


@pytest.mark.slow
def test_the_server_overrides_are_valid_recipe_keys():
    """The overrides a vLLM node adds parse into the recipe's config (unknown keys would be refused)."""
    import train

    job = slurm.job_from_env(env_for(2, vllm=True, recipe="followup_rl_qwen2b", FIC_JUDGE_MODEL=JUDGE), ROOT)
    command = slurm.train_command(job, 0)
    overrides = command[command.index("train.py") + 2 :]  # after recipe=NAME: resume + the server overrides
    recipe, _ = train.load([f"recipe={job.recipe}", *overrides, "bf16=false"])  # bf16: no GPU here
    assert recipe.raw["vllm_server_base_url"] == "http://gpu03:8000"

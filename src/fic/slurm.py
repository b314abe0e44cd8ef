"""The commands of a fic training job on a SLURM cluster, built from the SLURM environment (`slurm/train.sbatch`).

The job holds N training nodes and, with `FIC_VLLM_NODE=1`, one more node (the allocation's last) that serves vLLM:
`trl vllm-serve` for the policy's rollouts (follow-up RL, `vllm_mode=server`) and/or `vllm serve` for the LLM judge.
The batch script starts `python -m fic.slurm` with srun once per node (the vLLM node in its own step, in the
background, so the job ends with training); it finds its node by `SLURMD_NODENAME` and runs that node's command:

* training node R: `accelerate launch --config_file accelerate_configs/multinode_{zero3,fsdp2}.yaml --num_machines N
  --num_processes N*G --machine_rank R --main_process_ip HEAD --main_process_port PORT --rdzv_backend c10d train.py
  recipe=NAME resume_from_checkpoint=auto ...` (HEAD: the first node; G: GPUs per node). `resume_from_checkpoint=auto`
  makes a requeued job continue from the checkpoint fic saved on SIGTERM (`fic.trainers.preemption`); a first start
  finds none and starts fresh. With a vLLM node, the server addresses go to the recipe as overrides, and the node
  waits until the servers answer before it launches.
* the vLLM node: the server(s), the GPUs split between them when both run.

`python -m fic.slurm --dry-run` (or `FIC_DRY_RUN=1`) prints every node's command for the SLURM variables it is given
and runs nothing. Settings (environment): `FIC_RECIPE` (required), `FIC_OVERRIDES` (more `key=value` overrides,
space-separated), `FIC_TOPOLOGY` (`zero3`, default, or `fsdp2`), `FIC_GPUS_PER_NODE` (default `SLURM_GPUS_ON_NODE`,
else the config's num_processes / num_machines), `FIC_MASTER_PORT` (29500), `FIC_VLLM_NODE`, `FIC_ROLLOUT_MODEL`
(default: the recipe's model, for follow-up RL), `FIC_JUDGE_MODEL` (served for the probe's and the reward's LLM judge),
`FIC_VLLM_PORT` (8000), `FIC_JUDGE_PORT` (8001), `FIC_VLLM_WAIT` (seconds a training node waits for them, 1800).

Tested: the commands, for 1 and 4 nodes, with and without a vLLM node (tests/test_slurm.py), and the same multi-node
launch path on one host with two CPU "nodes" (tests/test_multinode.py, static rendezvous, gloo). Not run here: SLURM
itself, real nodes, NCCL, the c10d rendezvous across machines, vLLM servers.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from fic.errors import FicError
from fic.recipe import load_raw

TOPOLOGIES = {"zero3": "accelerate_configs/multinode_zero3.yaml", "fsdp2": "accelerate_configs/multinode_fsdp2.yaml"}
ROLLOUT_METHODS = ("followup_rl",)  # methods whose rollouts TRL can take from `trl vllm-serve`


class SlurmError(FicError):
    """A SLURM variable or fic job setting that cannot give a launch command."""


@dataclass
class Job:
    """One training job: its nodes and what runs on them."""

    hosts: list[str]  # the allocation's nodes in SLURM order; with a vLLM node, the last one serves
    recipe: str
    method: str
    model: str | None
    overrides: list[str]
    config: str
    gpus_per_node: int
    port: int = 29500
    vllm_node: bool = False
    rollout_model: str | None = None
    judge_model: str | None = None
    vllm_port: int = 8000
    judge_port: int = 8001

    @property
    def train_hosts(self) -> list[str]:
        return self.hosts[:-1] if self.vllm_node else self.hosts

    @property
    def vllm_host(self) -> str | None:
        return self.hosts[-1] if self.vllm_node else None


def expand_nodelist(spec: str) -> list[str]:
    """SLURM's compact host list (`gpu[01-03,07],login2`) as host names, in order."""
    hosts = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", spec):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            for i in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{i:0{len(first)}d}")
    return hosts


def _need(env: dict, name: str, why: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise SlurmError(f"{name} is not set; {why}")
    return value


def _int(env: dict, name: str, default: int | None = None) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return default
    match = re.match(r"^(?:[a-z0-9_]+:)?(\d+)", text)  # SLURM_GPUS_ON_NODE may read `h100:8`
    if not match:
        raise SlurmError(f"{name}={text!r} is not a number")
    return int(match.group(1))


def read_accelerate_config(path: str | Path) -> dict:
    """The accelerate config's keys; a multi-node config must split its processes evenly over its machines."""
    path = Path(path)
    if not path.is_file():
        raise SlurmError(f"accelerate config {path} not found; run from the fic repository (sbatch from its root)")
    config = yaml.safe_load(path.read_text()) or {}
    machines, processes = int(config.get("num_machines", 1)), int(config.get("num_processes", 1))
    if machines > 1 and processes % machines:
        raise SlurmError(f"{path}: num_processes {processes} does not divide by num_machines {machines}; set "
                         f"num_processes to num_machines x GPUs per node (e.g. {machines * (processes // machines or 1)})")  # fmt: skip
    return config


def job_from_env(env: dict | None = None, root: str | Path = ".") -> Job:
    """The job the SLURM and FIC_* variables describe (see the module docstring). Raises `SlurmError`."""
    env = dict(os.environ if env is None else env)
    root = Path(root)
    nodelist = _need(env, "SLURM_JOB_NODELIST", "run inside an allocation (sbatch/salloc), or set it for a dry run")
    hosts = expand_nodelist(nodelist)
    count = _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES")
    if count is None:
        raise SlurmError("SLURM_JOB_NUM_NODES is not set; run inside an allocation, or set it for a dry run")
    if count != len(hosts):
        raise SlurmError(f"SLURM_JOB_NUM_NODES={count} but SLURM_JOB_NODELIST={nodelist!r} names {len(hosts)} nodes")
    recipe = _need(env, "FIC_RECIPE", "name the recipe to train, e.g. FIC_RECIPE=fic_llama3b")
    topology = env.get("FIC_TOPOLOGY", "zero3")
    if topology not in TOPOLOGIES:
        raise SlurmError(f"FIC_TOPOLOGY={topology!r}; valid: {', '.join(TOPOLOGIES)}")
    config = read_accelerate_config(root / TOPOLOGIES[topology])
    gpus = _int(env, "FIC_GPUS_PER_NODE") or _int(env, "SLURM_GPUS_ON_NODE")
    gpus = gpus or int(config.get("num_processes", 1)) // int(config.get("num_machines", 1))
    overrides = shlex.split(env.get("FIC_OVERRIDES", ""))
    raw = load_raw(recipe, overrides, root / "recipes")
    vllm_node = env.get("FIC_VLLM_NODE", "0") not in ("", "0", "false")
    job = Job(
        hosts=hosts, recipe=recipe, method=raw["method"], model=raw.get("model_name_or_path"), overrides=overrides,
        config=TOPOLOGIES[topology], gpus_per_node=gpus, port=_int(env, "FIC_MASTER_PORT", 29500),
        vllm_node=vllm_node, judge_model=env.get("FIC_JUDGE_MODEL") or None,
        vllm_port=_int(env, "FIC_VLLM_PORT", 8000), judge_port=_int(env, "FIC_JUDGE_PORT", 8001),
    )  # fmt: skip
    if vllm_node:
        if len(hosts) < 2:
            raise SlurmError("FIC_VLLM_NODE=1 needs at least 2 nodes (training + the vLLM node); ask sbatch for N+1")
        if job.method in ROLLOUT_METHODS:
            job.rollout_model = env.get("FIC_ROLLOUT_MODEL") or job.model
        if not (job.rollout_model or job.judge_model):
            raise SlurmError(f"FIC_VLLM_NODE=1 but nothing to serve: method {job.method!r} takes no vLLM rollouts "
                             "and FIC_JUDGE_MODEL is not set")  # fmt: skip
    return job


def server_overrides(job: Job) -> list[str]:
    """Recipe overrides that point training at the vLLM node's servers."""
    if not job.vllm_node:
        return []
    out = []
    if job.rollout_model:
        out += ["use_vllm=true", "vllm_mode=server", f"vllm_server_base_url=http://{job.vllm_host}:{job.vllm_port}"]
    if job.judge_model:
        url = f"http://{job.vllm_host}:{job.judge_port}/v1"
        out += ["eval.judge=llm", f"eval.judge_base_url={url}", f"eval.judge_model={job.judge_model}"]
        if job.method == "followup_rl":
            out += ["reward_judge=llm", f"reward_judge_base_url={url}", f"reward_judge_model={job.judge_model}"]
    return out


def train_command(job: Job, rank: int) -> list[str]:
    """What training node `rank` runs."""
    nodes = len(job.train_hosts)
    return [
        "accelerate", "launch", "--config_file", job.config, "--num_machines", str(nodes),
        "--num_processes", str(nodes * job.gpus_per_node), "--machine_rank", str(rank),
        "--main_process_ip", job.train_hosts[0], "--main_process_port", str(job.port),
        "--rdzv_backend", "c10d" if nodes > 1 else "static",
        "train.py", f"recipe={job.recipe}", "resume_from_checkpoint=auto", *server_overrides(job), *job.overrides,
    ]  # fmt: skip


def vllm_commands(job: Job) -> list[tuple[dict, list[str]]]:
    """(extra environment, command) of each server on the vLLM node. Two servers split its GPUs in halves; the policy
    (small, many short rollouts) is replicated over its GPUs (data parallel), the judge model is split over its GPUs
    (tensor parallel)."""
    servers = []
    if job.rollout_model:
        servers.append(["trl", "vllm-serve", "--model", job.rollout_model, "--host", "0.0.0.0",
                        "--port", str(job.vllm_port), "--data-parallel-size"])  # fmt: skip
    if job.judge_model:
        servers.append(["vllm", "serve", job.judge_model, "--host", "0.0.0.0", "--port", str(job.judge_port),
                        "--tensor-parallel-size"])  # fmt: skip
    if not servers:
        return []
    share = max(job.gpus_per_node // len(servers), 1)
    devices = [",".join(str(d) for d in range(i * share, (i + 1) * share)) for i in range(len(servers))]
    return [({"CUDA_VISIBLE_DEVICES": d}, [*command, str(share)]) for d, command in zip(devices, servers)]


def health_urls(job: Job) -> list[str]:
    """What a training node waits for before it launches (TRL's server answers on /health/, vLLM's on /health)."""
    urls = []
    if job.rollout_model:
        urls.append(f"http://{job.vllm_host}:{job.vllm_port}/health/")
    if job.judge_model:
        urls.append(f"http://{job.vllm_host}:{job.judge_port}/health")
    return urls


def plan(job: Job) -> str:
    """Every node's command, one block per node, as a shell would run it."""
    lines = []
    for rank, host in enumerate(job.train_hosts):
        lines.append(f"# node {rank} ({host}): training, machine_rank {rank}")
        if job.vllm_node:
            lines.append(f"#   waits for {', '.join(health_urls(job))}")
        lines.append(shlex.join(train_command(job, rank)))
    if job.vllm_node:
        lines.append(f"# node {len(job.train_hosts)} ({job.vllm_host}): vLLM")
        for extra, command in vllm_commands(job):
            lines.append(" ".join(f"{k}={v}" for k, v in extra.items()) + " " + shlex.join(command))
    return "\n".join(lines)


def wait_for(urls: list[str], timeout: float) -> None:
    """Poll each URL until it answers 200; `SlurmError` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    for url in urls:
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SlurmError(f"{url} did not answer within FIC_VLLM_WAIT={timeout:g} s; see the vLLM node's log")
            time.sleep(10)


def run_node(job: Job, node: int, env: dict) -> int:
    """Run node `node`'s part of the job in this process's place (servers: until they exit)."""
    if node < len(job.train_hosts):
        if job.vllm_node:
            wait_for(health_urls(job), float(env.get("FIC_VLLM_WAIT", 1800)))
        command = train_command(job, node)
        os.execvp(command[0], command)
    servers = [subprocess.Popen(command, env={**env, **extra}) for extra, command in vllm_commands(job)]
    return max(server.wait() for server in servers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fic.slurm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print every node's command and run nothing")
    parser.add_argument("--hosts", choices=["train", "vllm"], help="print the training nodes (or the vLLM node), "
                        "comma-separated, for srun --nodelist")  # fmt: skip
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        job = job_from_env(env)
        if args.dry_run or env.get("FIC_DRY_RUN", "0") not in ("", "0"):
            print(plan(job))
            return 0
        if args.hosts:
            print(",".join(job.train_hosts if args.hosts == "train" else [job.vllm_host or ""]))
            return 0
        name = _need(env, "SLURMD_NODENAME", "start this through srun (one task per node), or pass --dry-run")
        if name not in job.hosts:
            raise SlurmError(f"SLURMD_NODENAME={name!r} is not in SLURM_JOB_NODELIST ({', '.join(job.hosts)})")
        return run_node(job, job.hosts.index(name), env)
    except FicError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

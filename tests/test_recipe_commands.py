"""The shell commands the recipes, the README and the SLURM scripts tell GPU users to run, checked as written.

A block is a group of commands with no blank line between them (a fenced ```bash block in the README). Where a block
starts a vLLM server (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`, `trl vllm-serve`) beside training
(`accelerate launch ... train.py`), the server runs for the whole job and takes 0.9 of its GPU's memory by default:
started on the training's GPUs, GPU 0 runs out of memory. So in such a block every GPU command names its GPUs with
`CUDA_VISIBLE_DEVICES`, each server's are apart from every other command's, `--num_processes` (or the accelerate
config's `num_processes`) equals the training's visible GPUs, the recipe exists and its overrides parse with the
project's own loader (no model loads), `fic` commands parse with their own flags, and every `localhost` endpoint the
recipe points at is served in the block under the model name the recipe asks for.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

COMMAND = re.compile(r"(?:^|:\s+)((?:[A-Z_]+=\S*\s+)*(?:vllm|python3?|accelerate|fic|trl|torchrun)\s.*)$")


def command_files() -> list[Path]:
    return [*sorted((ROOT / "recipes").glob("*.yaml")), ROOT / "README.md", *sorted((ROOT / "slurm").glob("*.sbatch"))]


def blocks_of(text: str, markdown: bool) -> list[list[str]]:
    """The command blocks of a file's text: each a list of commands, continuation lines joined."""
    if markdown:
        groups = [m.group(1).splitlines() for m in re.finditer(r"```(?:bash|sh)\n(.*?)```", text, re.S)]
    else:
        groups, current = [], []
        for line in text.splitlines():
            body = line.lstrip("#").strip()
            if body:
                current.append(body)
            elif current:
                groups.append(current)
                current = []
        groups.append(current)
    out = []
    for lines in groups:
        commands, pending = [], None
        for raw in lines:
            body = re.sub(r"^\d+\.\s+", "", raw.lstrip("#").strip())
            if pending is not None:
                pending += " " + body.rstrip("\\").strip()
                if not body.endswith("\\"):
                    commands.append(pending)
                    pending = None
                continue
            found = COMMAND.search(body)
            if not found:
                continue
            command = found.group(1)
            if command.endswith("\\"):
                pending = command.rstrip("\\").strip()
            else:
                commands.append(command)
        if pending is not None:
            commands.append(pending)
        if commands:
            out.append(commands)
    return out


class Command:
    """One shell command: its environment assignments and its words (`&`, `#` comments dropped)."""

    def __init__(self, text: str):
        self.text = text
        words = [w for w in shlex.split(text, comments=True) if w != "&"]
        self.env = {}
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            self.env[key] = value
        self.words = words

    def option(self, name: str, default: str | None = None) -> str | None:
        for i, word in enumerate(self.words):
            if word == name and i + 1 < len(self.words):
                return self.words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
        return default

    @property
    def server(self) -> bool:
        w = self.words
        return (
            w[:2] == ["vllm", "serve"]
            or w[:2] == ["trl", "vllm-serve"]
            or (len(w) >= 3 and w[0].startswith("python") and w[1:3] == ["-m", "vllm.entrypoints.openai.api_server"])
        )

    @property
    def training(self) -> bool:
        if "train.py" not in self.words or {"--plan", "--help-keys"} & set(self.words):
            return False
        return self.words[0] in ("accelerate", "torchrun") or self.words[0].startswith("python")

    @property
    def gpu_job(self) -> bool:
        """A command that loads a model on a GPU while the block's servers run."""
        return self.server or self.training or (self.words[0] == "fic" and self.option("--backend") == "vllm")

    def gpus(self) -> set[int] | None:
        value = self.env.get("CUDA_VISIBLE_DEVICES")
        if not value:
            return None
        return {int(x) for x in value.split(",")}

    def served(self) -> tuple[int, str]:
        """(port, served model name) of a server command."""
        if self.words[0] == "trl":
            return int(self.option("--port", "8000")), self.option("--model")
        model = self.words[2] if self.words[0] == "vllm" else self.option("--model")
        return int(self.option("--port", "8000")), self.option("--served-model-name", model)

    def train_args(self) -> list[str]:
        return self.words[self.words.index("train.py") + 1 :]


def localhost_endpoints(raw: dict, prefix: str = "") -> list[tuple[str, int, str | None]]:
    """(key, port, model key) of every `*base_url` in a recipe mapping that points at this machine."""
    found = []
    for key, value in raw.items():
        if isinstance(value, dict):
            found += localhost_endpoints(value, f"{prefix}{key}.")
        elif key.endswith("base_url") and isinstance(value, str):
            m = re.match(r"https?://(?:localhost|127\.0\.0\.1)(?::(\d+))?", value)
            if m:
                stem = key[: -len("base_url")]
                model_key = f"{stem}model" if stem.endswith("judge_") else None
                found.append((f"{prefix}{key}", int(m.group(1) or 80), model_key and f"{prefix}{model_key}"))
    return found


def lookup(raw: dict, dotted: str):
    for part in dotted.split("."):
        raw = raw.get(part) if isinstance(raw, dict) else None
    return raw


def parse_fic(command: Command) -> str | None:
    """The `fic` command parsed by its own argparse parser; a problem line or None."""
    from fic.cli import commands

    name = command.words[1]
    if name not in commands():
        return f"`fic {name}`: no such command"
    module_name, add_name, _, _ = commands()[name]
    parser = argparse.ArgumentParser(prog=f"fic {name}", exit_on_error=False)
    getattr(importlib.import_module(module_name), add_name)(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            _, unknown = parser.parse_known_args(command.words[2:])
    except (argparse.ArgumentError, SystemExit) as err:
        return f"`fic {name}` does not parse: {stderr.getvalue().strip().splitlines()[-1:] or err}"
    return f"`fic {name}` does not parse: unknown {unknown}" if unknown else None


def problems(block: list[str]) -> list[str]:
    """What is wrong with a block of commands (see the module docstring); [] for a block without a server beside
    training."""
    commands = [Command(c) for c in block]
    servers = [c for c in commands if c.server]
    trainings = [c for c in commands if c.training]
    if not servers or not trainings:
        return []
    found = []
    for c in (c for c in commands if c.gpu_job):
        if c.gpus() is None:
            found.append(f"`{c.text[:60]}...` sets no CUDA_VISIBLE_DEVICES beside a server that runs meanwhile")
    for s in servers:
        for c in (c for c in commands if c.gpu_job and c is not s):
            shared = (s.gpus() or set()) & (c.gpus() or set())
            if shared:
                found.append(f"GPU(s) {sorted(shared)} both serve `{' '.join(s.words[:3])}` and run "
                             f"`{' '.join(c.words[:3])}`")  # fmt: skip
    sys.path.insert(0, str(ROOT))
    import train

    for t in trainings:
        config = t.option("--config_file")
        processes = t.option("--num_processes") or t.option("--nproc_per_node")
        if config is not None:
            path = ROOT / config
            if not path.is_file():
                found.append(f"--config_file {config}: no such file")
                continue
            processes = processes or str(yaml.safe_load(path.read_text()).get("num_processes", 1))
        if t.gpus() is not None and processes is not None and int(processes) != len(t.gpus()):
            found.append(f"{processes} training processes on {len(t.gpus())} visible GPUs {sorted(t.gpus())}")
        try:
            recipe, _ = train.load([*t.train_args(), "--plan"])  # --plan: no bf16 device check on a CPU machine
        except Exception as err:
            found.append(f"train.py {' '.join(t.train_args())}: {err}")
            continue
        for key, port, model_key in localhost_endpoints(recipe.raw):
            served = [s.served() for s in servers if s.served()[0] == port]
            if not served:
                found.append(f"{key} points at port {port}, which no server of the block listens on")
            elif model_key and lookup(recipe.raw, model_key) not in {name for _, name in served}:
                found.append(f"{model_key}={lookup(recipe.raw, model_key)!r} is not the model served on port {port}")
            elif key.endswith("vllm_server_base_url") and recipe.raw.get("model_name_or_path") not in {
                name for _, name in served
            }:
                found.append(f"the rollout server on port {port} does not serve model_name_or_path")
    for c in (c for c in commands if c.words[0] == "fic"):
        problem = parse_fic(c)
        if problem:
            found.append(problem)
    return found


def served_blocks() -> list[tuple[str, list[str]]]:
    out = []
    for path in command_files():
        for block in blocks_of(path.read_text(), path.suffix == ".md"):
            commands = [Command(c) for c in block]
            if any(c.server for c in commands) and any(c.training for c in commands):
                out.append((str(path.relative_to(ROOT)), block))
    return out


def test_every_block_that_serves_beside_training_is_found():
    found = {name for name, _ in served_blocks()}
    assert {"recipes/collab_sft_qwen2b.yaml", "recipes/followup_rl_qwen2b.yaml", "README.md"} <= found
    assert len(served_blocks()) >= 4  # collab SFT, follow-up RL colocate and server mode, the README's


@pytest.mark.parametrize("where,block", served_blocks(), ids=lambda x: x if isinstance(x, str) else "")
def test_servers_and_training_run_side_by_side_as_written(where, block):
    assert problems(block) == [], f"{where}: {block}"


# The instructions the Qwen recipes carried: the judge and the 8 training processes on the same 8 GPUs.
BEFORE = """\
# 1. Serve the judge:   vllm serve Qwen/Qwen3-30B-A3B-Instruct-2507 --port 8001
# 2. accelerate launch --config_file accelerate_configs/ddp.yaml train.py recipe=followup_rl_qwen2b
"""


def test_a_judge_on_the_training_gpus_is_refused():
    (block,) = blocks_of(BEFORE, markdown=False)
    assert len(block) == 2
    found = problems(block)
    assert any("sets no CUDA_VISIBLE_DEVICES" in p for p in found), found
    shared = ["CUDA_VISIBLE_DEVICES=7 vllm serve Qwen/Qwen3-30B-A3B-Instruct-2507 --port 8001 &",
              "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 accelerate launch --config_file accelerate_configs/ddp.yaml "
              "train.py recipe=followup_rl_qwen2b"]  # fmt: skip
    assert problems(shared) == ["GPU(s) [7] both serve `vllm serve Qwen/Qwen3-30B-A3B-Instruct-2507` and run "
                                "`accelerate launch --config_file`"]  # fmt: skip


def test_process_counts_recipes_overrides_ports_and_flags_are_checked():
    judge = "CUDA_VISIBLE_DEVICES=7 vllm serve Qwen/Qwen3-30B-A3B-Instruct-2507 --port 8001 &"
    launch = "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 accelerate launch --config_file accelerate_configs/ddp.yaml"
    assert problems([judge, f"{launch} train.py recipe=followup_rl_qwen2b"]) == [
        "8 training processes on 7 visible GPUs [0, 1, 2, 3, 4, 5, 6]"  # ddp.yaml's num_processes
    ]
    missing = problems([judge, f"{launch} --num_processes 7 train.py recipe=followup_rl_qwen3b"])
    assert len(missing) == 1 and "unknown recipe 'followup_rl_qwen3b'" in missing[0]
    bad_key = problems([judge, f"{launch} --num_processes 7 train.py recipe=followup_rl_qwen2b learnign_rate=1"])
    assert len(bad_key) == 1 and "learnign_rate" in bad_key[0]
    other_port = judge.replace("8001", "8002")
    assert sorted(problems([other_port, f"{launch} --num_processes 7 train.py recipe=followup_rl_qwen2b"])) == [
        "eval.judge_base_url points at port 8001, which no server of the block listens on",
        "reward_judge_base_url points at port 8001, which no server of the block listens on",
    ]
    build = "CUDA_VISIBLE_DEVICES=0 fic build-followups --contexts gsm8k --backend vllm --samplez 8 --out x"
    found = problems([judge, build, f"{launch} --num_processes 7 train.py recipe=collab_sft_qwen2b"])
    assert len(found) == 1 and "fic build-followups` does not parse" in found[0] and "--samplez" in found[0]

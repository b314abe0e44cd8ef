"""Two "nodes" on one host: two `accelerate launch` processes with `--num_machines 2 --machine_rank 0|1`, the loopback
address and a free port, one process per node (`accelerate_configs/multinode_cpu.yaml`), one gloo group on the CPU.

* VASD (`fic_llama3b` on `tiny:llama3`) and collab SFT: each rank trains on the rows its rank trains on in a one-node
  two-process run (`cpu.yaml --num_processes 2`), the two ranks' rows are disjoint, the logged losses equal the
  one-node run's within 1e-3 and the final weights within 1e-5 (generation by the content-seeded stand-in of
  tests/multiproc_entry.py, as in tests/test_multiprocess.py, so the runs are comparable loss for loss).
* SIGTERM to the process of node 1 (not the main node) at the end of step 2: both nodes save the one checkpoint
  `checkpoint-2` together and exit 0, and a relaunch with `resume_from_checkpoint=auto` continues from it to the end
  with the losses of a run that was never stopped.

What this exercises: torchrun's multi-node path (`--nnodes 2 --node_rank R`) with a static rendezvous at
main_process_ip:port hosted by node 0, and (collab SFT) the c10d rendezvous the SLURM template uses, over loopback TCP
with gloo. Not exercised: separate machines, NCCL, GPUs, DeepSpeed / FSDP across nodes.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from test_multiprocess import (
    ROOT,
    VASD,
    conversations,
    gsm8k,
    launch,
    launch_command,
    launch_env,
    losses,
    rank_records,
    weights,
)
from test_reliability_eval import finish, start

pytestmark = pytest.mark.slow


def free_port() -> int:
    """A TCP port free on the loopback address now. Node 0's launcher binds it a moment later, and torchrun's
    rendezvous takes no socket handed over bound, so another process can take it in between: `launch_two_nodes`
    then tries again on another port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a node's log says when the rendezvous port was taken between free_port() and the launch: accelerate's check
# on node 0 before it launches, the static rendezvous's TCPStore that cannot bind it, the c10d rendezvous that cannot
# host and connects to whatever holds it.
PORT_TAKEN = ("another process is utilizing it", "EADDRINUSE", "address already in use",
              "The connection to the C10d store has failed")  # fmt: skip


def finish_nodes(procs: list, timeout: float) -> list[tuple[int, str]]:
    """Wait for every node; once one fails (or time runs out), stop the others, which would wait for it until the
    rendezvous times out: SIGTERM first (the launcher is torchrun's agent, which stops its workers on it), SIGKILL 30 s
    later. (exit status, output) per node."""
    deadline, stopping = time.monotonic() + timeout, None
    while any(proc.poll() is None for proc in procs):
        if stopping is None and (any(proc.poll() not in (None, 0) for proc in procs) or time.monotonic() > deadline):
            stopping = time.monotonic()
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
        if stopping is not None and time.monotonic() > stopping + 30:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        time.sleep(0.2)
    return [finish(proc) for proc in procs]


def launch_two_nodes(out: Path, args: list[str], timeout: float = 300, config: str = "multinode_cpu.yaml",
                     attempts: int = 3, **env) -> dict:  # fmt: skip
    """Run train.py args through the test entry as two one-process nodes; the per-rank records. A launch whose
    rendezvous port was taken before node 0 bound it is retried on another port (up to `attempts` launches)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    for attempt in range(1, attempts + 1):
        port = str(free_port())
        procs = []
        for node in (0, 1):
            node_args = ("--num_machines", "2", "--machine_rank", str(node), "--main_process_ip", "127.0.0.1",
                         "--main_process_port", port)  # fmt: skip
            command = launch_command(out, 2, args, config, node_args)
            procs.append(start(command, out / f"node{node}.log", launch_env(**env)))
        results = finish_nodes(procs, timeout)
        taken = any(rc != 0 and any(m in log for m in PORT_TAKEN) for rc, log in results)
        if not taken or attempt == attempts:
            break
        print(f"port {port} was taken before node 0 bound it (launch {attempt} of {attempts}); another port")
    # both logs: once one node fails, finish_nodes kills the other (exit -9), and the first to fail may be either
    assert all(rc == 0 for rc, _ in results), "\n".join(
        f"node {node} exited with {rc}:\n{log[-4000:]}" for node, (rc, log) in enumerate(results)
    )
    print(f"two-node run: {time.time() - started:.1f} s")
    records = rank_records(out, 2)
    assert [records[r]["node"] for r in (0, 1)] == [0, 1], "both ranks ran on one node"
    return records


def assert_two_nodes_train_like_one(tmp_path: Path, args: list[str], steps: int, config: str = "multinode_cpu.yaml",
                                    **env) -> None:  # fmt: skip
    one = launch(tmp_path / "one", 2, args, **env)
    two = launch_two_nodes(tmp_path / "two", args, config=config, **env)
    for rank in (0, 1):
        assert two[rank]["steps"] == one[rank]["steps"], f"rank {rank} trained on other rows on two nodes"
    for step in map(str, range(1, steps + 1)):
        a, b = two[0]["steps"][step], two[1]["steps"][step]
        assert a and b and not set(a) & set(b), f"step {step}: the ranks' rows overlap or one is empty"
    l1, l2 = losses(one[0]), losses(two[0])
    assert [s for s, _ in l1] == [s for s, _ in l2] == list(range(1, steps + 1))
    assert l1[0][1] != l1[-1][1], f"the loss did not move, the run did not train: {l1}"
    worst = max(abs(x - y) for (_, x), (_, y) in zip(l1, l2))
    print(f"losses one node x 2 processes: {l1}\nlosses two nodes x 1 process: {l2}\nmax abs difference: {worst:.3g}")
    assert worst <= 1e-3
    w1, w2 = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert w1.keys() == w2.keys()
    assert max((w1[k].float() - w2[k].float()).abs().max().item() for k in w1) <= 1e-5


def test_vasd_two_nodes_train_like_one_node(tmp_path, shared_data):
    args = [*VASD, f"train_data={gsm8k(shared_data)}", "per_device_train_batch_size=4"]
    assert_two_nodes_train_like_one(tmp_path, args, steps=2, FIC_TEST_STANDIN="1")


COLLAB = ["recipe=collab_sft_tiny", "followup_contexts=[]", "per_device_train_batch_size=2", "report_to=none",
          "logging_steps=1", "eval.enabled=false", "eval.datasets=[]", "seed=0"]  # fmt: skip


def c10d_config(tmp_path: Path) -> str:
    """multinode_cpu.yaml with the c10d rendezvous of the SLURM template (accelerate_configs/multinode_zero3.yaml):
    `same_network: false` makes accelerate pass torchrun a rendezvous endpoint instead of a master address."""
    text = (ROOT / "accelerate_configs" / "multinode_cpu.yaml").read_text()
    path = tmp_path / "multinode_cpu_c10d.yaml"
    path.write_text(text.replace("rdzv_backend: static", "rdzv_backend: c10d").replace("same_network: true",
                                                                                        "same_network: false"))  # fmt: skip
    return str(path)  # absolute: launch_command's join keeps it


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_collab_sft_two_nodes_train_like_one_node(tmp_path, rendezvous):
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    args = [*COLLAB, f"train_datasets=[{data}]", "max_steps=2", "save_strategy=no"]
    config = c10d_config(tmp_path) if rendezvous == "c10d" else "multinode_cpu.yaml"
    assert_two_nodes_train_like_one(tmp_path, args, steps=2, config=config)


def test_sigterm_to_the_second_node_saves_one_checkpoint_that_resumes(tmp_path):
    data = conversations(tmp_path / "data" / "conversations.jsonl")
    args = [*COLLAB, f"train_datasets=[{data}]", "max_steps=4", "save_strategy=no", "ddp_timeout=60"]
    out = tmp_path / "run"
    stopped = launch_two_nodes(out, args, FIC_TEST_SIGTERM="1:2")  # rank 1 = node 1's process
    assert sorted(map(int, stopped[0]["steps"])) == sorted(map(int, stopped[1]["steps"])) == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["max_steps"] == 4
    assert {p.name for p in (out / "checkpoint-2").glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}

    resumed = launch_two_nodes(out, [*args, "resume_from_checkpoint=auto"])
    for rank in (0, 1):  # the step records of the relaunch: only the steps after the checkpoint were trained
        assert sorted(map(int, resumed[rank]["steps"])) == [3, 4]
    assert "resuming from" in (out / "node0.log").read_text()
    whole = launch_two_nodes(tmp_path / "whole", args)  # the same run, never stopped
    (s3, l3), (s4, l4) = losses(resumed[0])
    assert (s3, s4) == (3, 4)
    assert [l3, l4] == pytest.approx([loss for _, loss in losses(whole[0])[2:]], abs=1e-6)

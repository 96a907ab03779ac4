"""A realistic single scheduling epoch, for solver benchmarks.

Pending actions mix code executions in trajectory sandboxes (elastic CPU modes),
reward scorings on GPUs and quota-limited API calls; a share of the fleet is
already busy with running actions and some reward models are already resident.

Sources: code-execution durations are Terminal-Bench verification times
(``test_s``); reward-scoring work is Alibaba GenAI request execution time;
model load times are Alibaba GenAI base-model load latencies; API call time is
a hosted judge's decode time for Azure conversation token counts at an assumed
60 tokens/s plus 0.2 s; CPU node shapes come from the Alibaba CPU-only nodes.
Assumed (no trace gives them): Amdahl parallel fractions U(0.3, 0.95), GPU
types and speeds (H100 1.6, A100 1.0, L40 0.6) and reward-model sizes.
"""

from __future__ import annotations

import numpy as np

from tangram.model.instance import (
    Action,
    ApiQuota,
    CpuNode,
    Elastic,
    Gpu,
    Instance,
    Link,
    Mode,
    Parallelism,
    RewardModel,
    Running,
    Sandbox,
)
from tangram.workload import traces

GPU_TYPES = (("H100", 80.0, 1.6), ("A100", 80.0, 1.0), ("L40", 48.0, 0.6))
REWARD_MODELS = (
    # id, GiB per GPU, parallel degrees (gpus, speedup)
    ("judge-small", 16.0, ((1, 1.0),)),
    ("judge-medium", 40.0, ((1, 1.0), (2, 1.8))),
    ("judge-large", 70.0, ((2, 1.8), (4, 3.2))),
)


def realistic_epoch(actions: int = 200, nodes: int = 50, gpus: int = 32, seed: int = 0,
                    busy_fraction: float = 0.3) -> Instance:
    """Build one epoch: ``actions`` pending over ``nodes`` CPU nodes and ``gpus`` GPUs."""
    rng = np.random.default_rng(seed)
    tb, exec_s, load_s = traces.terminal_bench(), traces.genai_exec_s(), traces.genai_load_s("base_model")
    shapes = [n for n in traces.gpu_nodes() if n["gpus"] == 0]
    cpu_nodes = []
    for k in range(nodes):
        shape = shapes[int(rng.integers(len(shapes)))]
        cpu_nodes.append(CpuNode(id=f"n{k}", cores=int(shape["cores"]), memory_gb=float(shape["memory_gb"]),
                                 machine=f"m{k}"))
    gpu_list, links = [], []
    for k in range(gpus):
        machine = f"gm{k // 8}"
        gtype, mem, speed = GPU_TYPES[(k // 8) % len(GPU_TYPES)]
        gpu_list.append(Gpu(id=f"g{k}", type=gtype, memory_gb=mem, machine=machine, speed=speed))
    for m in sorted({g.machine for g in gpu_list} | {n.machine_id for n in cpu_nodes}):
        links.append(Link(a=m, b="spine", type="ethernet", bandwidth_gbps=100.0, latency_s=5e-5))
    models = [RewardModel(id=mid, memory_gb=mem, load_s=float(rng.choice(load_s)),
                          parallelism=tuple(Parallelism(gpus=g, speedup=s) for g, s in par))
              for mid, mem, par in REWARD_MODELS]
    resident = {}
    for g in gpu_list:
        if rng.random() < 0.5:
            fits = [m.id for m in models if m.memory_gb <= g.memory_gb]
            resident[g.id] = (str(rng.choice(fits)),)
    quotas = [ApiQuota(id="search", concurrency=16, calls_per_window=40, window_s=1.0),
              ApiQuota(id="judge-api", concurrency=8)]

    n_cpu = int(actions * 0.6)
    n_gpu = int(actions * 0.25)
    n_api = actions - n_cpu - n_gpu
    trajectories = max(1, n_cpu // 2)
    sandboxes = [Sandbox(id=f"sb{t}", node=f"n{int(rng.integers(nodes))}", memory_gb=2.0) for t in range(trajectories)]
    tokens = traces.azure_tokens("conv")
    acts: list[Action] = []
    for k in range(n_cpu):
        t = int(rng.integers(trajectories))
        acts.append(Action(id=f"code{k}", kind="cpu", trajectory=f"t{t}", task=f"task{t % 4}", sandbox=f"sb{t}",
                           weight=1.0, elastic=Elastic(base_s=float(rng.choice(tb["test_s"])),
                                                       parallel_fraction=float(rng.uniform(0.3, 0.95)),
                                                       memory_gb=1.0)))
    for k in range(n_gpu):
        t = int(rng.integers(trajectories))
        model = models[int(rng.integers(len(models)))]
        acts.append(Action(id=f"score{k}", kind="gpu", trajectory=f"t{t}", task=f"task{t % 4}", sandbox=f"sb{t}",
                           model=model.id, work_s=float(rng.choice(exec_s)), input_mb=float(rng.uniform(0.1, 50))))
    for k in range(n_api):
        _, gen = tokens[int(rng.integers(len(tokens)))]
        quota = "search" if k % 3 else "judge-api"
        acts.append(Action(id=f"api{k}", kind="api", task=f"task{k % 4}", quota=quota,
                           modes=(Mode(duration_s=0.2 + gen / 60.0),)))
    running = []
    for n in cpu_nodes:
        if rng.random() < busy_fraction:
            running.append(Running(action=f"run-{n.id}", node=n.id, cores=max(1, n.cores // 2),
                                   end_s=float(rng.uniform(1, 20))))
    for g in gpu_list:
        if rng.random() < busy_fraction and g.id in resident:
            running.append(Running(action=f"run-{g.id}", gpus=(g.id,), model=resident[g.id][0],
                                   end_s=float(rng.uniform(1, 30))))
    return Instance(name=f"epoch-{actions}a-{nodes}n-{gpus}g-s{seed}", nodes=tuple(cpu_nodes), gpus=tuple(gpu_list),
                    quotas=tuple(quotas), links=tuple(links), models=tuple(models), resident=resident,
                    sandboxes=tuple(sandboxes), actions=tuple(acts), running=tuple(running))

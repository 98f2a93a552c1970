"""Where a training step's time goes: host time, GPU busy time and kernels launched per step.

    python benchmarks/step_profile.py --out profile.json [--steps 10] -- DRIVER FLAGS

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
import torch

import train_multitask

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def take_steps(run, names: list[str], states: dict) -> None:
    """The steps of ``names`` from the rewound streams (``states``), losses left unread."""
    for name, stream in run.streams.items():
        stream.load_state_dict(states[name])
    for i, name in enumerate(names):
        run.state.step = i + 1
        train_multitask.take_step(run, [name])
    run.log.pending.clear()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run, names: list[str], states: dict) -> dict[str, float]:
    """Host time to issue the steps and wall time until the device is done, per step (ms)."""
    synchronize(run.device)
    start = time.perf_counter()
    take_steps(run, names, states)
    issued = time.perf_counter()
    synchronize(run.device)
    done = time.perf_counter()
    n = len(names)
    return {"host_ms": 1e3 * (issued - start) / n, "step_ms": 1e3 * (done - start) / n}


def busy_ms(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals in µs, as ms."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total / 1e3


def trace_figures(trace: dict, steps: int, wall_ms: float) -> dict:
    """Per-step figures from a Chrome trace of ``steps`` steps that took ``wall_ms``."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    work = [e for e in events if e.get("cat") in GPU_WORK]
    kernels = sum(1 for e in work if e.get("cat") == "kernel")
    launches = sum(
        1
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e.get("name", "")
    )
    cpu_ops = sum(1 for e in events if e.get("cat") == "cpu_op")
    figures = {"cpu_ops_per_step": cpu_ops / steps, "profiled_step_ms": wall_ms / steps}
    if not work:
        return figures | dict.fromkeys(
            ("kernels_per_step", "launches_per_step", "gpu_busy_ms", "gpu_idle_share")
        )
    busy = busy_ms([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in work])
    return figures | {
        "kernels_per_step": kernels / steps,
        "launches_per_step": launches / steps,
        "gpu_busy_ms": busy / steps,
        "gpu_idle_share": max(0.0, 1 - busy / wall_ms),
    }


def profiled(run, names: list[str], states: dict) -> dict:
    """The steps under torch.profiler; the trace's per-step figures."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if run.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(run.device)
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        take_steps(run, names, states)
        synchronize(run.device)
        wall_ms = 1e3 * (time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text(encoding="utf-8"))
    return trace_figures(trace, len(names), wall_ms)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    own, driver = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--steps", type=int, default=10, help="steps timed and profiled")
    p.add_argument("--warmup", type=int, default=2, help="rounds of the same steps before")
    args = p.parse_args(own)
    run = train_multitask.set_up(train_multitask.parse_args(driver))
    run.model.train()
    names = run.sampler.schedule(1, max(run.steps_per_epoch, args.steps))[: args.steps]
    states = {name: stream.state_dict() for name, stream in run.streams.items()}
    started = time.perf_counter()
    for _ in range(args.warmup):
        take_steps(run, names, states)
    synchronize(run.device)
    result = {
        "device": str(run.device),
        "gpu": torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else None,
        "steps": args.steps,
        "tasks": names,
        "warmup_s": round(time.perf_counter() - started, 2),
        **timed(run, names, states),
        **profiled(run, names, states),
    }
    if run.cfg.extras["compiled"].compile:
        from extras.compiled import compilations

        result["compiled_graphs"] = compilations()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

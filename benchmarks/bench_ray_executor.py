"""Per-run scheduling overhead of the Ray executor against the local executor.

Both run batches of short runs (each sleeps ``--work`` seconds) two at a time, in one
process. Each ``map`` call has a fixed start-up cost (the local executor starts its worker
processes, Ray ships the function) and a per-run cost; timing a batch of N and of 2N runs
separates the two: per-run overhead = (wall(2N) - wall(N)) / N - work / 2. Then Ray alone
takes a large batch of runs in flight at once from one driver.

    python benchmarks/bench_ray_executor.py [--runs 200] [--work 0.02] [--concurrent 2000]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class FakeRun:
    run_id: str
    work: float
    params: int = 1_000
    device: str = "cpu"


def sleep_run(spec: FakeRun) -> str:
    time.sleep(spec.work)
    return spec.run_id


def timed_map(executor, runs: list[FakeRun]) -> float:
    start = time.perf_counter()
    done = [result for _, result in executor.map(sleep_run, runs)]
    assert sorted(done) == sorted(r.run_id for r in runs)
    return time.perf_counter() - start


def overhead(executor, runs: list[FakeRun], slots: int) -> tuple[float, float]:
    """(fixed start-up seconds per map call, overhead seconds per run)."""
    half = runs[: len(runs) // 2]
    wall_half, wall_all = timed_map(executor, half), timed_map(executor, runs)
    per_run = (wall_all - wall_half) / (len(runs) - len(half)) - runs[0].work / slots
    fixed = wall_half - len(half) * (runs[0].work / slots + per_run)
    return fixed, per_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--work", type=float, default=0.02)
    parser.add_argument("--concurrent", type=int, default=2000)
    args = parser.parse_args()

    from flops_fit.executors.local import LocalExecutor
    from flops_fit.executors.ray import RayExecutor

    runs = [FakeRun(str(i), args.work) for i in range(args.runs)]
    local_fixed, local_per_run = overhead(LocalExecutor(workers=2, threads=1), runs, 2)
    ray_executor = RayExecutor(num_cpus=2)
    ray_executor.connect()
    list(ray_executor.map(sleep_run, runs[:4]))  # warm-up: Ray's worker processes start
    ray_fixed, ray_per_run = overhead(ray_executor, runs, 2)
    print(f"batches of {len(runs) // 2} and {len(runs)} runs of {args.work * 1000:.0f} ms, 2 at a time")
    print(f"  local executor: {local_fixed:.2f} s start-up per sweep, {local_per_run * 1000:.1f} ms overhead per run")
    print(f"  ray executor:   {ray_fixed:.2f} s start-up per sweep, {ray_per_run * 1000:.1f} ms overhead per run")
    print(f"  ray - local:    {(ray_per_run - local_per_run) * 1000:+.1f} ms per run")

    many = [FakeRun(f"c{i}", 0.0) for i in range(args.concurrent)]
    start = time.perf_counter()
    finished = sum(1 for _ in ray_executor.map(sleep_run, many))
    wall = time.perf_counter() - start
    print(f"  one driver, {finished} runs submitted at once: all results back in {wall:.1f} s "
          f"({wall / finished * 1000:.1f} ms per run)")
    ray_executor.shutdown()


if __name__ == "__main__":
    main()

"""The data budget on real runs: the GPT demo's setup on a deliberately small corpus.

The demo's sweep (``flops_fit.sweeps.demo.DEMOS["gpt"]``) on its 5 smallest budgets, trained on
the Python standard library's ``email`` package alone (29 files, about 370 KB of bytes) instead of
the whole library: the runs' 0.17M-7.2M tokens repeat a ~0.35M-token corpus up to ~20 times.
The sweep records the dataset's unique tokens and each run's epochs; then the runs are fitted
twice: Chinchilla's law by variable projection (blind to repeats) and the data-constrained law
(Muennighoff et al. 2023) with the unique tokens the sweep recorded. Prints both fits' parameters,
R* (the repeats' decay constant) and the forecast at 10x the largest budget, and writes
data_limit.json beside.

    nice -n 10 python benchmarks/bench_data_limit.py [--out bench-data-limit] [--bootstrap 100]

Interrupted? Run it again: the sweep resumes from its store.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sysconfig
import time
from pathlib import Path

import flops_fit
from flops_fit.sweeps.config import parse_config
from flops_fit.sweeps.demo import DEMOS

PACKAGE = "email"


def corpus(out: Path) -> Path:
    """A copy of the standard library's ``email`` package: a small corpus with a fixed identity."""
    folder = out / "corpus"
    if not folder.exists():
        source = Path(sysconfig.get_paths()["stdlib"]) / PACKAGE
        for path in sorted(source.rglob("*.py")):
            target = folder / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-data-limit")
    parser.add_argument("--budgets", type=int, default=5, help="the demo's smallest budgets swept (of 8)")
    parser.add_argument("--bootstrap", type=int, default=100)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(DEMOS["gpt"])
    config["sweep"]["budgets"] = config["sweep"]["budgets"][:args.budgets]
    config["sweep"]["dataset"] = "text-files"
    config["dataset"] = {"paths": [str(corpus(out).resolve())]}
    parsed = parse_config(config, "bench data-limit")
    t0 = time.perf_counter()
    flops_fit.plan(parsed.options).run(out / "sweep", resume=True, executor=parsed.executor,
                                                executor_options=parsed.executor_options, show_progress=False)
    print(f"sweep: {time.perf_counter() - t0:.0f} s -> {out / 'sweep'}", flush=True)
    runs = flops_fit.load_runs(out / "sweep")
    unique = runs.metadata.get("unique_tokens")  # recorded by the sweep (runs trained before flops-fit did: ask)
    unique = unique or flops_fit.create_dataset("text-files", "train", **{**parsed.options.dataset_config,
                                                                         "seq_len": parsed.options.seq_len}).unique_tokens
    print(f"unique tokens: {unique}; epochs of the runs: "
          f"{runs.frame['tokens'].min() / unique:.2f}-{runs.frame['tokens'].max() / unique:.1f}", flush=True)
    report = {"unique_tokens": unique}
    for name, kwargs in (("vpnls", {}), ("data-limited", {"unique_tokens": unique})):
        t0 = time.perf_counter()
        fitted = flops_fit.fit(out / "sweep", "vpnls", bootstrap=args.bootstrap,
                               tracking=False, **kwargs)
        print(f"\n== {name}: {fitted.title} ({time.perf_counter() - t0:.0f} s) ==\n{fitted.summary()}", flush=True)
        report[name] = fitted.to_dict()
    (out / "data_limit.json").write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()

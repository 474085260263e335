"""Compare two recipes on real sweeps of the GPT demo's setup: ``flops_fit.compare``.

Sweeps of the demo (``flops_fit.sweeps.demo.DEMOS["gpt"]``) on its smallest budgets (5:
6e10-2.4e11 FLOPs; the full 8 would triple the CPU time on a shared machine), one per recipe:

- ``seed0`` and ``seed1``: the same recipe, two seeds (initialisation and data order). The
  effective compute multiplier's interval should hold 1.0 ("no measurable difference").
- ``half-lr``: seed 0 at half the demo's tuned learning rate (the tuned law's m halved):
  a real, if small, difference; ``quarter-lr`` at a quarter of it: a larger one.

Prints, for each recipe B against seed0, the multiplier at each swept budget and at 10x the
largest with its interval, and the exponents' differences; writes compare-b<budgets>.json beside.

    nice -n 10 python benchmarks/bench_compare.py [--out bench-compare] [--budgets 5] [--bootstrap 200]
    nice -n 10 python benchmarks/bench_compare.py --budgets 3 --only seed1   # one sweep alone (in parallel)
    nice -n 10 python benchmarks/bench_compare.py --budgets 3 --seed0 bench-compare/seed0  # a wider seed0

Sweeps go to OUT/<recipe>-b<budgets>. Every recipe takes its rates from OUT/law.json: the law
given by ``--law`` (default: the shipped ``demo_hparams/gpt.json``) copied there on the first run,
so a later re-tune of the demo does not change the recipes of sweeps already stored. The
measurements in docs/validation/decisions.md used ``--law benchmarks/results/gpt-law-v1.json``. ``--seed0 FOLDER`` takes recipe A from an existing sweep of
the same setup (its runs at the budgets compared; a sweep of more budgets is cut to them).
Interrupted? Run it again: the sweeps resume from their stores.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import flops_fit
from flops_fit.sweeps.config import parse_config
from flops_fit.sweeps.demo import DEMO_HPARAMS, DEMOS

LR_FACTORS = {"half-lr": 0.5, "quarter-lr": 0.25}  # recipes at a fraction of the tuned law's rates


def pinned_law(out: Path, law: str | None = None) -> Path:
    """OUT/law.json: ``law`` (or the shipped law) when the benchmark first ran in OUT."""
    path = out / "law.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Path(law or DEMO_HPARAMS / "gpt.json").read_text())
    return path


def recipe(name: str, out: Path, budgets: int) -> dict:
    """The demo's configuration on its smallest ``budgets`` budgets, changed as ``name`` says."""
    config = copy.deepcopy(DEMOS["gpt"])
    config["sweep"]["budgets"] = config["sweep"]["budgets"][:budgets]
    config["hparams"] = {"tuned": str(pinned_law(out))}
    if name == "seed1":
        config["sweep"]["seed"] = 1
    if name in LR_FACTORS:
        law = json.loads(pinned_law(out).read_text())
        for m in (law["law"].get("m"), law["law"]["coefficients"].get("m")):  # a tune's /2 file has both
            if m is not None:
                m["value"] *= LR_FACTORS[name]
        path = out / f"{name}-hparams.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(law, indent=1))
        config["hparams"] = {"tuned": str(path)}
    return config


def run(name: str, out: Path, budgets: int) -> Path:
    config = parse_config(recipe(name, out, budgets), f"bench {name}")
    folder = out / f"{name}-b{budgets}"
    t0 = time.perf_counter()
    flops_fit.plan(config.options).run(folder, resume=True, executor=config.executor,
                                       executor_options=config.executor_options, show_progress=False)
    print(f"sweep {name}: {time.perf_counter() - t0:.0f} s -> {folder}", flush=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-compare")
    parser.add_argument("--budgets", type=int, default=5, help="the demo's smallest budgets swept (of 8)")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--method", default="vpnls")
    parser.add_argument("--only", help="sweep this recipe only (seed0, seed1, half-lr or quarter-lr), and compare nothing")
    parser.add_argument("--seed0", help="recipe A from this existing sweep folder of the demo's setup")
    parser.add_argument("--against", default="seed1,half-lr", help="the recipes B compared with seed0")
    parser.add_argument("--skip-train", action="store_true", help="compare the sweeps stored in OUT as they are")
    parser.add_argument("--law", help="the tuned law every recipe starts from (default: the shipped one; kept in "
                        "OUT/law.json from the first run on)")
    args = parser.parse_args()
    out = Path(args.out)
    pinned_law(out, args.law)
    if args.only:
        run(args.only, out, args.budgets)
        return
    swept = DEMOS["gpt"]["sweep"]["budgets"][:args.budgets]
    base = flops_fit.load_runs(args.seed0 if args.seed0 else run("seed0", out, args.budgets))
    base = base.subset(base.frame["budget"].le(max(swept) * 1.0001).to_numpy())
    folders = {name: out / f"{name}-b{args.budgets}" if args.skip_train else run(name, out, args.budgets)
               for name in args.against.split(",")}
    saved = out / f"compare-b{args.budgets}.json"
    report = json.loads(saved.read_text()) if saved.exists() else {}
    for name, folder in folders.items():
        t0 = time.perf_counter()
        result = flops_fit.compare(base, folder, method=args.method, bootstrap=args.bootstrap, names=("seed0", name))
        print(f"\n== {name} over seed0 ({time.perf_counter() - t0:.0f} s) ==\n{result.summary()}", flush=True)
        flops_fit.write_comparison(result, out / f"compare-{name}")
        report[name] = result.to_dict()
    saved.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

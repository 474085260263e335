"""``flops-fit fit`` and ``flops-fit report``: fit runs from a CSV or a sweep folder."""

from __future__ import annotations

import argparse
import html
import math
import re
import shlex
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flops_fit
from flops_fit.errors import NoFitError, OptionError, StoreError
from flops_fit.files import check_writable
from flops_fit.store.run_store import FIT_META, STORE_NAME, RunStore
from flops_fit.sweeps.tuned import TUNE_TITLE

# The fitting package (numpy, pandas) is reached only through flops_fit.fit, so that
# `flops-fit --help` stays light: it checks --method, --curve, --holdout and --metric itself, and a bad
# value is its FitInputError (one line, exit 2).


def _source_options(p: argparse.ArgumentParser, *, method: str, bootstrap: int, holdout: str | None = None) -> None:
    p.add_argument("source", help="a table of runs (CSV, TSV, JSON lines, JSON records, parquet), a sweep output "
                   "folder (runs.sqlite), or a tracker's runs: W&B offline runs or CSV export, an MLflow store or URI, "
                   "TensorBoard logs")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print every method's details, the candidates and the chaining records after the answer")
    p.add_argument("--method", default=method, metavar="METHOD",
                   help="approach: envelope (1), isoflop (2), parametric (3), vpnls (3 by variable projection), "
                   "interaction (3 with an N-D interaction term), curve (every curve point; a sweep folder), "
                   f"all, or a registered method's name; default {method}")
    p.add_argument("--curve", default="slice", metavar="slice|parabola|huber|akima",
                   help="IsoFLOP profile fit (isoflop, held-out check): slice (the curve a Chinchilla law traces at "
                   "fixed compute, unbiased), parabola, huber or akima; default slice")
    p.add_argument("--scale", default="params", metavar="params|non_embedding_params|flops_per_token",
                   help="what N is: total parameters (default), non-embedding parameters, or non-embedding training "
                   "FLOPs per token (DeepSeek's M); --method all --holdout forward also scores every scale")
    p.add_argument("--focus", default="all", metavar="all|frontier",
                   help="which runs the laws over (N, D) fit (parametric, vpnls, interaction): all alike (default, "
                   "Chinchilla's procedure) or frontier (weighted toward each budget's best run, fitted to the floor "
                   "of the runs; see docs/guide/fit.md)")
    p.add_argument("--metric", default="loss", metavar="loss|bpb|error",
                   help="what the laws fit: loss (held-out loss per token, default), bpb (held-out bits per byte, "
                   "comparable across tokenizers) or error (held-out top-1 error of image classifiers)")
    for name in ("params", "tokens", "flops", "budget"):
        p.add_argument(f"--{name}-col", default=name, metavar="COLUMN", help=f"column holding {name} (default {name!r})")
    p.add_argument("--loss-col", metavar="COLUMN", help="column holding the metric (default: 'loss'; 'bpb' with "
                   "--metric bpb, 'top1_error' with --metric error)")
    tracker_options(p)
    p.add_argument("--all-rates", action="store_true", help="keep every run of a (params, tokens) cell trained at "
                   "several learning rates (default: each cell's best; `flops-fit tune --from` fits the rates' law)")
    p.add_argument("--exclude-top", type=int, default=0, metavar="N", help="drop the N highest-loss runs")
    p.add_argument("--bootstrap", type=int, metavar="N", help=f"bootstrap resamples (default {bootstrap}; in a folder "
                   "`flops-fit demo` fitted, the demo's count)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--target", type=float, metavar="C", help="budget to extrapolate the plots to, and the "
                   "forecast's and the report's answer budget (default 10x the largest swept)")
    p.add_argument("--tracking", metavar="B1,B2|off",
                   help="log the fitted parameters and predictions to these tracking backends (tensorboard, "
                   "mlflow, wandb); default: a sweep folder's own [tracking], none for a CSV; off: none")
    p.add_argument("--holdout", metavar="forward|largest|each|auto|none|C",
                   help="also fit every method without some budgets' runs and compare its prediction there with "
                   "that budget's own IsoFLOP minimum: forward fits the budgets up to each one and predicts every "
                   "larger one (with --method all it also chooses the forecast by its error at the largest "
                   "ratios tested); largest, each (in turn) or C leave that budget out; auto is forward where the runs "
                   "allow it, else none, saying why; none checks nothing (runs that are not an IsoFLOP sweep)"
                   + (f"; default {holdout}" if holdout else "") + "; in a folder `flops-fit demo` fitted, with the "
                   "demo's method (all), the demo's (forward)")
    p.set_defaults(default_bootstrap=bootstrap, default_holdout=holdout)
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes for the fits, the held-out refits and, for report, the figures: the same results, "
                   "sooner (default: the cores free now, the cores less the load)")
    p.add_argument("--unique-tokens", type=float, metavar="U",
                   help="the dataset's unique training tokens (default: what a sweep folder recorded, used once runs "
                   "repeat their data): parametric and vpnls then fit the data-constrained law (Muennighoff et al. "
                   "2023), and the forecast and the sizing respect U")
    p.add_argument("--at", nargs="+", metavar="N:D",
                   help="also predict the loss of planned runs of N parameters on D tokens (e.g. 1.4e9:2.8e10), "
                   "with an interval of the bootstrap, comparable law forms and the extrapolation error by distance "
                   "from the fitted runs (laws over (N, D): parametric, vpnls, interaction)")
    p.add_argument("--inference-tokens", type=float, metavar="T",
                   help="also size for serving T tokens: the N and D reaching the compute-optimal model's loss "
                   "with the least training + inference FLOPs (laws over (N, D): parametric, vpnls, interaction)")


def tracker_options(p: argparse.ArgumentParser) -> None:
    """Options for runs read from a tracker (``flops_fit.sources``)."""
    p.add_argument("--curve-metric", metavar="NAME", help="a tracker's series holding each run's training loss, "
                   "its curve (default: train_loss or train/loss where logged)")
    p.add_argument("--experiment", metavar="NAME", help="an MLflow store's experiment to read (default: all)")
    p.add_argument("--where", nargs="+", metavar="COLUMN=VALUE",
                   help="keep only the runs whose COLUMN holds VALUE: one setting of a table that holds several "
                   "(an experiment, a training corpus, an evaluation set)")


def where_of(args: argparse.Namespace, option: str = "where") -> dict[str, str] | None:
    """--where COLUMN=VALUE ... (or another such option) as a mapping, each pair checked before
    anything is read."""
    pairs = getattr(args, option, None)
    if not pairs:
        return None
    flag = "--" + option.replace("_", "-")
    bad = [p for p in pairs if "=" not in p or not p.split("=", 1)[0]]
    if bad:
        raise flops_fit.FitInputError(f"{flag} takes COLUMN=VALUE pairs (e.g. {flag} eval_data=c4_val), got {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("fit", help="fit scaling laws to runs (CSV or sweep folder)")
    _source_options(p, method="parametric", bootstrap=1000)
    p.add_argument("--predict", type=float, nargs="+", metavar="C", help="budgets (FLOPs) to predict at")
    p.add_argument("--total-flops", type=float, nargs="+", metavar="F",
                   help="with --inference-tokens: the lowest loss a total budget F (training + inference) buys")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--plots", metavar="DIR", help="write PNG and SVG plots into DIR")
    p.set_defaults(func=_cmd_fit)

    p = subparsers.add_parser("report", help="write an HTML report (table, plots, diagnostics, provenance)")
    _source_options(p, method="all", bootstrap=500, holdout="auto")
    p.add_argument("--out", metavar="FILE.html", help="report file (default: report.html in the sweep folder; "
                   "beside a table, its name with .report.html: runs.csv -> runs.report.html; refused where that "
                   "file holds another table's report, e.g. runs.jsonl's)")
    p.set_defaults(func=_cmd_report)


def recorded_settings(args: argparse.Namespace) -> None:
    """--bootstrap and --holdout where the user gave none: the demo fits its folder with 200 resamples, and
    `report` (500) on that folder forecast the ViT demo's N_opt as 32.6k where the demo printed 30.5k (a
    candidate's interval reached below 0 at 500 and it was refused). The settings a fit recorded in the
    folder's store (``FIT_META``) are taken, saying so in one line (the holdout only for that fit's method);
    else the command's defaults."""
    settings = _recorded_fit(args.source)
    taken = []
    count = settings.get("bootstrap")
    if args.bootstrap is None and isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        args.bootstrap = count
        taken.append(f"{count} bootstrap resamples")
    if args.holdout is None and isinstance(settings.get("holdout"), str) and settings.get("method") == args.method:
        args.holdout = settings["holdout"]
        taken.append(f"--holdout {args.holdout}")
    if taken:
        print(f"flops-fit: fitting {args.source} as {settings.get('by') or 'its recorded fit'} did: "
              f"{' and '.join(taken)} (give --bootstrap N or --holdout to fit otherwise)", file=sys.stderr)
    args.bootstrap = args.default_bootstrap if args.bootstrap is None else args.bootstrap
    args.holdout = args.default_holdout if args.holdout is None else args.holdout


def _recorded_fit(source: str) -> dict[str, Any]:
    """The fit settings a sweep folder's store recorded (``FIT_META``), or {}: no store, none recorded, or a
    store that cannot be read (the fit itself then says why)."""
    path = Path(source)
    if "://" in source or not (path / STORE_NAME).is_file() and not (path.name == STORE_NAME and path.is_file()):
        return {}
    try:
        with RunStore(path, reading=True) as store:
            settings = store.get_meta(FIT_META)
    except (StoreError, ValueError, sqlite3.Error):
        return {}
    return settings if isinstance(settings, dict) else {}


def _fit(args: argparse.Namespace, progress: Any = None):
    recorded_settings(args)
    return flops_fit.fit(args.source, method=args.method, bootstrap=args.bootstrap, seed=args.seed, level=args.level,
                         curve=args.curve, holdout=args.holdout, metric=args.metric, scale=args.scale,
                         focus=args.focus, target=args.target, params_col=args.params_col,
                         tokens_col=args.tokens_col, flops_col=args.flops_col, loss_col=args.loss_col,
                         budget_col=args.budget_col, exclude_top=args.exclude_top,
                         tracking=False if args.tracking == "off" else args.tracking, workers=args.workers,
                         unique_tokens=args.unique_tokens, curve_metric=args.curve_metric,
                         experiment=args.experiment, all_rates=args.all_rates, where=where_of(args), progress=progress)


def stages(stream: Any) -> Callable[[str], None] | None:
    """A fit's stages, each on its own line with the seconds so far, where ``stream`` is a terminal
    (a report can fit for minutes); None elsewhere (pipes, logs, tests read the answer alone)."""
    if not stream.isatty():
        return None
    start = time.perf_counter()

    def show(stage: str) -> None:  # a stage goes on ("..."); a note about the runs is said once
        ongoing = "" if stage.startswith("note: ") else " ..."
        print(f"flops-fit: [{time.perf_counter() - start:4.0f} s] {stage}{ongoing}", file=stream, flush=True)
    return show


def _cmd_fit(args: argparse.Namespace) -> int:
    tokens = args.inference_tokens
    if args.total_flops and tokens is None:
        raise flops_fit.FitInputError("--total-flops goes with --inference-tokens T (the tokens the model will serve)")
    sizing_scale(args)
    at = _planned(args)
    fitted = _fit(args, stages(sys.stderr))
    planned = fitted.loss_at(*at) if at else None  # before anything is printed: a fit without a law says so alone
    if args.plots:
        flops_fit.plot_fit(fitted, args.plots, target=args.target)
    if args.json:
        budgets = args.predict or (None if isinstance(fitted, flops_fit.FitSet) else with_target(fitted, args.target))
        print(fitted.to_json(budgets, inference_tokens=tokens, totals=args.total_flops, planned=planned))
        return 0
    text = summary(fitted, args.predict, args.verbose, args.target)
    if tokens is not None:  # sized before anything is printed: a fit without a law says so alone
        text += "\n\n" + fitted.sizing_summary(args.predict, tokens, args.total_flops)
    if planned is not None:
        text += "\n\n" + planned.summary()
    print(text)
    if args.plots:
        print(f"plots written to {args.plots}")
    return 0


def sizing_scale(args: argparse.Namespace) -> None:
    """--inference-tokens that is no whole count, or on another --scale, refused before the fit (minutes), as the
    sizing itself refuses it (report found a negative count only when it drew its page)."""
    tokens = args.inference_tokens
    if tokens is not None and not (math.isfinite(tokens) and tokens >= 0 and tokens == math.floor(tokens)):
        raise flops_fit.FitInputError(f"--inference-tokens must be a whole number of tokens >= 0 (e.g. 2e12 for 2 "
                                      f"trillion), got {tokens:g}")
    if args.inference_tokens is not None and args.scale != "params":
        raise flops_fit.FitInputError(f"--inference-tokens sizes a model of N total parameters, and --scale "
                                      f"{args.scale} fits N as something else: fit with --scale params to size for "
                                      "inference")


def _planned(args: argparse.Namespace) -> tuple[list[float], list[float]] | None:
    """--at N:D ... as (sizes, token counts) of finite positive numbers, checked before any fitting."""
    if not args.at:
        return None
    sizes, tokens = [], []
    for spec in args.at:
        parts, why = spec.split(":"), ""
        try:
            n, d = (float(v) for v in parts)
        except ValueError:
            n = d = math.nan
            why = _not_a_pair(parts)
        if not (math.isfinite(n) and math.isfinite(d) and n >= 1 and d >= 1):  # counts: 0.5 parameters is no model
            raise flops_fit.FitInputError(f"--at takes planned runs as N:D, at least one parameter and one token (e.g. "
                                          f"1.4e9:2.8e10), got {spec!r}{why}")
        sizes.append(n)
        tokens.append(d)
    return sizes, tokens


def _not_a_pair(parts: list[str]) -> str:
    """What of an --at value is not two numbers, for its refusal: '1.4B:28B' (as the tables print counts) said
    only that it was not N:D."""
    if len(parts) != 2:
        return f": {len(parts) - 1} colons, where N:D has one"
    for word in parts:
        try:
            float(word)
        except ValueError:
            break
    if re.fullmatch(r"\s*[\d.]+\s*[kKMBT]\s*", word):
        return f": {word!r} is not a number (the tables' suffixes k, M, B, T are not read here: write e.g. 1.4e9)"
    return f": {word!r} is not a number"


def default_report_path(source: str) -> Path:
    """Inside a sweep folder; beside a CSV or a tracker's folder (never inside the tracker's files);
    in the working folder for a tracking URI."""
    if "://" in source:
        return Path("report.html")
    path = Path(source)
    if (path / "runs.sqlite").is_file():
        return path / "report.html"
    return path.parent / f"{path.name}.report.html" if path.is_dir() else path.with_suffix(".report.html")


def refuse_another_sources_report(out: Path, source: str) -> None:
    """The default name drops the table's suffix, so runs.csv and runs.jsonl (or a folder runs) share
    runs.report.html: the second report wrote over the first without a word. Refuse, before the fit,
    a default path that holds the page of a source of another name (its provenance says which), or a tune's
    own page (``flops-fit tune`` writes DIR/report.html, the report's default for that folder)."""
    if "://" in source or not out.is_file():
        return
    try:
        page = out.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # check_writable names an unreadable file
    if f"<title>{TUNE_TITLE}</title>" in page:  # a tune's folder: its page of cells and law, not a fit's
        raise OptionError(f"{out} is the report of the tune in {out.parent} (flops-fit tune): give --out PATH for "
                          f"this fit's report (e.g. --out {out.parent / 'fit-report.html'})")
    found = re.search(r"&quot;source&quot;: &quot;(.*?)&quot;", page)
    if found and Path(written := html.unescape(found.group(1))).name != Path(source).name:
        raise OptionError(f"{out} holds the report of {written}, not of {source}: give --out PATH for this one "
                          f"(e.g. --out {out.parent / (Path(source).name + '.report.html')}), or remove {out}")


def _cmd_report(args: argparse.Namespace) -> int:
    sizing_scale(args)
    at = _planned(args)
    out = Path(args.out) if args.out else default_report_path(args.source)
    if not args.out:
        refuse_another_sources_report(out, args.source)
    check_writable(out, "the report", f"make {out.parent} writable, or give --out PATH in a folder you can write")
    show = stages(sys.stderr)
    try:
        fitted = _fit(args, show)
    except NoFitError as exc:  # a page that says why, not just an error line
        exc.source = args.source
        print(f"report written to {flops_fit.write_report(exc, out, command=_command(args))}")
        raise
    if at is not None:  # refused as fit refuses it (exit 2), not only on the page: isoflop has no loss L(N, D)
        fitted.loss_at(*at)
    if show is not None:
        show(f"drawing the report's figures into {out}")
    target = args.target or flops_fit.fitting.default_target(fitted.runs)  # the page's: its text answers there too
    path = flops_fit.write_report(fitted, out, target=target, at=at, inference_tokens=args.inference_tokens,
                                  workers=args.workers, command=_command(args))
    print(summary(fitted, None, args.verbose, target))
    print(f"report written to {path}")
    return 0


def _command(args: argparse.Namespace) -> str | None:
    """The command line as typed (``main`` keeps its arguments), for the page's provenance."""
    argv = getattr(args, "argv", None)
    return None if argv is None else shlex.join(["flops-fit", *argv])


def summary(fitted, budgets, verbose: bool, target: float | None = None) -> str:
    """The answer first: a set of fits prints the forecast and one row per method unless ``verbose``;
    one method its table at ``budgets`` (by default decades around the runs, and the target asked for)."""
    if isinstance(fitted, flops_fit.FitSet):  # the budgets asked for, else the target asked for
        return fitted.summary(budgets or ([target] if target else None), verbose=verbose)
    return fitted.summary(budgets or with_target(fitted, target))


def with_target(result, target: float | None) -> list[float] | None:
    """A single method's default budgets with ``target`` among them (None: its defaults alone)."""
    return result.table_budgets(target) if target else None

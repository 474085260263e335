"""Everything a GPU must show, in one command that is proven on the CPU first.

    python benchmarks/gpu_suite.py --out benchmarks/results/        # a GPU machine, < 8 minutes
    python benchmarks/gpu_suite.py --device cpu --smoke              # every step at tiny sizes, < 2 minutes

Five steps, each in its own time budget; a step that raises is recorded as failed with the
reason and the next one runs. The JSON (``<out>/gpu-<device>.json``) is rewritten atomically
after every step, so a killed run still leaves what it measured:

1. ``parity``: every registered parity case on the device in fp32 (TF32 off), bf16 and
   fp16 (CUDA only), each case's worst error-to-limit ratio per dtype;
2. ``trainer``: short ``gpt`` and ``vit`` runs through ``flops_fit.train`` on the device
   (fp32; bf16 autocast; bf16 + ``torch.compile``; ``micro_batch_size="auto"`` where the
   trainer reads it), fused AdamW on CUDA, each held against the fp32 CPU loss curve of the
   same spec within ``CURVE_RTOL`` of its precision;
3. ``speed``: one bf16 training step of the ``gpt2`` preset (124M, batch 16 x 1024) against
   Hugging Face ``GPT2LMHeadModel`` and litgpt's ``GPT`` at the same shape, eager and
   compiled, alternated in one process: tokens/s, ratios, and MFU from our exact FLOP count
   over the device's published dense bf16 peak (``PEAK_BF16``);
4. ``packed``: small runs several at a time on one device (worker processes of the local
   executor) against one at a time, at the demo's sizes and at 10M-100M parameters: the
   sweep's throughput ratio, and every run's losses equal either way (bit for bit on the CPU,
   within ``PACKED_RTOL`` on CUDA, whose atomics are not bitwise reproducible);
5. ``stacked``: a tune cell (the demo's middle GPT at four learning rates) trained together in
   one program (``training.stacked``) against one at a time in this process: the speed-up, and
   every run's losses equal either way (within ``PACKED_RTOL`` on CUDA).

``--merge`` keeps the other steps of an earlier JSON for the same device: rerun the steps that
failed after a fix, or run the steps in two commands (the parity tests beside the first).

``failed`` counts the checks that failed (a step that raised counts as one). The script needs
only torch, transformers, timm and this project (litgpt is optional); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import inspect
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from flops_fit.parity.compare import exact_fp32

import flops_fit
from flops_fit.executors.local import LocalExecutor
from flops_fit.files import write_atomically
from flops_fit.plugin import api
from flops_fit.sweeps.demo import demo_plan
from flops_fit.sweeps.gate import run_case
from flops_fit.training import loop as trainer
from flops_fit.training.loop import train
from flops_fit.training.stacked import train_stacked

# Published dense (no sparsity) bf16 tensor-core peaks, FLOP/s; the first name fragment
# found in torch.cuda.get_device_name() wins, so specific names come before families.
PEAK_BF16: list[tuple[str, float]] = [
    ("H200", 989.4e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835.5e12),
    ("H100", 989.4e12),  # SXM (reported as "H100 80GB HBM3")
    ("GH200", 989.4e12),
    ("A100", 312e12),
    ("L40S", 362.05e12),
    ("L4", 121e12),
    ("A10G", 70e12),
]

# Loss-curve tolerance of a device run against the fp32 CPU run of the same spec, relative,
# on every curve point and the held-out loss: fp32 (run with TF32 off, convolutions too) differs
# in summation order only; bf16 rounds activations to 8 bits of mantissa (eps 7.8e-3) and the
# difference compounds over the steps of a short run.
CURVE_RTOL = {"fp32": 1e-3, "bf16": 3e-2}

# Packed (and stacked) against one at a time, relative, on every curve point and the held-out loss. On the CPU
# the runs are bit for bit the same. CUDA kernels with atomic accumulation (SDPA's backward,
# some reductions) are not bitwise reproducible run to run, so there a run must match within
# this; whether the runs were bitwise equal is recorded either way. The first H200 run
# (2026-11-27) met it on the demo's sizes (400 steps) but not at 10M-100M parameters (60 steps at
# a rate of 0.016: up to 3.8e-2), where small differences grow fast. So a group that misses it is
# trained one at a time a second time: the device's own run-to-run spread, and a difference up
# to NOISE_FACTOR times that spread is the device's, not packing's (a wrong device, data order or
# seed moves the loss by as much on every run, and on the CPU the spread is 0).
PACKED_RTOL = {"cpu": 0.0, "cuda": 5e-3}
NOISE_FACTOR = 3.0

# Seconds per step on a GPU (8 minutes in all, with room for start-up); checked between units of work.
BUDGET_S = {"parity": 170.0, "trainer": 90.0, "speed": 150.0, "packed": 130.0, "stacked": 60.0}
STEPS = tuple(BUDGET_S)


def log(message: str) -> None:
    print(f"[gpu_suite {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def peak_bf16(device_name: str) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None (CPU, or a device not in the table)."""
    return next((peak for fragment, peak in PEAK_BF16 if fragment in device_name), None)


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


class NotMergeable(ValueError):
    """``--merge`` found a JSON of another device, torch or mode in ``--out``."""


class OutOfTime(Exception):
    """A step's budget ran out; what it measured so far is kept."""


@dataclasses.dataclass
class Step:
    """What a step function gets: the device, the mode, its deadline, and where checks go."""

    device: str
    smoke: bool
    compile: bool
    deadline: float
    checks: list[dict[str, Any]]
    step: str
    result: dict[str, Any] = dataclasses.field(default_factory=dict)  # filled as the step goes: kept if it stops

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.checks.append({"step": self.step, "name": name, "passed": bool(passed), "detail": detail})
        if not passed:
            log(f"  FAILED {name}: {detail}")
        return passed

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def time_left(self, what: str) -> None:
        if self.out_of_time():
            raise OutOfTime(f"the step's time budget ran out before {what}")


# --- 1. parity ------------------------------------------------------------------------------

def parity_step(s: Step) -> dict[str, Any]:
    dtypes = ("float32", "bfloat16", "float16")
    rows: list[dict[str, Any]] = []
    s.result.update(tf32_off_for_fp32=True, cases=rows)
    names = api.list_parity_cases(qualified=True)
    for name in names:
        entry = api.parity_case_info(name)
        if s.smoke and not entry.quick:
            continue
        for dtype in dtypes:
            row = {"case": name, "model": entry.model, "dtype": dtype}
            if s.device.split(":")[0] not in entry.devices or dtype not in entry.dtypes:
                rows.append({**row, "status": "skipped", "detail": "the case does not declare this device / dtype"})
                continue
            if dtype == "float16" and not s.device.startswith("cuda"):
                rows.append({**row, "status": "skipped", "detail": "fp16 runs on CUDA only"})
                continue
            s.time_left(f"{name} in {dtype}")
            outcome = run_case(entry, s.device, dtype)
            report = outcome.report
            ratio = report.worst_ratio if report is not None else None
            rows.append({**row, "status": outcome.status, "worst_ratio": _finite(ratio), "detail": outcome.detail,
                         "seconds": round(report.seconds, 3) if report is not None else None})
            if outcome.status != "skipped":
                s.check(f"parity {name} {dtype}", outcome.status == "passed", outcome.detail)
    ran = [r for r in rows if r["status"] not in ("skipped",)]
    log(f"  parity: {sum(r['status'] == 'passed' for r in ran)} of {len(ran)} case x dtype passed")
    return {**s.result, "worst_ratio": {d: _finite(max((r["worst_ratio"] for r in ran if r["dtype"] == d
                                            and r.get("worst_ratio") is not None), default=None))
                            for d in dtypes}}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


# --- 2. the trainer's device paths -------------------------------------------------------------

def short_spec(model: str, steps: int, eval_tokens: int, **fields: Any) -> flops_fit.RunSpec:
    """The middle size of the demo's smallest budget, cut to ``steps`` cosine steps."""
    runs = demo_plan(model)[0].runs
    budget = min(r.budget for r in runs)
    group = sorted((r for r in runs if r.budget == budget), key=lambda r: r.size)
    spec = group[len(group) // 2]
    per_sample = spec.seq_len if model == "gpt" else 1
    return dataclasses.replace(
        spec, schedule="cosine", cooldown_start=0, steps=steps, tokens=steps * spec.batch_size * per_sample,
        warmup_steps=max(1, steps // 5), eval_tokens=eval_tokens, curve_points=min(steps, 10), run_id="", **fields,
    )


def curve_error(result, reference) -> float:
    """The largest relative difference over the curve points and the held-out loss."""
    ours = [p[1] for p in result.curve] + [result.loss]
    ref = [p[1] for p in reference.curve] + [reference.loss]
    if len(ours) != len(ref):
        return math.inf
    return max(abs(a - b) / abs(b) for a, b in zip(ours, ref, strict=True))


def trainer_reads_micro_batches() -> bool:
    """Whether this trainer acts on ``RunSpec.micro_batch_size`` (the field exists before the trainer
    uses it: a run with ``"auto"`` that merely ignores it proves nothing)."""
    return "micro_batch_size" in inspect.getsource(trainer)


def trainer_step(s: Step) -> dict[str, Any]:
    steps, eval_tokens = (6, 1024) if s.smoke else (40, 16384)
    variants = {"fp32": {"precision": "fp32"}, "bf16": {"precision": "bf16"},
                "bf16-compiled": {"precision": "bf16", "compile": True},
                "bf16-micro-auto": {"precision": "bf16", "micro_batch_size": "auto"}}
    out = s.result
    out.update(steps=steps, fused_adamw=s.device.startswith("cuda"), curve_rtol=CURVE_RTOL, models={})
    for model in ("gpt", "vit"):
        s.time_left(f"the {model} runs")
        reference = train(short_spec(model, steps, eval_tokens, device="cpu", precision="fp32"))
        rows: dict[str, Any] = {"reference": {"device": "cpu", "precision": "fp32", "loss": reference.loss,
                                              "curve": reference.curve}}
        out["models"][model] = rows
        for name, fields in variants.items():
            skip = None
            if fields.get("compile") and not s.compile:
                skip = "compile turned off (--no-compile)"
            elif "micro_batch_size" in fields and not trainer_reads_micro_batches():
                skip = "this trainer does not read RunSpec.micro_batch_size yet"
            if skip:
                rows[name] = {"status": f"skipped: {skip}"}
                continue
            s.time_left(f"{model} {name}")
            spec = short_spec(model, steps, eval_tokens, device=s.device, **fields)
            try:
                with exact_fp32() if fields["precision"] == "fp32" else contextlib.nullcontext():
                    result = train(spec)
            except Exception as exc:  # noqa: BLE001 - one variant that raises must not cost the others
                reason = f"{type(exc).__name__}: {exc}"
                if "micro_batch_size" in fields and not s.device.startswith("cuda"):
                    rows[name] = {"status": f"skipped: {reason}"}  # "auto" on a CPU may refuse
                else:
                    rows[name] = {"status": "failed", "error": reason}
                    s.check(f"trainer {model} {name}", False, f"raised {reason}")
                continue
            error = curve_error(result, reference)
            tol = CURVE_RTOL[fields["precision"]]
            passed = result.status == "done" and error <= tol
            rows[name] = {"status": "passed" if passed else "failed", "loss": result.loss, "curve": result.curve,
                          "max_rel_diff": _finite(error), "rtol": tol, "train_s": result.timings.get("train_s")}
            s.check(f"trainer {model} {name}", passed,
                    f"status {result.status} {result.error or ''}; max rel diff {error:.2e} vs the fp32 CPU "
                    f"curve (rtol {tol:g})")
        log(f"  trainer {model}: " + ", ".join(f"{k} {v['status']}" for k, v in rows.items() if k != "reference"))
    return out


# --- 3. speed against Hugging Face and litgpt ---------------------------------------------------

def speed_shape(smoke: bool) -> dict[str, Any]:
    if smoke:
        return {"width": 64, "n_layer": 2, "n_head": 2, "vocab_size": 256, "block_size": 64, "batch": 2}
    return {"width": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "block_size": 1024, "batch": 16}


def ours_model(shape: dict[str, Any]) -> torch.nn.Module:
    return flops_fit.create_model("gpt2", shape["width"], n_layer=shape["n_layer"], n_head=shape["n_head"],
                                  vocab_size=shape["vocab_size"], block_size=shape["block_size"])


def padded_vocab_model(shape: dict[str, Any]) -> torch.nn.Module:
    """Ours with the vocabulary padded to a multiple of 64 (50304 for GPT-2's 50257), as nanoGPT
    does for its matmul tiles: a diagnostic of what padding would buy; its MFU counts the real
    vocabulary's FLOPs only."""
    return ours_model({**shape, "vocab_size": math.ceil(shape["vocab_size"] / 64) * 64})


def hf_model(shape: dict[str, Any]) -> torch.nn.Module:
    """Hugging Face's GPT-2 at the shape, on its SDPA attention (the fused kernels ours uses)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        n_embd=shape["width"], n_layer=shape["n_layer"], n_head=shape["n_head"], vocab_size=shape["vocab_size"],
        n_positions=shape["block_size"], attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=None,
        eos_token_id=None, attn_implementation="sdpa"))


def litgpt_model(shape: dict[str, Any]) -> torch.nn.Module:
    """litgpt's GPT at GPT-2's shape: LayerNorm, tanh-GELU MLP of 4 x width, biases everywhere,
    sequential residual; rotary positions instead of learned ones (litgpt has no learned
    positions): the closest litgpt model to GPT-2, the same matmul FLOPs."""
    from litgpt.config import Config
    from litgpt.model import GPT

    config = Config(block_size=shape["block_size"], vocab_size=shape["vocab_size"],
                    padded_vocab_size=shape["vocab_size"], n_layer=shape["n_layer"], n_head=shape["n_head"],
                    n_embd=shape["width"], bias=True, attn_bias=True, norm_class_name="LayerNorm",
                    mlp_class_name="GptNeoxMLP", gelu_approximate="tanh", intermediate_size=4 * shape["width"],
                    parallel_residual=False, rotary_percentage=1.0)
    return GPT(config)


def logits_of(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.logits


def make_stepper(module: torch.nn.Module, device: str, compiled: bool, batch: torch.Tensor) -> Callable[[], None]:
    """One training step as the trainer takes it: bf16 autocast, next-token loss, clipping, AdamW
    (fused on CUDA)."""
    module = module.to(device).train()
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if device.startswith("cuda") else {"foreach": True}))
    forward = torch.compile(module) if compiled else module
    loss_fn = flops_fit.get_loss("next-token")

    def step() -> None:
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            loss = loss_fn(logits_of(forward(batch)), {"tokens": batch})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def speed_step(s: Step) -> dict[str, Any]:
    shape = speed_shape(s.smoke)
    tokens_per_step = shape["batch"] * shape["block_size"]
    flops_per_token = flops_fit.model_info("gpt2").flops_per_unit(
        shape["width"], n_layer=shape["n_layer"], n_head=shape["n_head"], vocab_size=shape["vocab_size"],
        block_size=shape["block_size"])
    peak = peak_bf16(device_name(s.device)) if s.device.startswith("cuda") else None
    builders = {"ours": ours_model, "hf": hf_model, "ours-padded": padded_vocab_model}
    skipped: dict[str, str] = {}
    if importlib.util.find_spec("litgpt") is None:
        skipped["litgpt"] = "litgpt is not installed (pip install litgpt)"
    else:
        builders["litgpt"] = litgpt_model
    s.result.update(shape=shape, skipped=skipped)
    modes = [False, True] if s.compile else [False]
    if not s.compile:
        skipped["compiled"] = "compile turned off (--no-compile)"
    torch.manual_seed(0)
    batch = torch.randint(0, shape["vocab_size"], (shape["batch"], shape["block_size"]), device=s.device)
    steps, repeats = (2, 2) if s.smoke else (10, 3)
    variants: dict[str, Callable[[], None]] = {}
    for name, build in builders.items():
        for compiled in modes:
            key = f"{name}-{'compiled' if compiled else 'eager'}"
            if name == "ours-padded" and not compiled:
                continue  # a diagnostic of the compiled step only
            if s.out_of_time():  # time what is built rather than nothing
                skipped[key] = "the step's time budget ran out before it was built"
                continue
            try:
                torch.manual_seed(0)
                step = make_stepper(build(shape), s.device, compiled, batch)
                for _ in range(2):  # warm-up: compilation, autotuning, allocator
                    step()
                sync(s.device)
                variants[key] = step
            except Exception as exc:  # noqa: BLE001 - a reference that does not build is reported, not fatal
                if name == "ours":
                    raise
                skipped[key] = f"{type(exc).__name__}: {exc}"
                log(f"  speed: {key} skipped: {skipped[key]}")
    times: dict[str, list[float]] = {k: [] for k in variants}
    for repeat in range(repeats):  # alternated, so every variant sees the same drift of the machine
        if repeat and s.out_of_time():
            break
        for key, step in variants.items():
            sync(s.device)
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            sync(s.device)
            times[key].append((time.perf_counter() - t0) / steps)
    rows = {}
    for key, ts in times.items():
        tok_s = tokens_per_step / statistics.median(ts)
        rows[key] = {"tokens_per_s": tok_s, "step_ms": statistics.median(ts) * 1e3,
                     "mfu": tok_s * flops_per_token / peak if peak and key.startswith("ours") else None}
    ratios = {}
    for mode in ("eager", "compiled"):
        ours = rows.get(f"ours-{mode}")
        for ref in ("hf", "litgpt"):
            other = rows.get(f"{ref}-{mode}")
            if ours and other:
                ratios[f"ours/{ref} {mode}"] = ours["tokens_per_s"] / other["tokens_per_s"]
    subject = "ours-compiled" if "ours-compiled" in variants else "ours-eager"
    profile = time_profile(variants[subject], s.device) if not s.out_of_time() else None
    if profile:
        log(f"  speed: {subject} profiled: {profile['busy_ms_per_step']:.1f} ms of kernels a step; top "
            + ", ".join(f"{e['name'][:40]} {e['share']:.0%}" for e in profile["top"][:3]))
    for key, value in ratios.items():
        log(f"  speed: {key} {value:.2f}x")
    for key, row in rows.items():
        log(f"  speed: {key} {row['tokens_per_s']:.0f} tok/s" + (f", MFU {row['mfu']:.1%}" if row["mfu"] else ""))
    return {"shape": shape, "dtype": "bfloat16 autocast", "flops_per_token": flops_per_token, "peak_bf16": peak,
            "steps_per_repeat": steps, "repeats": repeats, "variants": rows, "ratios": ratios, "skipped": skipped,
            "profile": {"variant": subject, **profile} if profile else None}


def time_profile(step: Callable[[], None], device: str, steps: int = 3, top: int = 20) -> dict[str, Any]:
    """Where a step's time goes, for an MFU short of its goal: on CUDA the kernels by their device
    time (and how much of the step the device is busy: the rest is launch and host overhead), on
    a CPU the operators by their own time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    sync(device)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
        sync(device)
    wall = (time.perf_counter() - t0) / steps
    kind, attr = (DeviceType.CUDA, "self_device_time_total") if cuda else (DeviceType.CPU, "self_cpu_time_total")
    events = sorted((e for e in prof.key_averages() if e.device_type == kind and getattr(e, attr) > 0),
                    key=lambda e: getattr(e, attr), reverse=True)
    busy = sum(getattr(e, attr) for e in events) / 1e3 / steps
    return {"steps": steps, "time": attr, "profiled_wall_ms_per_step": wall * 1e3, "busy_ms_per_step": busy,
            "top": [{"name": e.key, "calls_per_step": e.count / steps,
                     "ms_per_step": getattr(e, attr) / 1e3 / steps, "share": getattr(e, attr) / 1e3 / steps / busy}
                    for e in events[:top]]}


# --- 4. small runs packed on one device -----------------------------------------------------------

def packed_groups(smoke: bool, device: str) -> dict[str, list[flops_fit.RunSpec]]:
    """Two groups of short runs, in the precision a sweep uses on the device (bf16 on CUDA): the
    demo's GPT sizes, and GPTs of 10M-100M parameters (smoke: both tiny). On a GPU each size runs
    with two seeds, so the group has enough runs to keep the workers busy past their start-up."""
    precision = "bf16" if device.startswith("cuda") else "fp32"
    seeds = (0,) if smoke else (0, 1)
    # "cuda", not "cuda:N": a packed worker sees only its own GPU (CUDA_VISIBLE_DEVICES), and
    # this process's current device is the chosen one (main() sets it)
    base = short_spec("gpt", 4 if smoke else 400, 1024 if smoke else 8192, device=device.split(":")[0],
                      precision=precision)
    demo = sorted({r.size: r for r in demo_plan("gpt")[0].runs}.values(), key=lambda r: r.size)
    demo = demo[:: max(1, len(demo) // 4)][:4] if smoke else demo
    groups = {"demo": [dataclasses.replace(base, size=r.size, model_config=r.model_config, params=r.params,
                                           flops_per_unit=r.flops_per_unit, seed=seed, run_id="")
                       for r in demo for seed in seeds]}
    steps, widths, n_layer, head_dim, seq = (4, (32, 48), 2, 16, 64) if smoke else (60, (384, 512, 640, 768), 8, 64, 256)
    entry = flops_fit.model_info("gpt")
    mid = []
    for width in widths:
        config = {**base.model_config, "n_layer": n_layer, "n_head": None, "head_dim": head_dim, "block_size": seq}
        mid += [dataclasses.replace(
            base, size=width, model_config=config, params=entry.params(width, **config),
            flops_per_unit=entry.flops_per_unit(width, **config), seq_len=seq, steps=steps,
            tokens=steps * base.batch_size * seq, warmup_steps=max(1, steps // 5), curve_points=min(steps, 10),
            dataset_config={**base.dataset_config, "seq_len": seq}, seed=seed, run_id="") for seed in seeds]
    groups["mid (tiny in smoke)" if smoke else "10M-100M"] = mid
    return groups


def run_all(specs: list[flops_fit.RunSpec], executor: LocalExecutor) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    with executor:
        outcomes = {spec.run_id: outcome for spec, outcome in executor.map(train, specs)}
    return time.perf_counter() - t0, outcomes


def same_results(specs: list[flops_fit.RunSpec], alone: dict[str, Any], other: dict[str, Any], label: str,
                 rtol: float) -> tuple[list[str], bool, float]:
    """Each run's outcome one at a time against the other arm's: the problems found, whether
    every run was bit for bit the same, and the largest relative difference of a curve."""
    problems, bitwise, worst = [], True, 0.0
    for spec in specs:
        a, b = alone.get(spec.run_id), other.get(spec.run_id)
        name = f"width {spec.size} seed {spec.seed} lr {spec.lr:g}"
        for arm, r in (("one at a time", a), (label, b)):
            if not isinstance(r, flops_fit.RunResult) or r.status != "done":
                problems.append(f"{name} {arm}: {getattr(r, 'error', None) or r!r}")
        if isinstance(a, flops_fit.RunResult) and isinstance(b, flops_fit.RunResult):
            bitwise &= a.loss == b.loss and a.curve == b.curve
            error = curve_error(b, a)
            worst = max(worst, error)
            if not error <= rtol:
                problems.append(f"{name}: held-out loss {a.loss!r} one at a time, {b.loss!r} {label}; curves "
                                f"{'equal' if a.curve == b.curve else 'differ'} (max rel diff {error:.2e}, rtol {rtol:g})")
    return problems, bitwise, worst


def judged_against_spread(specs: list[flops_fit.RunSpec], alone: dict[str, Any], other: dict[str, Any], label: str,
                          rtol: float, again: Callable[[], dict[str, Any]]) -> tuple[list[str], bool, float, float | None]:
    """``same_results`` within ``rtol``, or, where that fails, within ``NOISE_FACTOR`` times the
    spread of the same runs one at a time twice (``again`` trains them anew): the problems, bitwise,
    the largest difference, and the spread (None when it was not needed)."""
    problems, bitwise, worst = same_results(specs, alone, other, label, rtol)
    finished = all(isinstance(r, flops_fit.RunResult) and r.status == "done"
                   for arm in (alone, other) for r in (arm.get(spec.run_id) for spec in specs))
    if not problems or not finished:  # a run that failed is a failure whatever the spread
        return problems, bitwise, worst, None
    failed, _, spread = same_results(specs, alone, again(), "again", math.inf)
    if not failed:
        problems, bitwise, worst = same_results(specs, alone, other, label, max(rtol, NOISE_FACTOR * spread))
    log(f"  {label}: one at a time twice differ by up to {spread:.2e}; {label} by {worst:.2e}")
    return problems, bitwise, worst, spread


def serial_executor(device: str) -> LocalExecutor:
    return LocalExecutor(workers=1, threads=1 if not device.startswith("cuda") else None)


def rerun_one_at_a_time(s: Step, group: str, specs: list[flops_fit.RunSpec]) -> dict[str, Any]:
    s.time_left(f"the {group} runs one at a time again")
    return run_all(specs, serial_executor(s.device))[1]


def packed_step(s: Step) -> dict[str, Any]:
    workers = 2 if s.smoke else 4
    out = s.result
    out.update(workers=workers, groups={})
    for group, specs in packed_groups(s.smoke, s.device).items():
        s.time_left(f"the {group} runs")
        params = [spec.params for spec in specs]
        one_at_a_time = serial_executor(s.device)
        packed = (LocalExecutor(devices=[f"cuda:{torch.cuda.current_device()}"] * workers)
                  if s.device.startswith("cuda") else LocalExecutor(workers=workers, threads=1))
        serial_s, serial = run_all(specs, one_at_a_time)
        s.time_left(f"the packed {group} runs")
        packed_s, together = run_all(specs, packed)
        rtol = PACKED_RTOL["cuda" if s.device.startswith("cuda") else "cpu"]
        again = functools.partial(rerun_one_at_a_time, s, group, specs)
        problems, bitwise, worst, spread = judged_against_spread(specs, serial, together, "packed", rtol, again)
        tokens = sum(spec.tokens for spec in specs)
        ratio = serial_s / packed_s
        out["groups"][group] = {"runs": len(specs), "params": [min(params), max(params)], "steps": specs[0].steps,
                                "one_at_a_time_s": serial_s, "packed_s": packed_s, "throughput_ratio": ratio,
                                "tokens_per_s": {"one_at_a_time": tokens / serial_s, "packed": tokens / packed_s},
                                "identical": bitwise and not problems, "max_rel_diff": _finite(worst),
                                "rtol": rtol, "spread_one_at_a_time": _finite(spread), "problems": problems}
        log(f"  packed {group}: {len(specs)} runs, {serial_s:.1f}s one at a time, {packed_s:.1f}s packed "
            f"({workers} workers): {ratio:.2f}x")
        s.check(f"packed {group} same results", not problems, "; ".join(problems))
    return out


# --- 5. same-shape runs trained together ------------------------------------------------------------

def stacked_specs(smoke: bool, device: str) -> list[flops_fit.RunSpec]:
    """A tune cell: the demo's middle GPT at four learning rates from one seed (one data order,
    read once for all four), in the precision a sweep uses on the device."""
    precision = "bf16" if device.startswith("cuda") else "fp32"
    base = short_spec("gpt", 4 if smoke else 300, 1024 if smoke else 8192, device=device, precision=precision)
    return [dataclasses.replace(base, lr=base.lr * m, run_id="") for m in (0.5, 1.0, 2.0, 4.0)]


def stacked_step(s: Step) -> dict[str, Any]:
    specs = stacked_specs(s.smoke, s.device)
    out = s.result
    out.update(runs=len(specs), steps=specs[0].steps, params=specs[0].params, precision=specs[0].precision,
               lanes=max(1, min(len(specs), torch.get_num_threads())))
    train(short_spec("gpt", 2, 256, device=s.device, precision=specs[0].precision))  # warm: context, kernels
    s.time_left("the runs one at a time")

    def one_at_a_time() -> dict[str, Any]:
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, threads // out["lanes"]))  # a lane's kernel threads: bit for bit on a CPU
        try:
            return {spec.run_id: train(spec) for spec in specs}
        finally:
            torch.set_num_threads(threads)

    t0 = time.perf_counter()
    alone = one_at_a_time()
    alone_s = time.perf_counter() - t0
    s.time_left("the runs together")
    t0 = time.perf_counter()
    together = {r.run_id: r for r in train_stacked(specs)}
    together_s = time.perf_counter() - t0
    rtol = PACKED_RTOL["cuda" if s.device.startswith("cuda") else "cpu"]

    def again() -> dict[str, Any]:
        s.time_left("the runs one at a time again")
        return one_at_a_time()

    problems, bitwise, worst, spread = judged_against_spread(specs, alone, together, "together", rtol, again)
    out.update(one_at_a_time_s=alone_s, together_s=together_s, speedup=alone_s / together_s,
               identical=bitwise and not problems, max_rel_diff=_finite(worst), rtol=rtol,
               spread_one_at_a_time=_finite(spread), problems=problems)
    log(f"  stacked: {len(specs)} runs of {specs[0].steps} steps, {alone_s:.1f}s one at a time, "
        f"{together_s:.1f}s together ({out['lanes']} lanes): {alone_s / together_s:.2f}x")
    s.check("stacked same results", not problems, "; ".join(problems))
    return out


# --- driver ---------------------------------------------------------------------------------------

STEP_FUNCTIONS: dict[str, Callable[[Step], dict[str, Any]]] = {
    "parity": parity_step, "trainer": trainer_step, "speed": speed_step, "packed": packed_step,
    "stacked": stacked_step,
}


def environment(device: str, smoke: bool) -> dict[str, Any]:
    return {
        "device": device_name(device), "device_type": device.split(":")[0], "smoke": smoke,
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "flops_fit": flops_fit.__version__,
        "transformers": _version("transformers"), "timm": _version("timm"), "litgpt": _version("litgpt"),
    }


def _version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_suite(device: str, smoke: bool, out: Path, only: list[str], compile: bool, budget_scale: float,
              merge: bool = False) -> dict:
    record: dict[str, Any] = {**environment(device, smoke), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
                              "steps": {}, "checks": [], "failed": 0}
    path = out / f"gpu-{slug(record['device'])}.json"
    out.mkdir(parents=True, exist_ok=True)
    earlier = earlier_record(path, record) if merge else None
    log(f"{record['device']} (torch {record['torch']}, CUDA {record['cuda']}), smoke={smoke}: writing {path}"
        + (f", keeping its steps but {', '.join(only)}" if earlier else ""))
    for name in STEPS:
        if name not in only:
            if earlier and name in earlier["steps"]:
                record["steps"][name] = earlier["steps"][name]
                record["checks"] += [c for c in earlier["checks"] if c["step"] == name]
                record["failed"] = sum(not c["passed"] for c in record["checks"])
                continue
            record["steps"][name] = {"status": "skipped: not in --only"}
            continue
        log(f"step {name} (budget {BUDGET_S[name] * budget_scale:.0f}s)")
        t0 = time.perf_counter()
        step = Step(device, smoke, compile, time.monotonic() + BUDGET_S[name] * budget_scale, record["checks"], name)
        try:
            result = {"status": "done", **STEP_FUNCTIONS[name](step)}
        except OutOfTime as exc:
            result = {"status": "out of time", **step.result, "error": str(exc)}
            step.check(f"{name} finished in its budget", False, str(exc))
        except Exception as exc:  # noqa: BLE001 - one broken step must not cost the others
            result = {"status": "error", **step.result, "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc(limit=8)}
            step.check(f"{name} ran", False, result["error"])
        result["seconds"] = round(time.perf_counter() - t0, 2)
        result["started"] = record["started"]  # which run measured it, once steps are merged (--merge)
        record["steps"][name] = result
        record["failed"] = sum(not c["passed"] for c in record["checks"])
        write_json(path, record)
        log(f"step {name}: {result['status']} in {result['seconds']:.1f}s")
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["summary"] = summary(record["steps"])
    write_json(path, record)
    log(f"summary: {json.dumps(_nan_to_null(record['summary']), default=str)}")
    log(f"{record['failed']} failed check(s) of {len(record['checks'])}; wrote {path}")
    return record


def earlier_record(path: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON already at ``path`` when it is this device's and this mode's (``--merge``), else None."""
    if not path.exists():
        return None
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NotMergeable(f"--merge: {path} is not a readable suite JSON ({exc}); give another --out") from None
    same = {k: earlier.get(k) for k in ("device", "smoke", "torch")} == {k: record[k] for k in ("device", "smoke", "torch")}
    if not same:
        raise NotMergeable(f"--merge: {path} holds a run of {earlier.get('device')} (torch {earlier.get('torch')}, "
                           f"smoke={earlier.get('smoke')}), not this one; give another --out")
    return earlier


def summary(steps: dict[str, Any]) -> dict[str, Any]:
    """The headline figures, the issue's goals beside them: parity's worst ratio per dtype (< 1),
    MFU of the compiled step (>= 0.5), ours / references (>= 1), packed throughput (>= 3x), runs
    trained together against one at a time."""
    speed = steps.get("speed", {})
    return {
        "parity_worst_ratio": steps.get("parity", {}).get("worst_ratio"),
        "mfu": {k: v["mfu"] for k, v in speed.get("variants", {}).items() if v.get("mfu") is not None},
        "speed_ratios": speed.get("ratios"),
        "packed_ratios": {k: g["throughput_ratio"] for k, g in steps.get("packed", {}).get("groups", {}).items()},
        "stacked_speedup": steps.get("stacked", {}).get("speedup"),
    }


def write_json(path: Path, record: dict[str, Any]) -> None:
    text = json.dumps(record, indent=1, default=str, allow_nan=False) if _all_finite(record) else \
        json.dumps(_nan_to_null(record), indent=1, default=str)
    write_atomically(path, lambda tmp: tmp.write_text(text + "\n"))


def _all_finite(value: Any) -> bool:
    try:
        json.dumps(value, default=str, allow_nan=False)
    except ValueError:
        return False
    return True


def _nan_to_null(value: Any) -> Any:
    """JSON has no NaN: a NaN or infinite number is written as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nan_to_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_null(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/", help="folder for gpu-<device>.json")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--smoke", action="store_true", help="every step at tiny sizes (a CPU check of the script)")
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps (default {','.join(STEPS)})")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    parser.add_argument("--merge", action="store_true",
                        help="keep the steps not in --only from the JSON already in --out (the same device)")
    parser.add_argument("--budget-scale", type=float, default=None,
                        help="multiply every step's time budget (default 1 on a GPU, 3 on a CPU: compiling is slow there)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(STEPS))
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        parser.error(f"--device {args.device!r}: use cuda, cuda:N or cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here; use --device cpu --smoke")
    if args.device.startswith("cuda:"):
        torch.cuda.set_device(torch.device(args.device))
    if args.device.startswith("cpu"):
        torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
        # a pool of compile workers costs a small CPU more than it saves (read at the first compile)
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    scale = args.budget_scale if args.budget_scale is not None else (3.0 if args.device.startswith("cpu") else 1.0)
    if not scale > 0:
        parser.error(f"--budget-scale {scale}: give a positive number")
    try:
        run_suite(args.device, args.smoke, Path(args.out), only, not args.no_compile, scale, args.merge)
    except NotMergeable as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

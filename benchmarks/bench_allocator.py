"""glibc's allocator told to keep freed memory (tried at stop 52, not shipped), measured on a bare step.

glibc maps a large block (over 128 KiB, then over the largest freed so far) straight from the
kernel and returns it on free, and gives back its heap's free top: a bare loop of a demo GPT's
CPU training steps (2 layers, 2 heads, batch 32 x 64 bytes, AdamW, clipping) page-faults its
activations in again every step. ``KEEP`` (``mallopt``: blocks up to 32 MiB from the heap, up
to 512 MiB of it kept free) stops that. Each width is stepped with the setting and without it;
the setting is process-wide, so each arm runs in a process of its own, the arms alternate (the
order swapped each round) and the best of ``--repeats`` is kept. Beside the time: page faults
per step and the loss curve, the same to the bit (the setting moves memory, not arithmetic).

Why not shipped: ``flops-fit demo`` faults 120-175 times a training step, far fewer than this bare
loop, and ran in the same CPU time with the setting as without it (docs/validation/speed.md, stop 52).

    python benchmarks/bench_allocator.py [--widths 6,10,16,26,40,58] [--steps 100] [--repeats 3]
        [--out benchmarks/results/allocator.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import subprocess
import sys
import time

DEMO_MODEL = {"n_layer": 2, "n_head": 2, "gelu": "exact"}
BATCH, SEQ, VOCAB, WARMUP = 32, 64, 256, 20
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters
KEEP = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 512 << 20), (M_TOP_PAD, 64 << 20))


def child(width: int, keep: bool, steps: int) -> dict:
    """Time ``steps`` training steps of one width in this process (with the setting if ``keep``)."""
    kept = all(ctypes.CDLL(None).mallopt(option, value) == 1 for option, value in KEEP) if keep else False
    import torch

    import flops_fit

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = flops_fit.create_model("gpt", width, block_size=SEQ, vocab_size=VOCAB, **DEMO_MODEL)
    loss_fn = flops_fit.get_loss("next-token")
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen) for _ in range(8)]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3, foreach=True)
    losses = []

    def step(i: int) -> None:
        tokens = batches[i % len(batches)]
        loss = loss_fn(model(tokens), {"tokens": tokens})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())

    for i in range(WARMUP):
        step(i)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for i in range(WARMUP, WARMUP + steps):
        step(i)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {"kept": kept, "ms_per_step": 1e3 * seconds / steps,
            "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps, "losses": losses}


def arm(width: int, keep: bool, steps: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(width), "--keep", str(int(keep)),
                          "--steps", str(steps)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="6,10,16,26,40,58")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, bool(args.keep), args.steps)))
        return

    rows = []
    for width in [int(w) for w in args.widths.split(",")]:
        best: dict[bool, dict] = {}
        for r in range(args.repeats):
            for keep in ((False, True) if r % 2 == 0 else (True, False)):
                got = arm(width, keep, args.steps)
                if keep not in best or got["ms_per_step"] < best[keep]["ms_per_step"]:
                    best[keep] = got
        off, on = best[False], best[True]
        row = {"width": width, "ms_per_step_default": round(off["ms_per_step"], 2),
               "ms_per_step_kept": round(on["ms_per_step"], 2),
               "speedup": round(off["ms_per_step"] / on["ms_per_step"], 3),
               "faults_per_step_default": round(off["faults_per_step"], 1),
               "faults_per_step_kept": round(on["faults_per_step"], 1),
               "setting_applied": on["kept"], "same_losses": off["losses"] == on["losses"]}
        rows.append(row)
        print(f"width {width:3d}: {row['ms_per_step_default']:6.2f} ms -> {row['ms_per_step_kept']:6.2f} ms a step "
              f"(x{row['speedup']:.2f}); page faults {row['faults_per_step_default']:.0f} -> "
              f"{row['faults_per_step_kept']:.0f} a step; losses identical: {row['same_losses']}", flush=True)
    if args.out:
        result = {"command": "python benchmarks/bench_allocator.py " + " ".join(sys.argv[1:]),
                  "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "torch": __import__("torch").__version__, "load_1min": os.getloadavg()[0]},
                  "steps": args.steps, "repeats": args.repeats, "rows": rows}
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
            handle.write("\n")


if __name__ == "__main__":
    main()

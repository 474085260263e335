"""Does the plan's memory estimate match what training takes? Peak RSS on CPU, three sizes.

Each size trains two optimizer steps (fp32, AdamW, the run's micro-batch) in a fresh process;
the measured memory is its peak resident set (``ru_maxrss``) less the resident set just
before the model was built (torch imported, the batch made), so imports do not count. The
estimate is ``sweeps.memory.run_memory`` of the same run: weights, gradients, AdamW state,
activations of one micro-batch, +10% and the runtime's own.

    python benchmarks/bench_memory.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, torch
import flops_fit
name, width, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
tokens = torch.randint(0, 256, (batch, seq))
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
base = rss()
model = flops_fit.create_model(name, width, block_size=seq)
loss_fn = flops_fit.get_loss("next-token")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
for _ in range(2):
    loss_fn(model(tokens), {"tokens": tokens}).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(json.dumps({"measured": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt")
    parser.add_argument("--widths", default="256,512,1024")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    args = parser.parse_args()

    import flops_fit
    from flops_fit.sweeps.memory import gib, run_memory

    print(f"{'width':>6} {'params':>12} {'estimate':>12} {'measured':>12} {'ratio':>6}")
    for width in map(int, args.widths.split(",")):
        plan = flops_fit.plan(model=args.model, budgets=[1e16], sizes=[width // 4, width // 2, width],
                              batch_size=args.batch, seq_len=args.seq, min_steps=1, device="cpu",
                              model_config={"block_size": args.seq})
        spec = next(r for r in plan.runs if r.size == width)
        estimate = run_memory(spec, flops_fit.model_info(args.model)).total
        out = subprocess.run([sys.executable, "-c", CHILD, args.model, str(width), str(args.batch), str(args.seq)],
                             capture_output=True, text=True, check=True)
        measured = json.loads(out.stdout.strip().splitlines()[-1])["measured"]
        print(f"{width:>6} {spec.params:>12,} {gib(estimate):>12} {gib(measured):>12} {estimate / measured:>6.2f}",
              flush=True)


if __name__ == "__main__":
    main()

"""Per-step cost of the demo's tiny GPTs on the CPU: where the time goes, and what helps.

Ratios of training-step time, measured side by side in one process (A/B alternated so
both share the machine's noise); >= 1.0 means the second variant is at least as fast:

1. attention: SDPA's CPU flash kernel (what the model runs) against two batched matmuls
   and a softmax, swapped into the same model. On contiguous tensors the matmuls win by
   1.1-1.3x for heads of 4-32 features, but inside the model, where q, k and v are
   strided views of one projection, the copies eat the gain; so the model keeps SDPA;
2. the demo's model: 2 heads with exact GELU (the demo now) against ``head_dim`` 4 with
   tanh GELU (the demo before), both on today's code;
3. a profile of one width: the share of each operator in a step.

    python benchmarks/bench_step.py [--widths 8,16,32,64] [--repeats 5] [--profile 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from flops_fit.plugins.models.attention import MultiheadAttention

import flops_fit

OLD = {"n_layer": 2, "head_dim": 4, "gelu": "tanh"}
NEW = {"n_layer": 2, "n_head": 2, "gelu": "exact"}
BATCH, SEQ = 32, 64


def stepper(width: int, config: dict):
    torch.manual_seed(0)
    model = flops_fit.create_model("gpt", width, block_size=SEQ, vocab_size=256, **config)
    loss_fn = flops_fit.get_loss("next-token")
    tokens = torch.randint(0, 256, (BATCH, SEQ))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)

    def step() -> None:
        loss_fn(model(tokens), {"tokens": tokens}).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def matmul_attention(self, q, k, v, mask, causal):
    """softmax(q k^T * scale, causal) v with batched matmuls (no mask, no dropout, MHA)."""
    batch, heads, q_len, dim = q.shape
    q3, k3, v3 = (t.reshape(batch * heads, -1, dim) for t in (q, k, v))
    bias = torch.full((q_len, q_len), float("-inf")).triu(1) if causal else torch.zeros(q_len, q_len)
    scores = torch.baddbmm(bias.expand(batch * heads, q_len, q_len), q3, k3.transpose(1, 2), alpha=self.scale)
    return torch.bmm(torch.softmax(scores, dim=-1), v3).view(batch, heads, q_len, dim)


def timed(step, steps: int, matmuls: bool = False) -> float:
    saved = MultiheadAttention._sdpa
    if matmuls:
        MultiheadAttention._sdpa = matmul_attention
    try:
        step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t0) / steps
    finally:
        MultiheadAttention._sdpa = saved


def ab(a, b, repeats: int, steps: int) -> tuple[float, float, float]:
    """Median time of a and b per step, and the median ratio a / b over alternated repeats."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(a(steps))
        tb.append(b(steps))
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in zip(ta, tb, strict=True))


def profile(width: int) -> None:
    from torch.profiler import ProfilerActivity, profile

    step = stepper(width, NEW)
    timed(step, 3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="8,16,32,64")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="also profile a step of this width")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for width in (int(w) for w in args.widths.split(",")):
        new, old = stepper(width, NEW), stepper(width, OLD)
        kernel, small, attn = ab(lambda n, s=new: timed(s, n), lambda n, s=new: timed(s, n, True),
                                 args.repeats, args.steps)
        before, now, model = ab(lambda n, s=old: timed(s, n), lambda n, s=new: timed(s, n), args.repeats, args.steps)
        print(f"width {width:3d}: matmul attention {attn:.2f}x (SDPA {kernel * 1e3:.1f} -> {small * 1e3:.1f} ms/step); "
              f"demo model {model:.2f}x (head_dim 4 + tanh GELU {before * 1e3:.1f} ms -> 2 heads + exact GELU "
              f"{now * 1e3:.1f} ms/step)", flush=True)
    if args.profile:
        profile(args.profile)


if __name__ == "__main__":
    main()

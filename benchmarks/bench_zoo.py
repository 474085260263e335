"""Speed of the built-in zoo against its references, side by side in one process.

    python benchmarks/bench_zoo.py [attention|vit|gpt|swin|cait|pvt_v2|all] [--repeats N]

Prints, per case, the median time of ours and of the reference and the ratio
reference_time / our_time (>= 1.0: ours is at least as fast). Runs fp32 on CPU (TF32 off)
and bf16 on CUDA when a GPU is present. Ours and the reference alternate step by step, so
background load hits both alike. On CPU the clock is the process's CPU time and torch uses
``--threads`` threads (default 1), so that other jobs on a shared machine inflate neither
side; on CUDA it is wall time after synchronising. Needs the parity extra (timm,
transformers).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.cait_model import build as build_cait
from flops_fit.plugins.models.gpt_model import build as build_gpt
from flops_fit.plugins.models.pvt_v2_model import build as build_pvt_v2
from flops_fit.plugins.models.swin_model import build as build_swin
from flops_fit.plugins.models.vit_model import build as build_vit


def setup(dtype_name: str) -> tuple[torch.device, torch.dtype]:
    """CUDA when present; ``auto`` dtype is bf16 there and fp32 on CPU. TF32 off for fp32."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dtype_name == "auto":
        dtype_name = "bfloat16" if device.type == "cuda" else "float32"
    dtype = getattr(torch, dtype_name)
    if dtype == torch.float32:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return device, dtype


def _clock(device: torch.device) -> Callable[[], float]:
    if device.type == "cuda":
        def wall() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return wall
    return time.process_time


def compare(name: str, ours: Callable[[], object], ref: Callable[[], object], device, repeats: int, warmup: int = 5) -> float:
    """Median seconds of each callable, alternating; prints and returns the ratio ref/ours."""
    for _ in range(warmup):
        ours(), ref()
    clock = _clock(device)
    times: dict[str, list[float]] = {"ours": [], "ref": []}
    for _ in range(repeats):
        for key, fn in (("ours", ours), ("ref", ref)):
            start = clock()
            fn()
            times[key].append(clock() - start)
    mine, theirs = statistics.median(times["ours"]), statistics.median(times["ref"])
    ratio = theirs / mine
    print(f"{name:<58} ours {mine * 1e3:8.2f} ms   reference {theirs * 1e3:8.2f} ms   ratio {ratio:5.2f}")
    return ratio


def training_step(model, inputs, loss_fn) -> Callable[[], None]:
    """One optimiser step (forward, loss, backward, AdamW) on fixed inputs."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(inputs)).backward()
        opt.step()

    return step


def bench_attention(device, dtype, repeats: int) -> list[float]:
    from timm.models.vision_transformer import Attention

    batch, seq, width, heads = 16, 65, 192, 6
    x = torch.randn(batch, seq, width, device=device, dtype=dtype, requires_grad=True)
    ours = MultiheadAttention(width, heads).to(device, dtype)
    torch_mha = torch.nn.MultiheadAttention(width, heads, batch_first=True).to(device, dtype)
    timm_attn = Attention(width, num_heads=heads, qkv_bias=True).to(device, dtype)

    def fwd_bwd(fn):
        return lambda: fn().float().square().mean().backward()

    ratios = []
    for mode, grad in (("forward", torch.no_grad), ("forward+backward", torch.enable_grad)):
        wrap = (lambda f: f) if mode == "forward" else fwd_bwd
        with grad():
            ratios.append(compare(f"attention {mode} vs nn.MultiheadAttention",
                                  wrap(lambda: ours(x)), wrap(lambda: torch_mha(x, x, x, need_weights=False)[0]),
                                  device, repeats))
            ratios.append(compare(f"attention {mode} vs timm Attention",
                                  wrap(lambda: ours(x)), wrap(lambda: timm_attn(x)), device, repeats))
    return ratios


def bench_vit(device, dtype, repeats: int) -> list[float]:
    from timm.models.vision_transformer import VisionTransformer

    width, depth, heads, batch = 192, 6, 6, 32
    torch.manual_seed(0)
    ours = build_vit(width, depth=depth, num_heads=heads).to(device, dtype)
    ref = VisionTransformer(img_size=32, patch_size=4, num_classes=10, embed_dim=width, depth=depth,
                            num_heads=heads, qkv_bias=True).to(device, dtype)
    images = torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)
    labels = torch.randint(0, 10, (batch,), device=device)

    def loss(logits):
        return F.cross_entropy(logits.float(), labels)

    return [compare(f"ViT training step (w{width} d{depth} b{batch} 32px) vs timm",
                    training_step(ours, images, loss), training_step(ref, images, loss), device, repeats)]


def bench_gpt(device, dtype, repeats: int) -> list[float]:
    from transformers import GPT2Config, GPT2LMHeadModel

    width, layers, heads, vocab, block, batch = 128, 4, 8, 256, 128, 16
    torch.manual_seed(0)
    ours = build_gpt(width, n_layer=layers, n_head=heads, vocab_size=vocab, block_size=block).to(device, dtype)
    ref = GPT2LMHeadModel(GPT2Config(n_embd=width, n_layer=layers, n_head=heads, vocab_size=vocab, n_positions=block,
                                     bos_token_id=0, eos_token_id=0)).to(device, dtype)
    tokens = torch.randint(0, vocab, (batch, block), device=device)

    def loss(logits):
        logits = getattr(logits, "logits", logits)
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))

    return [compare(f"GPT training step (w{width} L{layers} b{batch} T{block}) vs HF GPT-2",
                    training_step(ours, tokens, loss), training_step(ref, tokens, loss), device, repeats)]


def _image_step_pair(name, ours, ref, device, dtype, repeats: int) -> list[float]:
    """One training step of two image classifiers on the same 32 px batch."""
    batch = 32
    images = torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)
    labels = torch.randint(0, 10, (batch,), device=device)

    def loss(logits):
        return F.cross_entropy(logits.float(), labels)

    return [compare(name, training_step(ours.to(device, dtype), images, loss),
                    training_step(ref.to(device, dtype), images, loss), device, repeats)]


def bench_cait(device, dtype, repeats: int) -> list[float]:
    import timm

    torch.manual_seed(0)
    ours = build_cait(192, depth=6, num_heads=6)
    ref = timm.create_model("cait_xxs24_224", pretrained=False, img_size=32, patch_size=4, num_classes=10,
                            embed_dim=192, depth=6, num_heads=6, init_values=1e-4)
    return _image_step_pair("CaiT training step (w192 d6+2 b32 32px) vs timm", ours, ref, device, dtype, repeats)


def bench_pvt_v2(device, dtype, repeats: int) -> list[float]:
    import timm

    torch.manual_seed(0)
    ours = build_pvt_v2(32, num_heads=(1, 2, 5, 8))
    ref = timm.create_model("pvt_v2_b0", pretrained=False, num_classes=10, sr_ratios=(4, 2, 1, 1))
    return _image_step_pair("PVT v2 training step (b0 widths, sr 4,2,1,1, b32 32px) vs timm", ours, ref, device, dtype,
                            repeats)


BENCHES = {"attention": bench_attention, "vit": bench_vit, "gpt": bench_gpt, "cait": bench_cait,
           "pvt_v2": bench_pvt_v2}


def bench_swin(device, dtype, repeats: int) -> list[float]:
    """The default ``swin`` (3 stages, 32 px, patch 2, shifted 4x4 windows) against timm's
    SwinTransformer of the same shape."""
    from timm.models.swin_transformer import SwinTransformer

    width, depths, heads, batch = 64, (2, 2, 2), (2, 4, 8), 32
    torch.manual_seed(0)
    ours = build_swin(width, depths=depths, num_heads=heads).to(device, dtype)
    ref = SwinTransformer(img_size=32, patch_size=2, num_classes=10, embed_dim=width, depths=depths, num_heads=heads,
                          window_size=4, drop_path_rate=0.0).to(device, dtype)
    images = torch.randn(batch, 3, 32, 32, device=device, dtype=dtype)
    labels = torch.randint(0, 10, (batch,), device=device)

    def loss(logits):
        return F.cross_entropy(logits.float(), labels)

    return [compare(f"Swin training step (w{width} d{depths} b{batch} 32px) vs timm",
                    training_step(ours, images, loss), training_step(ref, images, loss), device, repeats)]


BENCHES["swin"] = bench_swin


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="?", default="all", choices=[*BENCHES, "all"])
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per side (median is reported)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch (CPU only)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="auto: bfloat16 on CUDA, float32 on CPU")
    args = parser.parse_args(argv)
    device, dtype = setup(args.dtype)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    print(f"device {device}, dtype {str(dtype).removeprefix('torch.')}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    for name in BENCHES if args.which == "all" else [args.which]:
        BENCHES[name](device, dtype, args.repeats)


if __name__ == "__main__":
    main()

"""A training script of a lab's own, as flops-fit's trainer: it trains ONE planned run.

It does not import flops_fit: all it knows of the sweep is the run's spec, a JSON file named
by FLOPS_FIT_SPEC (every field of the plan's run, plus "checkpoint_dir" and "result_file";
the common ones are also environment variables: FLOPS_FIT_SIZE, FLOPS_FIT_TOKENS, FLOPS_FIT_LR,
...). It must

1. build the model of the run's size (its parameter count is the plan's "params"),
2. train exactly "tokens" tokens ("steps" steps of "batch_size" x "seq_len"; the last step
   takes what is left) with the planned learning rate, warmup and schedule,
3. checkpoint into "checkpoint_dir" and, started again after a kill, continue from there,
4. write "result_file": {"loss": held-out loss, "tokens": tokens trained, "curve": [...]}.

The model here is deliberately small (a byte embedding, tanh and a linear read-out: 512 x
size + 256 parameters, 6 x 256 x size training FLOPs per token), so the example sweeps in
seconds on a laptop CPU; swap in your own model, data and loop. Data: the text files under
--data (default: this folder), bytes as tokens, the last tenth held out.

    python train.py [--data FOLDER] [--checkpoint-every STEPS]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

VOCAB = 256


class ByteModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(tokens)))


def load_bytes(folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held-out) bytes of the folder's text files, in name order."""
    data = b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.suffix in (".py", ".md", ".txt", ".toml"))
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    cut = int(len(tokens) * 0.9)
    return tokens[:cut], tokens[cut:]


def windows(data: torch.Tensor, rows: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(data) - seq_len - 1, (rows,), generator=generator)
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])


def loss_of(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))


def rate(spec: dict, step: int) -> float:
    """Linear warmup, then cosine to min_lr_ratio at the run's last step (WSD: flat, then decay)."""
    lr, warmup, steps, floor = spec["lr"], spec["warmup_steps"], spec["steps"], spec["min_lr_ratio"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if spec["schedule"] == "wsd":
        start = spec["cooldown_start"]
        return lr if step < start else lr * (floor + (1 - floor) * (1 - (step - start) / max(1, steps - start)))
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def save(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Weights and optimizer moments in safetensors under the step's own name, then the loop's state
    in JSON naming that file (written to a temporary name and renamed: the one step that makes the
    checkpoint current), then the older weights removed. A kill anywhere leaves state.json naming a
    whole file of the same step."""
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    for index, values in optimizer.state_dict()["state"].items():
        tensors.update({f"optim.{index}.{k}": v.reshape(-1) if v.dim() == 0 else v for k, v in values.items()})
    weights = f"state-{state['step']}.safetensors"
    save_file(tensors, folder / f"{weights}.tmp")
    os.replace(folder / f"{weights}.tmp", folder / weights)
    (folder / "state.json.tmp").write_text(json.dumps({**state, "weights": weights}))
    os.replace(folder / "state.json.tmp", folder / "state.json")
    for old in folder.glob("state-*.safetensors"):
        if old.name != weights:
            old.unlink()


def restore(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
    if not (folder / "state.json").exists():
        return None
    state = json.loads((folder / "state.json").read_text())
    tensors = load_file(folder / state.pop("weights"))
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    saved = optimizer.state_dict()
    moments: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            moments.setdefault(int(index), {})[name] = value.reshape(()) if name == "step" else value
    optimizer.load_state_dict({"state": moments, "param_groups": saved["param_groups"]})
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parent))
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    args = parser.parse_args()
    spec = json.loads(Path(os.environ["FLOPS_FIT_SPEC"]).read_text())
    folder = Path(spec["checkpoint_dir"])
    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    model = ByteModel(spec["size"])
    params = sum(p.numel() for p in model.parameters())
    if params != spec["params"]:
        raise SystemExit(f"this script's model has {params} parameters at size {spec['size']}, the plan {spec['params']}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(spec["beta1"], spec["beta2"]),
                                  eps=spec["eps"], weight_decay=spec["weight_decay"])
    train, held_out = load_bytes(Path(args.data))
    seq_len, tokens, steps = spec["seq_len"], spec["tokens"], spec["steps"]
    state = restore(folder, model, optimizer) or {"step": 0, "tokens": 0, "losses": []}
    if state["step"]:
        print(f"resumed from step {state['step']} ({state['tokens']} tokens)", flush=True)
    while state["step"] < steps:
        step = state["step"]
        rows = min(spec["batch_size"], (tokens - state["tokens"]) // seq_len)  # the last step takes what is left
        batch = windows(train, rows, seq_len, torch.Generator().manual_seed(spec["seed"] * 1_000_003 + step))
        for group in optimizer.param_groups:
            group["lr"] = rate(spec, step)
        loss = loss_of(model, batch)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), spec["grad_clip"])
        optimizer.step()
        state = {"step": step + 1, "tokens": state["tokens"] + rows * seq_len, "losses": [*state["losses"], loss.item()]}
        if not math.isfinite(loss.item()):
            break  # flops-fit records a non-finite loss as a failed run
        if state["step"] % args.checkpoint_every == 0:
            save(folder, model, optimizer, state)
    with torch.no_grad():
        rows = max(1, spec["eval_tokens"] // seq_len)
        held = loss_of(model, windows(held_out, rows, seq_len, torch.Generator().manual_seed(12345))).item()
    every = max(1, math.ceil(steps / spec["curve_points"]))
    per_step = spec["batch_size"] * seq_len
    losses = state["losses"]
    curve = [[min(tokens, (i + every) * per_step), sum(losses[i:i + every]) / len(losses[i:i + every])]
             for i in range(0, len(losses), every)]
    result = {"loss": held, "tokens": state["tokens"], "steps": state["step"], "curve": curve}
    temporary = Path(spec["result_file"] + ".tmp")
    temporary.write_text(json.dumps(result))
    os.replace(temporary, spec["result_file"])
    print(f"trained {state['tokens']} tokens in {state['step']} steps: held-out loss {held:.4f}", flush=True)


if __name__ == "__main__":
    main()

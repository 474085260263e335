"""Write the previous releases' files that tests/test_previous_release.py resumes and reads.

Run with the OLD code on the path, never the current one (the files are what those releases wrote):

    git worktree add /tmp/prev 2248f99 && ln -s ../plugins /tmp/prev/flops_fit/plugins
    PYTHONPATH=/tmp/prev:/tmp/prev/tests python tests/data/previous_release/make_fixtures.py store
    git worktree add /tmp/prev1 5faa263^   # the last commit before the ``training`` refactor
    PYTHONPATH=/tmp/prev1 python tests/data/previous_release/make_fixtures.py checkpoint-v1

``store``: a 3-run sweep of the tests' tiny-lm at a rate with every bit set (0.1 / 3), its plan
recorded, its first run trained and stored, its second stopped after a few steps with a
checkpoint, its third not started (``sweep/``, ``store.json``). ``checkpoint-v1``: one
format-1 checkpoint of a small linear model after two AdamW steps (``checkpoint-v1/``,
``checkpoint-v1.json``: the values it holds, read back by the old code).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
LR = 0.1 / 3
OPTIONS = {"model": "tiny-lm", "budgets": [2e7], "sizes": [4, 8, 16], "batch_size": 8, "min_steps": 5,
           "eval_tokens": 512, "curve_points": 4, "checkpoint_seconds": 600, "hparams": {"lr": LR}}


def commit() -> str:
    import flops_fit

    root = Path(flops_fit.__file__).resolve().parents[1]
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def store() -> None:
    import sweep_support
    import torch

    from flops_fit.errors import Interrupted
    from flops_fit.executors.stopping import clear_stop, request_stop
    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.driver import checkpoint_policy, run_plan
    from flops_fit.sweeps.planner import plan
    from flops_fit.training.checkpoint import list_checkpoints
    from flops_fit.training.loop import train

    torch.set_num_threads(1)
    host = sweep_support.host()
    out = HERE / "sweep"
    planned = plan(host=host, **OPTIONS)
    run_plan(planned, out, record_only=True, skip_parity=True, host=host, show_progress=False)
    first, second, _ = planned.runs
    result = train(first, host=host)
    with RunStore(out) as s:
        s.record(result)
    policy = checkpoint_policy(planned.options, out, None)
    reports = []

    def stop(run_id, done, total, loss):
        reports.append(done)
        if len(reports) == 3:
            request_stop()

    try:
        train(second, stop, host=host, checkpoints=policy)
    except Interrupted:
        pass
    finally:
        clear_stop()
    [saved] = list_checkpoints(policy.run_dir(second.run_id))
    (HERE / "store.json").write_text(json.dumps({
        "commit": commit(), "lr": LR, "options": OPTIONS, "run_ids": [r.run_id for r in planned.runs],
        "done": {"run_id": first.run_id, "loss": result.loss}, "checkpointed": second.run_id,
        "checkpoint_step": int(saved.name[5:14]), "checkpoint_file": saved.relative_to(HERE).as_posix()}, indent=1))


def checkpoint_v1() -> None:
    import torch

    from flops_fit.training.checkpoint import (
        TrainState,
        list_checkpoints,
        read_checkpoint,
        save_checkpoint,
    )

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).square().mean().backward()
        optimizer.step()
    state = TrainState(run_id="v1run", step=2, tokens=80, curve=[[40.0, 1.5], [80.0, 1.25]],
                       scalars={"data_pos": 3, "data_rng": {"bit_generator": "PCG64", "state": {"state": 7, "inc": 9},
                                                          "has_uint32": 0, "uinteger": 0}},
                       tensors={"data_order": torch.arange(6), "losses": torch.tensor([1.5, 1.25])})
    save_checkpoint(HERE / "checkpoint-v1", model, optimizer, state)
    [path] = list_checkpoints(HERE / "checkpoint-v1")
    back = read_checkpoint(path)
    (HERE / "checkpoint-v1.json").write_text(json.dumps({
        "commit": commit(), "file": path.relative_to(HERE).as_posix(), "run_id": back.state.run_id,
        "step": back.state.step, "tokens": back.state.tokens, "curve": back.state.curve,
        "scalars": back.state.scalars, "data_order": back.state.tensors["data_order"].tolist(),
        "losses": back.state.tensors["losses"].tolist(),
        "weight": model.weight.detach().tolist(), "exp_avg_sq": optimizer.state[model.weight]["exp_avg_sq"].tolist()},
        indent=1))


if __name__ == "__main__":
    {"store": store, "checkpoint-v1": checkpoint_v1}[sys.argv[1]]()

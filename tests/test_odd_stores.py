"""`fit` and `report` on the sweep folders a new user meets besides a finished sweep: every run failed, no run
trained yet, a sweep stopped part way, an adaptive sweep that chose some of its plan. `fit` answers or refuses in
one line (exit 2); `report` always writes a page, saying why where there is no answer."""

import html

import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunResult

LAW = {"E": 1.0, "A": 60.0, "B": 300.0, "alpha": 0.35, "beta": 0.35}  # its optimum inside each budget's sizes


def store(folder, states):
    """A GPT plan of 3 budgets x 4 sizes in ``folder``, run i left as ``states(i)``: done (its loss from LAW),
    failed, running (a driver killed mid-run) or pending (not started)."""
    planned = flops_fit.plan(model="gpt", dataset="python-stdlib", budgets=[2.5e8, 3.5e8, 5e8], sizes_per_budget=4,
                             span=8.0, batch_size=32, seq_len=16, min_steps=10, hparams={"lr": 1e-3},
                             model_config={"n_layer": 1, "n_head": 1})
    with RunStore(folder, create=True) as runs:
        runs.add_plan(planned, spec=planned.settings)
        for i, r in enumerate(planned.runs):
            state = states(i)
            if state != "pending":
                runs.mark_running(r.run_id)
            loss = LAW["E"] + LAW["A"] / r.params ** LAW["alpha"] + LAW["B"] / r.tokens ** LAW["beta"]
            if state == "done":
                runs.record(RunResult(r.run_id, "done", loss=loss, tokens=r.tokens, flops=r.flops, steps=r.steps))
            elif state == "failed":
                runs.record(RunResult(r.run_id, "failed", error=f"RuntimeError: out of memory at size {r.size}"))
    return planned


@pytest.mark.parametrize(("state", "said"), [
    ("failed", "none of its 12 runs has finished with a loss (12 failed; {first}: RuntimeError: out of memory at size {size}): `flops-fit "
               "status {out}` lists them; train them by resuming the sweep (`flops-fit sweep CONFIG --out {out} --resume "
               "--retry-failed`)"),
    ("pending", "none of its 12 runs has finished with a loss (12 pending): `flops-fit status {out}` lists them; train them by "
                "resuming the sweep (`flops-fit sweep CONFIG --out {out} --resume`)"),
])
def test_a_store_without_a_finished_run_gets_a_page_that_says_so(tmp_path, capsys, state, said):
    """Every run failed, or the sweep was planned and never run: `report` wrote no page (exit 2 and a line that
    said "the table is empty or every run failed", with a tracker's hint on spelling a finished status, and no
    word of pending runs). It now writes the page, which names what to run; `fit` refuses in that one line."""
    out = tmp_path / "sweep"
    planned = store(out, lambda i: state)
    line = f"{out}: no finished runs to fit: " + said.format(first=planned.runs[0].run_id, size=planned.runs[0].size, out=out)
    assert main(["fit", str(out), "--tracking", "off"]) == 2
    assert capsys.readouterr().err == f"flops-fit: error: {line}\n"
    page = tmp_path / "page.html"
    assert main(["report", str(out), "--tracking", "off", "--out", str(page)]) == 2
    captured = capsys.readouterr()
    assert captured.out == f"report written to {page}\n" and captured.err == f"flops-fit: error: {line}\n"
    text = page.read_text()
    assert "No run finished with a loss, so nothing was fitted" in text and "More budgets" not in text
    assert html.escape(line) in text


def test_a_sweep_stopped_part_way_is_fitted_saying_which_runs_it_lacks(tmp_path):
    """A sweep killed after 8 of 12 runs was fitted on its 8 without a word of the 4 left (2 cut short, marked
    running; 2 never started): the answer read as the whole sweep's. They are now named as left out."""
    out = tmp_path / "sweep"
    planned = store(out, lambda i: "done" if i < 8 else ("running" if i < 10 else "pending"))
    fitted = flops_fit.fit(str(out), bootstrap=0, tracking=False, workers=1)
    assert len(fitted.runs) == 8
    ids = [r.run_id for r in planned.runs[8:]]
    assert fitted.runs.notes[0] == (f"4 run(s) are not finished or have no finite loss, and are left out ({ids[0]}: "
                                    f"status 'running'; {ids[1]}: status 'running'; {ids[2]}: status 'pending'; ...)")


def test_an_adaptive_sweeps_runs_not_chosen_are_not_called_unfinished(tmp_path):
    """An adaptive sweep trains the runs its design chose; the rest of its plan stays pending by design and is
    no sweep left unfinished. A chosen run still pending (the design stopped mid-batch) is."""
    out = tmp_path / "sweep"
    planned = store(out, lambda i: "done" if i < 8 else "pending")
    chosen = [r.run_id for r in planned.runs[:9]]
    with RunStore(out) as runs:
        runs.set_meta(adaptive={"run_ids": [chosen[:4], chosen[4:]]})
    notes = flops_fit.load_runs(str(out)).notes
    assert notes[0] == (f"1 run(s) are not finished or have no finite loss, and are left out ({chosen[8]}: status "
                        "'pending')")


def test_a_table_whose_runs_all_failed_gets_a_page_too(tmp_path, capsys):
    """A tracker's export whose every run crashed: `report` wrote no page either; its line still names the
    statuses read as unfinished."""
    table = tmp_path / "runs.csv"
    table.write_text("params,tokens,loss,status\n" + "".join(f"{n},{20 * n},,crashed\n" for n in (1e6, 2e6, 4e6)))
    assert main(["report", str(table), "--tracking", "off"]) == 2
    captured = capsys.readouterr()
    line = (f"{table}: no finished runs to fit (every run failed or is unfinished); the runs' status 'crashed' read "
            "as not finished: a finished run's status is one of done, finished, ok, completed, succeeded, success")
    assert captured.err == f"flops-fit: error: {line}\n"
    assert html.escape(line) in (tmp_path / "runs.report.html").read_text()

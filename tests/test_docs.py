"""Every hook is documented in docs/guide/plugins.md with its exact signature, and docs/guide/data.md's
examples run as written."""

import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from flops_fit.plugin import hookspecs

DOC = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "plugins.md").read_text()
HOOKS = sorted(
    name for name, fn in vars(hookspecs).items() if inspect.isfunction(fn) and hasattr(fn, "flops_fit_spec")
)


def test_hookspecs_are_discovered():
    assert HOOKS == sorted(hookspecs.HOOK_KINDS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_with_its_exact_signature(hook):
    fn = getattr(hookspecs, hook)
    params = ", ".join(inspect.signature(fn).parameters)
    assert f"### `{hook}({params})`" in DOC, f"docs/guide/plugins.md lacks a '### `{hook}({params})`' section"


DATA_DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "data.md"


def test_the_data_pages_examples_run_as_written(tmp_path, monkeypatch):
    pytest.importorskip("datasets", reason="docs/guide/data.md's examples need `datasets` (pip install 'flops-fit[data]')")
    pytest.importorskip("tokenizers", reason="docs/guide/data.md's examples need `tokenizers`")
    from flops_fit.sweeps.config import load_config
    from flops_fit.sweeps.planner import plan

    monkeypatch.chdir(tmp_path)
    text = DATA_DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, str(DATA_DOC), "exec"), {})
    [sweep_file] = re.findall(r"```toml\n(.*?)```", text, re.S)
    (tmp_path / "sweep.toml").write_text(sweep_file)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("a little text\n")
    config = load_config(tmp_path / "sweep.toml")
    assert plan(config.options).runs[0].model_config["vocab_size"] == 8192


HOME = Path(__file__).resolve().parents[1] / "docs" / "index.md"


def test_the_home_pages_csv_example_runs_as_written(tmp_path, monkeypatch):
    """The site's first screen answers "how do I fit my CSV": its example fits a CSV of runs."""
    from flops_fit.fitting.synthetic import synthetic_runs

    monkeypatch.chdir(tmp_path)
    synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1).drop(columns="curve").to_csv("runs.csv", index=False)
    text = HOME.read_text()
    first_screen = text[:text.index("## Run a sweep")]
    assert "flops-fit fit runs.csv" in first_screen
    [block] = re.findall(r"```python\n(.*?)```", first_screen, re.S)
    namespace = {}
    exec(compile(block.replace('method="vpnls")', 'method="vpnls", bootstrap=20)'), str(HOME), "exec"), namespace)
    table = namespace["fitted"].predict(1e21)
    assert (table["N_opt_lo"] < table["N_opt"]).all() and (table["N_opt"] < table["N_opt_hi"]).all()


@pytest.mark.parametrize("page", ["model-families.md", "mup.md", "sweeps.md"])
def test_the_pages_examples_that_train_nothing_run_as_written_in_one_script(page, tmp_path, monkeypatch):
    """A reader pastes a page's Python blocks into one script: they run in order, imports included
    (they began with `flops_fit.create_model(...)` and failed with a NameError)."""
    monkeypatch.chdir(tmp_path)
    path = DATA_DOC.with_name(page)
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    assert blocks
    exec(compile("".join(blocks), str(path), "exec"), {"__name__": "__main__"})


def test_a_sweep_example_that_starts_ranks_or_workers_keeps_its_main_guard():
    """A script without the guard is refused (executors.supervisor.check_main_guard): every example that
    sweeps on several workers or ranks has it."""
    guide = DATA_DOC.parent
    for page in sorted(guide.glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            if re.search(r"workers=[2-9]|processes_per_run=[2-9]", block) and ".run(" in block:
                assert 'if __name__ == "__main__":' in block, f"{page.name}: an unguarded sweep example"


def test_every_docs_page_the_repository_names_exists():
    """A comment, docstring or page that sends a reader to ``docs/NAME.md`` names a page that is
    there (pages move: ``docs/sweeps.md`` became ``docs/guide/sweeps.md``)."""
    root = DATA_DOC.parents[2]
    files = [root / "README.md", *root.glob("examples/*"), *root.glob("docs/**/*.md"),
             *root.glob("flops_fit/**/*.py"), *root.glob("benchmarks/*.py"), *root.glob("plugins/**/*.py")]
    missing = sorted({f"{path.relative_to(root)}: {name}" for path in files if path.is_file()
                      for name in re.findall(r"\bdocs/[\w/.-]+?\.md\b", path.read_text(errors="replace"))
                      if not (root / name).is_file()})
    assert not missing


def _prose_blocks(text: str) -> list[tuple[bool, list[str]]]:
    """The page's blank-line-separated blocks outside code fences, each with whether it is prose (not a
    list, table, heading, quote, indented or fenced block, nor an API reference directive)."""
    out, current, fenced = [], [], False
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            fenced = not fenced
            line = ""
            out.append((False, ["```"]))
        if fenced:
            continue
        if line.strip():
            current.append(line)
        elif current:
            out.append((not re.match(r"(\s|[-*|#>]|\d+\.|:::|<|!\[)", current[0]), current))
            current = []
    return out


def test_no_docs_sentence_is_cut_by_a_blank_line():
    """Splitting the docs into pages cut sentences in two: tuning.md began a paragraph with "run the law's
    rate ..." (its start left in validation/sweeps.md, which ended "... and gives each"), its muP sentence
    lost its middle, clusters.md split a bold phrase, methods.md ended one at "the median error of"."""
    root = DATA_DOC.parents[1]
    cut = []
    for page in sorted(root.rglob("*.md")):
        blocks = _prose_blocks(page.read_text())
        for (prose, before), (prose_after, after) in zip(blocks, blocks[1:], strict=False):
            if not (prose and prose_after):
                continue
            lead_in = len(after) == 1 and after[0].endswith(":")  # "or from Python:" before an example
            if re.search(r"[A-Za-z,(*]$", before[-1]) or (re.match(r"([a-z]{2,}\b|\)|\[[^\]]*\]\([^)]*\)\))",
                                                                     after[0]) and not lead_in):
                cut.append(f"{page.relative_to(root)}: {before[-1][-40:]!r} / {after[0][:40]!r}")
    assert not cut


def test_the_data_pages_glyphs_plan_command_plans_as_written(capsys):
    """It read `--budgets 3e13,1e14,3e14`, which the planner refused (budgets >= 6.48e+14 needed)."""
    from flops_fit.cli.main import main

    [command] = re.findall(r"^    flops-fit (plan --model vit --dataset glyphs .*)$", DATA_DOC.read_text(), re.M)
    assert main(command.split()) == 0, capsys.readouterr().err
    assert "runs of vit on glyphs" in capsys.readouterr().out


def test_the_methods_page_states_approach_3s_search_as_the_code_runs_it():
    """methods.md said L-BFGS starts from every one of the 4500 grid points; it starts from the
    GRID_KEEP with the lowest objective (``pruned_grids``) since the fit was batched."""
    from flops_fit.fitting.approaches import parametric

    text = " ".join((DATA_DOC.parents[1] / "methods.md").read_text().split())
    found = re.search(r"\((\d+) points\), then L-BFGS from the (\d+) with the lowest \(`parametric\.GRID_KEEP`.*?"
                      r"falls below (\S+), then the (\d+) best distinct solutions", text)
    assert found, "methods.md no longer describes Approach 3's search"
    grid, keep, ftol, polish = found.groups()
    assert (int(grid), int(keep), float(ftol), int(polish)) == (
        len(parametric.INIT_GRID), parametric.GRID_KEEP, parametric.GRID_FTOL, parametric.POLISH)


def test_the_readmes_resample_defaults_are_the_commands_defaults():
    """The README said 1000 resamples were `flops-fit fit`'s and `report`'s default; report's is 500."""
    import argparse

    from flops_fit.cli.main import build_parser

    readme = " ".join((DATA_DOC.parents[2] / "README.md").read_text().split())
    [(fit_default, report_default)] = re.findall(r"(\d+) resamples, `flops-fit fit`'s default \(`report`'s is (\d+)\)",
                                                 readme)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    # --bootstrap's own default is None (a demo's folder has its recorded count): the command's is default_bootstrap
    assert (int(fit_default), int(report_default)) == (sub.choices["fit"].get_default("default_bootstrap"),
                                                       sub.choices["report"].get_default("default_bootstrap"))


def test_the_fit_pages_synopsis_names_every_method():
    """fit.md's `flops-fit fit SOURCE [--method ...]` left out `curve`, a method the command takes."""
    from flops_fit.fitting import METHODS

    page = (DATA_DOC.parent / "fit.md").read_text()
    [methods] = re.findall(r"flops-fit fit SOURCE \[--method ([\w|-]+)\]", page)
    assert methods.split("|") == [*METHODS, "all"]


def test_every_sweep_file_the_guide_shows_plans_as_written(tmp_path):
    """compute.md's `stack_runs` file ([sweep] model, budgets, schedule) was refused by the planner
    (budget 6e10 holds 2 sizes at the default span): a sweep file on a page plans when pasted into one
    (a file of the reader's own that it names, such as a config.json, excepted)."""
    import tomllib

    import flops_fit
    from flops_fit.sweeps.config import load_config

    refused = []
    for page in sorted(DATA_DOC.parent.glob("*.md")):
        for block in re.findall(r"```toml\n(.*?)```", page.read_text(), re.S):
            if "budgets" not in tomllib.loads(block).get("sweep", {}):
                continue
            path = tmp_path / "sweep.toml"
            path.write_text(block)
            try:
                flops_fit.plan(load_config(path).options)
            except ValueError as e:
                if "no such" not in str(e):
                    refused.append(f"{page.name}: {e}")
    assert not refused


def test_the_report_a_csv_gets_is_where_the_first_pages_say():
    """README and the home page said `flops-fit report runs.csv` writes report.html; it writes
    runs.report.html beside the table (cli.fit.default_report_path)."""
    from flops_fit.cli.fit import default_report_path

    root = DATA_DOC.parents[2]
    for page in (root / "README.md", root / "docs" / "index.md"):
        [named] = re.findall(r"^    flops-fit report runs\.csv .*plots: (\S+)$", page.read_text(), re.M)
        assert named == str(default_report_path("runs.csv")), page.name


def test_every_module_name_and_source_file_the_docs_name_is_there():
    """fit.md sent readers to `flops_fit.store.RunStore` (it is `flops_fit.RunStore`, defined in
    `flops_fit.store.run_store`), validation pages to `plugins/llama.py` and `validation/validity.py`
    (under `plugins/models/` and `flops_fit/fitting/`): a dotted `flops_fit...` name resolves, and a
    source path is under the repository or `flops_fit/`. The MLflow tag `flops_fit.run_id` is a tag."""
    import importlib

    def resolves(dotted: str) -> bool:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for part in parts[i:]:
                if not hasattr(obj, part):
                    return False
                obj = getattr(obj, part)
            return True
        return False

    root = DATA_DOC.parents[2]
    missing = []
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        text = page.read_text()
        names = set(re.findall(r"`(flops_fit(?:\.\w+)+)", text)) - {"flops_fit.run_id"}
        missing += [f"{page.name}: {name}" for name in sorted(names) if not resolves(name)]
        paths = set(re.findall(r"`([\w.-]+/[\w./-]+\.py)`", text))
        missing += [f"{page.name}: {path}" for path in sorted(paths)
                    if not (root / path).is_file() and not (root / "flops_fit" / path).is_file()]
    assert not missing


def test_a_divergence_the_docs_show_is_at_the_default_factor():
    """first-sweep.md's failure summary showed "exceeds 4 x its first value"; a run diverges past
    HyperParams.divergence_factor (3) x its first loss, as sweeps.md says."""
    import flops_fit

    factors = {float(f) for page in DATA_DOC.parent.glob("*.md")
               for f in re.findall(r"exceeds (\d+(?:\.\d+)?) x its first value", page.read_text())}
    assert factors == {flops_fit.HyperParams().divergence_factor}


def test_the_fit_pages_worker_timings_are_the_stored_results():
    """fit.md quoted "the ViT demo's fit: 130 s on one core, 77 s on two", typed when workers= came in
    and long superseded; it quotes the stored benchmark results, which this reads."""
    import json

    root = DATA_DOC.parents[2]
    text = " ".join((DATA_DOC.parent / "fit.md").read_text().split())
    [(one, two)] = re.findall(r"the GPT demo's whole fit: ([\d.]+) s on one worker, ([\d.]+) s on two", text)
    for printed, name in ((one, "fit_speed.json"), (two, "fit_speed_2workers.json")):
        stored = json.loads((root / "benchmarks" / "results" / name).read_text())
        assert float(printed) == round(stored["new"]["whole_fit_s"], 1), name


def test_fit_and_reports_method_help_names_every_method():
    """`flops-fit fit --help` named envelope, isoflop, parametric and vpnls, not interaction or curve,
    which the guide's method table lists and --method takes."""
    import argparse

    from flops_fit.cli.main import build_parser
    from flops_fit.fitting import METHODS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("fit", "report"):
        [method] = [a for a in sub.choices[command]._actions if "--method" in a.option_strings]
        assert all(re.search(rf"\b{m}\b", method.help) for m in METHODS), (command, method.help)


def test_the_fit_guides_synopsis_names_every_metric():
    """The guide's `flops-fit fit` synopsis read `[--metric loss|bpb]`, so an image classifier's user found no
    metric for its top-1 error there (it is `error`, described a page above)."""
    from flops_fit.fitting.inputs import METRICS

    page = (DATA_DOC.parent / "fit.md").read_text()
    [choices] = re.findall(r"\[--metric ([\w|]+)\]", page)
    assert choices.split("|") == list(METRICS)


def test_the_public_api_page_says_how_to_reach_each_name_it_documents():
    """reference/index.md says everything on it is importable from `flops_fit`; it documented
    `flops_fit.sweeps.gate.check` (public as `check_parity`) and `Forecast` (not public) without
    saying so. Each name is a public one, or the page's lead names how to reach it."""
    import importlib

    import flops_fit

    page = (DATA_DOC.parents[1] / "reference" / "index.md").read_text()
    lead = page[:page.index(":::")]
    unreached = []
    for path in re.findall(r"^::: ([\w.]+)$", page, re.M):
        module, _, name = path.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if inspect.ismodule(obj):  # a module documented whole: its public names
            continue
        if getattr(flops_fit, name, None) is not obj and f"`{name}`" not in lead:
            unreached.append(path)
    assert not unreached


def test_the_plugin_pages_example_registers_the_dataset_its_model_defaults_to(monkeypatch):
    """plugins.md's example plugin registered mlp-lm with default_datasets=("modular-sequences",) and no such
    dataset (the package under examples/ registers it): loaded as written, every default dataset resolves."""
    import types

    from flops_fit.plugin import api
    from flops_fit.testing import isolated_host

    [block] = [b for b in re.findall(r"```python\n(.*?)```", DOC, re.S) if "# flops_fit_example/plugin.py" in b]
    module = types.ModuleType("flops_fit_example.plugin")
    monkeypatch.setitem(sys.modules, "flops_fit_example", types.ModuleType("flops_fit_example"))
    monkeypatch.setitem(sys.modules, module.__name__, module)  # the family reads its sizing functions there
    exec(compile(block, "plugins.md", "exec"), module.__dict__)
    host = isolated_host(("example", module))
    [model] = api.list_models(host=host)
    wanted = api.model_info(model, host=host).default_datasets
    assert wanted and all(api.dataset_info(name, host=host).name == name for name in wanted)


def test_first_sweep_states_the_main_guard_rule_once():
    """first-sweep.md's Python API section said the rule twice, a paragraph after the example and again
    under SweepOptions' example ("Scripts that use `workers > 1` must guard ..."): once is the page's."""
    text = DATA_DOC.with_name("first-sweep.md").read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    assert prose.count('`if __name__ == "__main__":`') == 1


def _rendered_names() -> set[str]:
    """Every ``module.name`` the API reference pages render: a ``::: module.name`` directive, or the public
    members of a ``::: module`` directive (its ``members: [...]`` where given; none with ``members: false``)."""
    import importlib

    rendered = set()
    for page in sorted((DATA_DOC.parents[1] / "reference").glob("*.md")):
        text = page.read_text()
        for found in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.M):
            path, options = found.group(1), found.group(2)
            rendered.add(path)
            try:
                module = importlib.import_module(path)
            except ImportError:
                continue
            if "members: false" in options:
                continue
            listed = re.search(r"members: \[(.*?)\]", options)
            names = ([n.strip() for n in listed.group(1).split(",")] if listed else
                     [n for n in vars(module) if not n.startswith("_")])
            rendered.update(f"{path}.{n}" for n in names)
    return rendered


def test_every_public_function_and_class_is_rendered_on_the_api_reference():
    """``flops_fit.adaptive_sweep``, ``StopRule``, ``probe``, ``fit_rates``, ``RateFit``, ``record_result`` were
    on no reference page, and ``list_executors``, ``create_executor``, ``loss_info`` ... had no docstring, so
    mkdocstrings (``show_if_no_docstring: false``) left them out of the page that renders their module."""
    import flops_fit

    rendered = _rendered_names()
    missing, bare = [], []
    for name in sorted(set(flops_fit.__all__) | set(flops_fit._LAZY)):  # the lazy names are public too
        obj = getattr(flops_fit, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not obj.__module__.startswith("flops_fit"):
            continue  # constants, pluggy's hookimpl marker
        if f"{obj.__module__}.{obj.__qualname__}" not in rendered:
            missing.append(name)
        if not inspect.getdoc(obj):
            bare.append(name)
    assert not missing and not bare, (missing, bare)


def test_the_models_page_names_the_module_of_every_model_in_its_table():
    """The models page's table lists swin, but its list of registration modules (and of the
    modules models are built from) left swin out."""
    import flops_fit

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "models.md").read_text()
    intro = page.split("| model |")[0]
    built_from = re.search(r"flops_fit\.plugins\.models\.\{([a-z_0-9,]+)\}_model:build", intro).group(1).split(",")
    for name in re.findall(r"^\| `([^`]+)` \|", page, flags=re.M):
        family = flops_fit.model_info(name).builder.split(":")[0].removeprefix("flops_fit.plugins.models.")
        family = family.removesuffix("_model")
        assert f"`flops_fit.plugins.models.{family}`" in intro and family in built_from, (name, family)


def test_the_adaptive_pages_commands_and_python_design_the_same_sweep(tmp_path, capsys):
    """adaptive.md planned `--model gpt --budgets 4e12,...,1.28e14` (target 1.28e15, hours of CPU) beside a sweep
    file with the prose's budgets 1e11-3.2e12 and a report at `--target 3.2e13`, "the target the rule read": its
    plan line, its Python plan and its report read one sweep, my-sweep.toml (examples/sweep.toml, those budgets)."""
    import shlex
    import tomllib

    import flops_fit
    from flops_fit.cli.main import main
    from flops_fit.sweeps.config import load_config

    page = (DATA_DOC.parent / "adaptive.md").read_text()
    [budgets] = re.findall(r"`(budgets = \[[^\]]*\])` in the `\[sweep\]` table of a\s+copy of `examples/sweep\.toml`",
                           page)
    example = (DATA_DOC.parents[2] / "examples" / "sweep.toml").read_text()
    (tmp_path / "my-sweep.toml").write_text(re.sub(r"^budgets = .*$", budgets, example, flags=re.M))
    [block] = re.findall(r"```bash\n(.*?)```", page, re.S)
    commands = [shlex.split(line.split("#")[0])[1:] for line in block.replace("\\\n", " ").splitlines()]
    plan_line = next(c for c in commands if c[0] == "plan")
    assert main([c.replace("my-sweep.toml", str(tmp_path / "my-sweep.toml")) for c in plan_line]) == 0
    largest = max(tomllib.loads(budgets)["budgets"])
    assert f"at the target {10 * largest:.3g} within 2x" in capsys.readouterr().out
    [report_line] = [c for c in commands if c[0] == "report"]
    assert float(report_line[report_line.index("--target") + 1]) == 10 * largest  # the design's default target
    [python] = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "adaptive_sweep" in b]
    namespace = {}
    exec(compile(python.split("design = ")[0], "adaptive.md", "exec"), namespace)  # the plan, not the sweep
    wanted = flops_fit.plan(load_config(tmp_path / "my-sweep.toml").options).runs
    assert [r.run_id for r in namespace["plan"].runs] == [r.run_id for r in wanted]


def test_the_fit_pages_synopsis_names_every_option_of_fit_and_report():
    """fit.md's synopsis left out --holdout forward, auto and none (report's default is auto), --workers, --at,
    --tracking, --all-rates, --experiment, --curve-metric and --verbose, and said report takes "the same options"
    (it has no --predict, --total-flops, --json or --plots)."""
    import argparse

    from flops_fit.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {name: {o for a in sub.choices[name]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
               for name in ("fit", "report")}
    page = (DATA_DOC.parent / "fit.md").read_text()
    fit_block, report_line = re.search(r"^    (flops-fit fit SOURCE .*?)^    (flops-fit report .*?)^    flops-fit compare",
                                       page, re.S | re.M).groups()
    assert set(re.findall(r"--[a-z-]+", fit_block)) == options["fit"]
    [holdout] = [a for a in sub.choices["fit"]._actions if "--holdout" in a.option_strings]
    assert f"[--holdout {holdout.metavar}]" in fit_block
    exceptions = re.search(r"except (.*?);", report_line, re.S).group(1)
    assert set(re.findall(r"--[a-z-]+", exceptions)) == options["fit"] - options["report"]
    assert options["report"] - options["fit"] <= set(re.findall(r"--[a-z-]+", report_line.split("fit's")[0]))


@pytest.mark.parametrize(("command", "page", "synopsis"), [
    ("compare", "decide.md", r"^    (flops-fit compare SWEEP_A SWEEP_B .*?)\n\n"),
    ("sweep", "sweeps.md", r"`(flops-fit sweep CONFIG\.toml .*?)`"),
])
def test_a_commands_synopsis_names_every_option_it_takes(command, page, synopsis):
    """decide.md's `flops-fit compare` synopsis left out its column options, --metric, --scale, --seed and --level;
    sweeps.md's `flops-fit sweep` one --hparams, --record-only, --verbose and the adaptive design's options."""
    import argparse

    from flops_fit.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {o for a in sub.choices[command]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
    shown = re.search(synopsis, (DATA_DOC.parent / page).read_text(), re.S | re.M).group(1)
    assert set(re.findall(r"--[a-z-]+", shown)) == options


def _python_block(page: Path, marker: str) -> str:
    """The page's one Python example that contains ``marker``."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S) if marker in b]
    return block


def test_the_models_pages_example_runs_as_written_and_its_comments_hold(capsys):
    """models.md's example builds a ViT and a GQA GPT, takes a loss and reads the family's counts: its comments say
    the logits are (8, 10) and the built count equals the entry's analytic one."""
    page = DATA_DOC.with_name("models.md")
    namespace = {}
    exec(compile(_python_block(page, "flops_fit.create_model"), str(page), "exec"), namespace)
    assert tuple(namespace["logits"].shape) == (8, 10)
    sizes, counts, flops = capsys.readouterr().out.splitlines()
    assert sizes.startswith("[32, 48, ") and sizes.endswith(", 256]")
    built, analytic = counts.split()
    assert built == analytic and float(flops) > 0


def test_the_forecast_pages_prior_example_runs_as_written(capsys):
    """forecast.md's example reads the shipped prior and the loss interval's reach law (no demo folder needed)."""
    page = DATA_DOC.with_name("forecast.md")
    exec(compile(_python_block(page, "shipped_laws"), str(page), "exec"), {})
    sweeps, law = capsys.readouterr().out.splitlines()
    assert sweeps.startswith("[") and "Prior(" in sweeps
    assert all(np.isfinite(float(x)) and float(x) > 0 for x in law.split())


def test_the_readmes_csv_example_runs_as_written(tmp_path, monkeypatch):
    """The README's first example fits a CSV of runs and prints the law with N_opt, D_opt and the loss at 1e21."""
    from flops_fit.fitting.synthetic import synthetic_runs

    monkeypatch.chdir(tmp_path)
    synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1).drop(columns="curve").to_csv("runs.csv", index=False)
    readme = DATA_DOC.parents[2] / "README.md"
    block = _python_block(readme, 'flops_fit.fit("runs.csv"')
    namespace = {}
    exec(compile(block.replace('method="vpnls")', 'method="vpnls", bootstrap=20)'), str(readme), "exec"), namespace)
    table = namespace["table"]
    assert len(table) == 1 and (table["N_opt_lo"] < table["N_opt"]).all() and (table["N_opt"] < table["N_opt_hi"]).all()


@pytest.mark.e2e  # trains 6 tiny runs, alone and stacked (~8 s): the end-to-end tier
def test_the_compute_pages_stacked_example_runs_as_written_and_trains_bit_for_bit(tmp_path, monkeypatch, capsys):
    """compute.md's example trains three rates alone and together, "equal, bit for bit": on 2 cores it printed
    3.2482110802084208 alone and 3.248509017750621 together, since a run alone took torch's 2 threads and the
    program gives each kernel threads // runs (1); the example now trains alone at 1 thread, as the prose says."""
    import torch

    monkeypatch.chdir(tmp_path)
    page = DATA_DOC.with_name("compute.md")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a machine of 2 cores or more, where the two differed
    try:
        exec(compile(_python_block(page, "train_stacked"), str(page), "exec"), {})
    finally:
        torch.set_num_threads(threads)  # the example sets 1
    pairs = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert len(pairs) == 3 and all(alone == together for alone, together in pairs)


@pytest.mark.e2e  # a 9-run tune of a tiny GPT (~10 s): the end-to-end tier
def test_the_tuning_pages_example_runs_as_written_and_plans_from_its_law(tmp_path, monkeypatch):
    """tuning.md's example tunes, writes my-tune/hparams.json and report.html, and plans every run from the law."""
    monkeypatch.chdir(tmp_path)
    page = DATA_DOC.with_name("tuning.md")
    namespace = {}
    exec(compile(_python_block(page, "flops_fit.tune("), str(page), "exec"), namespace)
    assert (tmp_path / "my-tune" / "hparams.json").is_file() and (tmp_path / "my-tune" / "report.html").is_file()
    assert all(r.lr_source.startswith("tuned") for r in namespace["plan"].runs)

"""The CLI listings, and the promise that nothing heavy is imported to answer them."""

import json
import subprocess
import sys

import pytest
from plugin_kit import Good

from flops_fit.cli import main as cli
from flops_fit.plugin.host import Host, reset_host


@pytest.fixture
def toy_host():
    host = Host(builtins=False, entry_points=False, plugins=[("good", Good())], env={})
    reset_host(host)
    yield host
    reset_host(None)


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_import_flops_fit_imports_no_torch_and_loads_no_plugin():
    out = run_python(
        "import sys, flops_fit, flops_fit.plugin.host as h; "
        "print('torch' in sys.modules, h._default is None)"
    )
    assert out.split() == ["False", "True"]


@pytest.mark.parametrize("argv", [["--help"], ["plugins"], ["plugins", "--json"], ["models"], ["datasets"], ["losses"]])
def test_cli_answers_without_importing_torch(argv):
    out = run_python(
        "import sys, contextlib, io\n"
        "from flops_fit.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'matplotlib', 'pandas') if m in sys.modules))"
    )
    assert out.strip() == "[]"


def test_models_listing_table_and_json(toy_host, capsys):
    assert cli.main(["models"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["name", "plugin", "task", "size", "default", "size", "FLOPs", "per", "loss", "datasets"]
    assert table[2].split()[:5] == ["toy", "good", "causal-lm", "width", "token"]
    assert cli.main(["models", "--json", "t*"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["id"] == "good/toy" and entry["size_param"] == "width"
    assert cli.main(["models", "nomatch*"]) == 0
    assert capsys.readouterr().out == "no model matches 'nomatch*'; `flops-fit models` lists them all\n"
    assert cli.main(["models", "oy"]) == 0  # part of a name (it matched only a whole name: an empty table)
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]] == ["toy"]
    assert cli.main(["models", "tyo"]) == 0  # a typo: the nearest name is said
    assert capsys.readouterr().out == "no model matches 'tyo' (did you mean 'toy'?); `flops-fit models` lists them all\n"


def test_plugins_listing(toy_host, capsys):
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "good" in out and "datasets, losses, models" in out and "model: 1" in out
    assert cli.main(["plugins", "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["status"] == "loaded" and info["hooks"] == ["register_datasets", "register_losses", "register_models"]


def test_qualified_listing(toy_host, capsys):
    assert cli.main(["losses", "--qualified"]) == 0
    assert "good/toy-loss" in capsys.readouterr().out


def test_cli_without_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert "usage: flops-fit" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "line"), [
    (["tune", "--from", "runs.csv", "--out", "o", "--bootsrap", "10"],
     "flops-fit tune: error: unrecognized arguments: --bootsrap (did you mean --bootstrap?); `flops-fit tune --help` "
     "lists its options"),
    (["fit", "runs.csv", "--metod", "all", "--jsn"],
     "flops-fit fit: error: unrecognized arguments: --metod all --jsn (did you mean --method, --json?); "
     "`flops-fit fit --help` lists its options"),
    (["--bogus"], "flops-fit: error: unrecognized arguments: --bogus; `flops-fit --help` lists its options"),
])
def test_a_mistyped_option_is_one_line_from_its_command_with_the_nearest_option(argv, line, capsys):
    """A typo in a command's option printed the top level's usage (`usage: flops-fit [-h] ...`), naming
    neither the command nor the option meant."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == line + "\n"


@pytest.mark.parametrize(("argv", "line"), [
    (["plan", "--model", "gpt", "--budgets", "1e11", "--sizes", "32.5,48"],
     "argument --sizes: '32.5,48' is not a comma-separated list of whole numbers, e.g. 64,128"),
    (["plan", "--model", "gpt", "--budgets", "1e11,abc"],
     "argument --budgets: '1e11,abc' is not a comma-separated list of numbers, e.g. 1e12,3e12"),
    (["plan", "--model", "gpt", "--budgets", "1e11", "--compile", "maybe"],
     "argument --compile: expected true or false, got 'maybe'"),
])
def test_a_list_or_switch_that_does_not_parse_says_what_it_wants(argv, line, capsys):
    """These read "invalid parse_ints value: '32.5,48'": the name of a function, not of what was wrong."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"flops-fit plan: error: {line}; `flops-fit plan --help` lists its options\n"


def test_public_functions_are_not_shadowed_by_submodules():
    """Importing every submodule must leave flops_fit.plan, .sweep, .fit... callable
    (a submodule of the same name would replace the function on the package)."""
    import importlib
    import pkgutil

    import flops_fit

    for module in pkgutil.walk_packages(flops_fit.__path__, "flops_fit."):
        importlib.import_module(module.name)
    for name in flops_fit._LAZY:
        assert not isinstance(getattr(flops_fit, name), type(flops_fit)), f"flops_fit.{name} is a module"


def test_output_into_a_closed_pipe_ends_quietly():
    """`flops-fit plugins | head -0`: the reader is gone before the first write; the command exits
    0 with nothing on stderr (no BrokenPipeError traceback, none at the interpreter's exit)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "flops_fit", "plugins"], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr

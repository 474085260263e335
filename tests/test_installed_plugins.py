"""Third-party plugins installed with pip, seen through the CLI as a user would see them.

One pip call installs the example plugin and one broken plugin of each kind into a
private folder that the CLI subprocesses get on PYTHONPATH: real distributions with
real entry points, nothing added to the test environment itself.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flops-fit-example-plugin"

BROKEN = {
    # entry-point name: (stage, expected message fragment, module source)
    "broken-import": ("import", "ModuleNotFoundError: No module named 'missing_dependency_xyz'",
                      "import missing_dependency_xyz\n"),
    "broken-argument": ("validate", "Argument(s) {'colour'} are declared in the hookimpl but can not be found in the hookspec", """
        from flops_fit import hookimpl
        @hookimpl
        def register_models(register, colour):
            pass
    """),
    "broken-hookname": ("hooks", "hook register_model matches no flops-fit hook", """
        from flops_fit import hookimpl
        @hookimpl
        def register_model(register):
            pass
    """),
    "broken-entry": ("register", "model name 'My Model' is invalid", """
        import flops_fit
        @flops_fit.hookimpl
        def register_models(register):
            register(flops_fit.ModelEntry("My Model", builder="x:y", size_param="width",
                valid_sizes="x:y", param_count="x:y", training_flops="x:y", flops_unit="token",
                task="causal-lm", default_loss="next-token"))
    """),
    "broken-raises": ("register", "in register_datasets: OSError: cannot reach the data server", """
        from flops_fit import hookimpl
        @hookimpl
        def register_datasets(register):
            raise OSError("cannot reach the data server")
    """),
}


def _write_project(root: Path, ep_name: str, source: str) -> Path:
    module = ep_name.replace("-", "_") + "_plugin"
    project = root / ep_name
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(textwrap.dedent(source))
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "flops-fit-{ep_name}"
        version = "0.0.1"
        [project.entry-points.flops_fit]
        {ep_name} = "{module}"
        [tool.setuptools]
        packages = ["{module}"]
    """))
    return project


# pip installs real packages, and each test runs the command in a fresh process
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Install the example plugin and every broken plugin with pip into one folder."""
    root = tmp_path_factory.mktemp("plugins")
    projects = [str(_write_project(root / "src", name, src)) for name, (_, _, src) in BROKEN.items()]
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(EXAMPLE), *projects],
        check=True, capture_output=True, text=True,
    )
    return target


def flops_fit_cli(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FLOPS_FIT_")}
    environment.update(PYTHONPATH=str(site), **env)
    return subprocess.run(
        [sys.executable, "-m", "flops_fit", *args], capture_output=True, text=True, env=environment, timeout=120
    )


def test_example_plugin_appears_in_models_and_plugins(site):
    result = flops_fit_cli(site, "models", "--json", FLOPS_FIT_LOAD_PLUGINS="example")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    models = {m["name"]: m for m in json.loads(result.stdout)}
    assert models["mlp-lm"]["id"] == "example/mlp-lm"
    assert models["mlp-lm"]["plugin"] == "example"

    result = flops_fit_cli(site, "plugins", "--json", FLOPS_FIT_LOAD_PLUGINS="example")
    example = next(p for p in json.loads(result.stdout) if p["name"] == "example")
    assert example["status"] == "loaded" and not example["builtin"]
    assert example["distribution"] == "flops-fit-example-plugin" and example["version"] == "0.1.0"
    assert example["contributed"] == {"dataset": ["example/modular-sequences"], "model": ["example/mlp-lm"]}


def test_example_plugin_model_and_dataset_can_be_created(site):
    code = (
        "import flops_fit; m = flops_fit.create_model('mlp-lm', 16); "
        "d = flops_fit.create_dataset('modular-sequences', 'validation', num_sequences=4); "
        "print(m.num_params(), len(d), tuple(m(d[0]['tokens'][None]).shape))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOPS_FIT_")}
    env.update(PYTHONPATH=str(site), FLOPS_FIT_LOAD_PLUGINS="example")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    params, n, shape = out.stdout.split(maxsplit=2)
    width, vocab = 16, 64
    assert int(params) == vocab * width + 2 * (4 * width * width) + 4 * width + width + width * vocab + vocab
    assert int(n) == 4 and shape.strip() == "(1, 32, 64)"


@pytest.mark.parametrize(
    ("env", "loaded"),
    [
        ({"FLOPS_FIT_LOAD_PLUGINS": ""}, False),
        ({"FLOPS_FIT_LOAD_PLUGINS": "broken-raises"}, False),
        ({"FLOPS_FIT_LOAD_PLUGINS": "example", "FLOPS_FIT_DISABLE_PLUGINS": "example"}, False),
        ({"FLOPS_FIT_LOAD_PLUGINS": "flops-fit-example-plugin"}, True),  # distribution names work too
    ],
)
def test_environment_switches(site, env, loaded):
    result = flops_fit_cli(site, "models", **env)
    assert result.returncode == 0, result.stderr
    assert ("mlp-lm" in result.stdout) is loaded


def test_every_broken_plugin_prints_one_line_and_the_rest_keeps_working(site):
    result = flops_fit_cli(site, "models")
    assert result.returncode == 0, result.stderr
    assert "mlp-lm" in result.stdout  # the good third-party plugin
    lines = result.stderr.splitlines()
    assert len(lines) == len(BROKEN), result.stderr
    for name, (stage, message, _) in BROKEN.items():
        (line,) = [ln for ln in lines if f"plugin {name!r}" in ln]
        assert f"(flops-fit-{name} 0.0.1) failed at {stage}: " in line
        assert message in line
        assert f"FLOPS_FIT_DISABLE_PLUGINS={name} or `pip uninstall flops-fit-{name}`" in line


def test_plugins_command_shows_status_and_errors(site):
    result = flops_fit_cli(site, "plugins")
    assert result.returncode == 0
    for name, (stage, message, _) in BROKEN.items():
        assert f"{name}: error at {stage}: " in result.stdout and message in result.stdout
    assert "example" in result.stdout and "loaded" in result.stdout
    blocked = flops_fit_cli(site, "plugins", FLOPS_FIT_DISABLE_PLUGINS="broken-import")
    assert "broken-import: blocked: disabled by FLOPS_FIT_DISABLE_PLUGINS" in blocked.stdout
    assert "broken-import" not in blocked.stderr


def test_strict_mode_fails_the_command_naming_the_plugin(site):
    result = flops_fit_cli(site, "models", FLOPS_FIT_STRICT_PLUGINS="1", FLOPS_FIT_LOAD_PLUGINS="example,broken-raises")
    assert result.returncode == 2
    assert "flops-fit: error: plugin 'broken-raises'" in result.stderr
    assert "OSError: cannot reach the data server" in result.stderr

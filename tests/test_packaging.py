"""The wheel keeps built-ins and parity inside the flops_fit namespace, and ships every module."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_source_package_is_listed_in_pyproject():
    setuptools = PYPROJECT["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    # sub-packages of a mapped folder are mapped with it; every one must be listed
    assert found <= listed | set(setuptools["package-dir"]), f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_wheel_has_no_top_level_plugins_or_parity(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("flops_fit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert "plugins" not in top and "parity" not in top
    assert {t for t in top if not t.endswith(".dist-info")} == {"flops_fit"}
    assert "flops_fit/plugins/__init__.py" in names and "flops_fit/parity/__init__.py" in names
    sources = {
        f"flops_fit/{sub + '/' if sub else ''}{p.relative_to(ROOT / folder)}"
        for folder, sub in (("flops_fit", ""), ("plugins", "plugins"), ("parity", "parity"))
        for p in (ROOT / folder).rglob("*.py")
    }
    assert sources <= set(names), f"missing from the wheel: {sorted(sources - set(names))}"
    assert "flops_fit/sweeps/demo_hparams/gpt.json" in names  # the demo's tuned law (package data)
    assert "flops_fit/fitting/validation/priors/forecast_prior.json" in names  # the forecast's prior
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "flops-fit = flops_fit.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

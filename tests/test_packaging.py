"""The wheel keeps built-ins and parity inside the flops_fit namespace, and ships every module;
the sdist holds what the wheel is built from, and no tests."""

import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the installed folders and where their files land in the wheel
FOLDERS = (("flops_fit", "flops_fit"), ("plugins", "flops_fit/plugins"), ("parity", "flops_fit/parity"))
# what a checkout holds beside its sources that no build reads
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
                                    "site", "demo-out", "flops-fit-out")


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist, and the wheel pip builds from it (as `python -m build` and `pip install SDIST` do).
    Built from a copy: a build writes build/ and *.egg-info beside the sources, and tests run side by side."""
    out = tmp_path_factory.mktemp("dist")
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
                    str(out)], cwd=source, check=True, capture_output=True)
    (sdist,) = out.glob("flops_fit-*.tar.gz")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(out), str(sdist)],
        check=True, capture_output=True,
    )
    (wheel,) = out.glob("flops_fit-*.whl")
    return sdist, wheel


def package_files() -> dict[str, str]:
    """The installed folders' files (modules and the data the code opens): path in the checkout -> in the wheel."""
    return {f"{folder}/{rel}": f"{target}/{rel}" for folder, target in FOLDERS for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts for rel in [p.relative_to(ROOT / folder).as_posix()]}


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


def test_wheel_has_no_top_level_plugins_or_parity(dist):
    _, wheel = dist
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert "plugins" not in top and "parity" not in top
    assert {t for t in top if not t.endswith(".dist-info")} == {"flops_fit"}
    assert "flops_fit/plugins/__init__.py" in names and "flops_fit/parity/__init__.py" in names
    sources = {wheeled for wheeled in package_files().values() if wheeled.endswith(".py")}
    assert sources <= set(names), f"missing from the wheel: {sorted(sources - set(names))}"
    assert "flops_fit/sweeps/demo_hparams/gpt.json" in names  # the demo's tuned law (package data)
    assert "flops_fit/fitting/validation/priors/forecast_prior.json" in names  # the forecast's prior
    data = {wheeled for wheeled in package_files().values() if not wheeled.endswith(".py")}  # what the code opens
    assert data <= set(names), f"add to [tool.setuptools.package-data]: {sorted(data - set(names))}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "flops-fit = flops_fit.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_sdist_holds_the_sources_and_data_but_no_tests(dist):
    """setuptools put tests/test*.py in the sdist by default, without conftest.py or tests/data/:
    a suite that could not run, shipped to every user who installs from source."""
    sdist, _ = dist
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {n.split("/")[0] for n in names} == {"PKG-INFO", "README.md", "pyproject.toml", "setup.cfg", "MANIFEST.in",
                                               "flops_fit", "flops_fit.egg-info", "plugins", "parity"}
    shipped = set(package_files())
    assert shipped <= names, f"missing from the sdist: {sorted(shipped - names)}"

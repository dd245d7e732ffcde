"""The suites from an installed wheel, with no checkout: ``pip wheel .`` → a fresh environment that
holds that wheel and not the source tree → ``pytest --pyargs dpbench.suites`` saves a run that
``dpbench report`` renders. The measuring plugin comes from the wheel's ``pytest11`` entry point;
nothing from the checkout is importable there (asserted, not assumed).

The fresh environment borrows the dependencies (torch, pytest, …) of the running one through a
path entry: installing them again would take minutes and test pip, not dpbench. A path entry
is not a site directory, so the running environment's editable install of dpbench (a ``.pth``
hook) is not loaded there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


# What setuptools prints when the package configuration is ambiguous (a data folder that is not a
# listed package, data installed by accident): any of it in a build's output is noise a user reads
# on every set-up, and a configuration a later setuptools may build differently.
PACKAGING_WARNINGS = ("BuildBackendWarning", "SetuptoolsDeprecationWarning", "absent from the `packages`", "_Warning:")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The wheel ``pip wheel .`` builds from the checkout, and everything the build printed."""
    work = tmp_path_factory.mktemp("wheel")
    # Not -q: pip shows the build backend's warnings only when it is not told to be quiet.
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "dist"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (work / "dist").glob("torch_dpbench-*.whl")
    return wheel, build.stdout + build.stderr


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Path:
    """A fresh environment's python with the built wheel and the running environment's dependencies."""
    wheel, _ = built
    work = tmp_path_factory.mktemp("env")
    venv.EnvBuilder(with_pip=False).create(work / "env")
    python = work / "env" / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    put = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert put.returncode == 0, put.stderr[-3000:]
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _run(python: Path, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DPBENCH_"))}
    env.pop("PYTHONPATH", None)
    env["DPBENCH_TRIALS"] = "2"
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_building_the_wheel_prints_no_packaging_warning(built):
    _, output = built
    assert [line for line in output.splitlines() if any(w in line for w in PACKAGING_WARNINGS)] == [], output


def test_an_editable_install_builds_without_a_packaging_warning(tmp_path):
    """``pip install -e .`` (the checkout's set-up) asks the build backend for an editable wheel;
    asked directly, it prints what pip would show, and installs nothing."""
    build = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output[-3000:]
    assert list(tmp_path.glob("torch_dpbench-*.whl")), output[-3000:]
    assert [line for line in output.splitlines() if any(w in line for w in PACKAGING_WARNINGS)] == [], output


def test_the_wheel_holds_every_file_of_the_package_and_the_suites(installed):
    """Every tracked file under dpbench/ (templates, scripts of the report) and suites/ is in the
    installed package: a file left out of the package data breaks only an installed dpbench."""
    tracked = subprocess.run(
        ["git", "ls-files", "dpbench", "suites"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    site = installed.parent.parent / "lib"
    (package,) = site.glob("python*/site-packages/dpbench")
    shipped = {
        str(p.relative_to(package.parent)) for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    wanted = {("dpbench/" + f) if f.startswith("suites/") else f for f in tracked}
    assert wanted - shipped == set()


def test_the_installed_wheel_runs_the_suites_and_its_run_renders(installed, tmp_path):
    where = _run(
        installed,
        [
            "-c",
            "import dpbench, dpbench.suites, dpbench.measure.plugin as p; "
            "print(dpbench.__file__); print(p.suites_dir())",
        ],
        tmp_path,
        60,
    )
    assert where.returncode == 0, where.stderr
    module, suites = where.stdout.split()
    assert not module.startswith(str(ROOT)) and not suites.startswith(str(ROOT)), where.stdout  # the wheel's
    assert Path(suites, "test_throughput.py").is_file()

    proc = _run(
        installed,
        [
            "-m",
            "pytest",
            "--pyargs",
            "dpbench.suites",
            "-k",
            "test_throughput and ddp and mlp",
            "-p",
            "no:cacheprovider",
            "--benchmark-save=x",
        ],
        tmp_path,
        600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "1 passed" in out and "measuring 1 cases × 2 trials" in out, out[-4000:]
    (saved,) = (tmp_path / "results").glob("*/0001_x.json")  # the plugin saves where dpbench reads
    run = json.loads(saved.read_text())
    (bench,) = run["benchmarks"]
    assert bench["name"] == "test_throughput[ddp-mlp-w2]"
    assert bench["fullname"] == "suites/test_throughput.py::test_throughput[ddp-mlp-w2]"  # as a checkout's run names it
    assert bench["extra_info"]["strategy"] == "ddp" and bench["extra_info"]["trials"]["count"] == 2
    assert len(bench["stats"]["data"]) > 0  # the per-round data, as a checkout's pyproject.toml saves it
    print(bench["fullname"])

    report = _run(
        installed,
        ["-c", "import sys; from dpbench.cli import main; sys.exit(main())", "report", "-o", "report.html"],
        tmp_path,
        300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    page = (tmp_path / "report.html").read_text()
    assert "ddp" in page and "<img" in page

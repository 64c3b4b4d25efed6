"""What a user gets from ``python -m build``: an sdist that builds, a wheel that installs into a
fresh virtual environment and runs ``pumpd check``, and a wheel without the extension (built
with ``PUMPD_NO_EXT=1``) that runs on the reference data plane with the documented warning.

About 50 s on 2 cores (two builds in isolated environments, two venvs; the package index is
needed for the build and runtime dependencies): not marked slow, under a minute."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = ROOT / "contrib" / "pumpd.json"
# The checkout's sources, copied so that building writes nothing into the checkout.
SOURCES = ("src", "tests", "contrib", "tools", "docs", "setup.py", "pyproject.toml", "README.md",
           "MANIFEST.in", "Makefile")
IGNORED = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "_fastpath.c",
                                 "_fastpath.html", ".pytest_cache")
WARNING = "pumpd's native extension is not built"
IMPLEMENTATION = "import pumpd.dataplane.implementation as f; print(f.IMPLEMENTATION)"

def run(*argv: str | Path, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # A fresh venv sees what was installed into it only: a PYTHONPATH of the caller's (a
    # checkout's own pumpd on the path) would be imported instead.
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600,
                          env={**inherited, **(env or {})}, cwd=cwd)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A new venv with ``wheel`` installed from the package index; its python."""
    run(sys.executable, "-m", "venv", where)
    python = where / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", wheel)
    return python


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("pumpd-source")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=IGNORED)
        elif src.exists():
            shutil.copy2(src, copy / name)
    return copy


def test_sdist_builds_a_wheel_that_installs_and_runs(source_copy: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # `python -m build` makes the sdist, then builds the wheel from the unpacked sdist
    run(sys.executable, "-m", "build", "--outdir", dist, source_copy)
    (sdist,) = dist.glob("pumpd-*.tar.gz")
    (wheel,) = dist.glob("pumpd-*.whl")
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    for needed in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "src/_fastpath.pyx",
                   "src/_fastpath.pyi", "src/http/status_page.html", "contrib/pumpd.service",
                   "tests/conftest.py"):
        assert needed in members, needed
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    assert any(n.startswith("pumpd/_fastpath.") and n.endswith(".so") for n in names), names
    for needed in ("pumpd/http/status_page.html", "pumpd/_fastpath.pyi", "pumpd/py.typed"):
        assert needed in names, needed

    python = fresh_venv(tmp_path / "venv", wheel)
    check = run(python.with_name("pumpd"), "check", "--config", SAMPLE_CONFIG, cwd=tmp_path)
    assert check.stdout.startswith("orders-to-backup: queue orders on "), check.stdout
    implementation = run(python, "-c", IMPLEMENTATION, cwd=tmp_path)
    assert implementation.stdout == "native\n"
    assert WARNING not in implementation.stderr


def test_a_wheel_without_the_extension_runs_on_the_reference(
    source_copy: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, source_copy,
        env={"PUMPD_NO_EXT": "1"})
    (wheel,) = dist.glob("pumpd-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        assert not [n for n in whl.namelist() if n.endswith(".so")]

    python = fresh_venv(tmp_path / "venv", wheel)
    check = run(python.with_name("pumpd"), "check", "--config", SAMPLE_CONFIG, cwd=tmp_path)
    assert check.stdout.startswith("orders-to-backup: "), check.stdout
    implementation = run(python, "-c", IMPLEMENTATION, cwd=tmp_path)
    assert implementation.stdout == "reference\n"
    assert WARNING in implementation.stderr, implementation.stderr

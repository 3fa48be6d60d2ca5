"""Suite-wide settings: hypothesis profiles, strict tables, the `gpu` marker, the `device` fixture.

- Hypothesis profile "gpu" (40 examples) when CUDA is available, else "ci" (15 examples, keeps the
  CPU run in CI short); HYPOTHESIS_PROFILE=<name> picks one explicitly.
- QWEN38_STRICT_TABLES=1: a weight shape without a tile-table entry raises instead of warning.
- QWEN38_POISON_OUTPUTS=1: every CUDA op output starts filled with NaN.
- Tests marked `gpu` (and the "cuda" case of the `device` fixture) are skipped without CUDA.
- `host_emulator`: builds a kernel's host emulation (tests/native/<name>.cpp) once per session.
- Under pytest-xdist each worker's torch takes its share of the cores (the CPU references of the GPU
  tests are heavy; N workers of all-core torch oversubscribe the machine N times).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import settings

os.environ["QWEN38_STRICT_TABLES"] = "1"
os.environ["QWEN38_POISON_OUTPUTS"] = "1"  # CUDA outputs start as NaN: unwritten elements show

HAS_CUDA = torch.cuda.is_available()

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

settings.register_profile("ci", deadline=None, max_examples=15, print_blob=True)
settings.register_profile("gpu", deadline=None, max_examples=40, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "gpu" if HAS_CUDA else "ci")
settings.load_profile(HYPOTHESIS_PROFILE)


def devices() -> list:
    """Parametrize values for a device argument: "cpu", and "cuda" carrying the `gpu` marker (so a
    machine without CUDA lists it as skipped rather than silently dropping it)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=devices())
def device(request) -> str:
    return request.param


@pytest.fixture
def skinny_variant():
    """set(op, n, k, ksplit, nt): registers a launch variant of a skinny kernel (nt tiles a warp at
    every row count); the tile tables are registered again afterwards."""
    from qwen38_kernels import _C, tables

    def set_(op, n, k, ks, nt):
        _C.set_skinny_variant(op, n, k, ks, nt, nt)

    yield set_
    tables.register_skinny_tables()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    dev = torch.cuda.get_device_name() if HAS_CUDA else "none"
    return f"qwen38: torch {torch.__version__}, CUDA device: {dev}, hypothesis profile: {HYPOTHESIS_PROFILE}"


def _cuda_include() -> str | None:
    """The CUDA toolkit's include directory (cuda_bf16.h for the host compiler), or None."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "include", "cuda_bf16.h")):
            return os.path.join(c, "include")
    return None


@pytest.fixture(scope="session")
def host_emulator(tmp_path_factory):
    """``build(name)``: compiles tests/native/<name>.cpp (a kernel source run on the host) with g++
    (IEEE float, no contraction) once per session and returns the executable; skips the test when
    g++ or the CUDA headers are missing."""
    root = Path(__file__).resolve().parent.parent
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            inc = _cuda_include()
            if shutil.which("g++") is None or inc is None:
                pytest.skip("needs g++ and the CUDA headers")
            exe = tmp_path_factory.mktemp(name) / name
            subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-Wno-unknown-pragmas",
                            "-I", str(root / "csrc"), "-I", inc, str(root / "tests" / "native" / f"{name}.cpp"),
                            "-o", str(exe)], check=True, capture_output=True)
            built[name] = exe
        return built[name]

    return build

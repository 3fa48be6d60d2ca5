"""Build qwen38_kernels._C ahead of time (ninja, TORCH_CUDA_ARCH_LIST, default "9.0a;12.1a").

The CUDA toolkit is located before torch.utils.cpp_extension is imported, because that module fixes
CUDA_HOME at import time. A toolkit without the cuBLAS/cuSPARSE headers that torch's headers include
is completed from torch's own pip packages (site-packages/nvidia/cu13/include and friends).
"""
import glob
import os
import shutil
import site
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCH_LIST = "9.0a;12.1a"


def _die(msg):
    sys.stderr.write("\n[qwen38-kernels setup] ERROR: " + msg + "\n\n")
    raise SystemExit(1)


def _find_cuda_home():
    """CUDA_HOME if it holds bin/nvcc, else the toolkit around the nvcc on PATH, else /usr/local/cuda."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        cands.append(os.path.dirname(os.path.dirname(real)))
        # some images put a wrapper script in /usr/local/bin: read the toolkit out of it
        try:
            with open(nvcc, "r", errors="ignore") as f:
                head = f.read(4096)
            for tok in head.replace('"', " ").split():
                if tok.endswith("/bin/nvcc"):
                    cands.append(os.path.dirname(os.path.dirname(tok)))
        except OSError:
            pass
    cands += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in cands:  # a toolkit has both the compiler and the runtime headers
        if c and os.path.isfile(os.path.join(c, "bin", "nvcc")) and \
                os.path.isfile(os.path.join(c, "include", "cuda_runtime.h")):
            return c
    return None


def _pip_cuda_include_dirs():
    """Header folders of the nvidia-* pip packages that a CUDA build of torch depends on."""
    dirs = []
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        for pat in ("nvidia/cu13/include", "nvidia/*/include"):
            dirs += sorted(glob.glob(os.path.join(sp, pat)))
    return [d for d in dirs if os.path.isdir(d)]


def _cublaslt_library(cuda_home):
    """(folder, file) of a cuBLASLt shared library to link - the nvidia-cublas pip package's that torch
    itself loads, else the toolkit's (either carries the soname torch's does) - or None: the build then
    has no cuBLASLt path (nvfp4_linear's dequant prefill takes its fp32 GEMM + epilogue kernel)."""
    dirs = []
    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        for pat in ("nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/*/lib"):
            dirs += sorted(glob.glob(os.path.join(sp, pat)))
    dirs += [os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib"),
             os.path.join(cuda_home, "targets", "x86_64-linux", "lib"), os.path.join(cuda_home, "targets", "sbsa-linux", "lib")]
    for d in dirs:
        libs = sorted(glob.glob(os.path.join(d, "libcublasLt.so*")), key=len)
        if libs:
            return d, os.path.basename(libs[0])
    return None


def _missing_headers(include_dirs, names):
    return [n for n in names if not any(os.path.isfile(os.path.join(d, n)) for d in include_dirs)]


cuda_home = _find_cuda_home()
if cuda_home is None:
    _die("nvcc was not found. Install a CUDA toolkit (12.9 or 13.x) and either put its bin/ on PATH "
         "or set CUDA_HOME to the toolkit folder (the one that holds bin/nvcc).")
os.environ["CUDA_HOME"] = cuda_home
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCH_LIST)

import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

if torch.version.cuda is None:
    _die(f"torch {torch.__version__} is a CPU-only build; qwen38-kernels needs a CUDA 12.9+ or 13 build "
         "of torch (pip install torch from the CUDA index).")

include_dirs = [os.path.join(ROOT, "csrc")]
cxx_after = []
toolkit_inc = [os.path.join(cuda_home, "include"),
               os.path.join(cuda_home, "targets", "x86_64-linux", "include"),
               os.path.join(cuda_home, "targets", "sbsa-linux", "include")]
needed = ["cuda_runtime.h", "cublas_v2.h", "cusparse.h", "cuda_bf16.h", "cuda_fp8.h"]
if _missing_headers(toolkit_inc, needed):
    extra = _pip_cuda_include_dirs()
    still = _missing_headers(toolkit_inc + extra, needed)
    if still:
        _die(f"the CUDA toolkit at {cuda_home} lacks {', '.join(still)} and torch's pip packages "
             "(nvidia-cublas, nvidia-cusparse, ...) do not provide them either. Install the full toolkit "
             "or the nvidia-*-cu13 pip packages that match your torch.")
    # searched after every -I folder (-idirafter), so the toolkit's own headers win where both have
    # one; only host code (the .cpp launchers, which include torch) needs them
    for d in extra:
        cxx_after += ["-idirafter", d]

lt = _cublaslt_library(cuda_home)
if lt is not None and _missing_headers(toolkit_inc + _pip_cuda_include_dirs(), ["cublasLt.h"]):
    lt = None
link_args = [f"-L{lt[0]}", f"-l:{lt[1]}"] if lt else []

arch_list = os.environ["TORCH_CUDA_ARCH_LIST"]
print(f"[qwen38-kernels setup] CUDA_HOME={cuda_home}  TORCH_CUDA_ARCH_LIST={arch_list}  "
      f"torch={torch.__version__} (CUDA {torch.version.cuda})  cuBLASLt={os.path.join(*lt) if lt else 'none'}")

sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True)
                 + glob.glob(os.path.join("csrc", "**", "*.cu"), recursive=True))

nvcc_flags = [
    "-O3", "--expt-relaxed-constexpr",
    # no --use_fast_math: rounding points are part of the contract (DESIGN.md)
    "-Xptxas=-warn-spills", "-lineinfo",
]
# No -std: torch's build helper adds the standard its own headers were built with (C++17 for older
# torch, C++20 for newer); forcing another one changes the layout of c10 types across the ABI.
cxx_flags = ["-O3", f"-DQWEN38_HAVE_CUBLASLT={1 if lt else 0}"] + cxx_after

# What info() reports about this build; generated, never committed.
with open(os.path.join(ROOT, "qwen38_kernels", "_build_info.py"), "w") as f:
    f.write("# generated by setup.py at build time\n")
    f.write(f"ARCH_LIST = {arch_list!r}\n")
    f.write(f"TORCH_VERSION = {torch.__version__!r}\n")
    f.write(f"CUDA_VERSION = {torch.version.cuda!r}\n")
    f.write(f"CUBLASLT = {os.path.join(*lt) if lt else None!r}\n")

max_jobs = os.environ.get("MAX_JOBS")
if max_jobs is None:
    os.environ["MAX_JOBS"] = str(max(1, os.cpu_count() or 1))

class build_py_with_tables(build_py):
    """Ships the repository's tables/<arch>/<op>.json as package data (qwen38_kernels/tables/...), so
    a wheel finds them; an editable install reads them from the repository (qwen38_kernels/tables.py)."""

    def run(self):
        super().run()
        for src in sorted(glob.glob(os.path.join(ROOT, "tables", "*", "*.json"))):
            rel = os.path.relpath(src, os.path.join(ROOT, "tables"))
            dst = os.path.join(self.build_lib, "qwen38_kernels", "tables", rel)
            self.mkpath(os.path.dirname(dst))
            self.copy_file(src, dst)


setup(
    name="qwen38-kernels",
    packages=find_packages(include=["qwen38_kernels", "qwen38_kernels.*"]),
    ext_modules=[
        CUDAExtension(
            name="qwen38_kernels._C",
            sources=sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
            extra_link_args=link_args,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "build_py": build_py_with_tables},
)

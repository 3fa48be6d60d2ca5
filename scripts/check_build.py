"""Checks that the built extension holds machine code for every architecture it was asked for.

    python scripts/check_build.py [--arch-list "9.0a;12.1a"]

Lists the cubins inside qwen38_kernels/_C*.so with cuobjdump and fails unless every kernel
translation unit has one per requested architecture (e.g. norm_kernel.sm_90a.cubin and
norm_kernel.sm_121a.cubin). The default list is the one the build recorded.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch-list", default=None)
    args = ap.parse_args()
    sys.path.insert(0, root)
    arch_list = args.arch_list
    if arch_list is None:
        from qwen38_kernels import _build_info
        arch_list = _build_info.ARCH_LIST
    want = sorted({"sm_" + a.strip().split("+")[0].replace(".", "") for a in arch_list.replace(",", ";").split(";") if a.strip()})
    sos = glob.glob(os.path.join(root, "qwen38_kernels", "_C*.so"))
    if not sos:
        print("check_build: qwen38_kernels/_C*.so not found: build first"); return 1
    try:
        tool = subprocess.check_output(["bash", os.path.join(here, "find_cuobjdump.sh")], text=True).strip()
    except subprocess.CalledProcessError:
        print("check_build: no cuobjdump found (PATH, CUDA_HOME, or triton's wheel)"); return 1
    listing = subprocess.check_output([tool, "--list-elf", sos[0]], text=True)
    cubins = re.findall(r"(\S+)\.(sm_\w+)\.cubin", listing)
    units = sorted({u for u, _ in cubins})
    have = {(u, a) for u, a in cubins}
    missing = [f"{u}.{a}" for u in units for a in want if (u, a) not in have]
    print(f"check_build: {os.path.basename(sos[0])}: kernel units {units}, archs wanted {want}")
    for u in units:
        print(f"  {u}: " + ", ".join(sorted(a for uu, a in cubins if uu == u)))
    if not units or missing:
        print("check_build: MISSING " + (", ".join(missing) if missing else "every kernel unit"))
        return 1
    print("check_build: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

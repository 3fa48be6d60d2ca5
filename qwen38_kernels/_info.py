"""``info()`` and ``check()``: what this build is and whether its ops answer to their references."""
from __future__ import annotations

import torch

from . import __version__, knobs, tables


def _build() -> dict:
    try:
        from . import _build_info as b
        return {"arch_list": b.ARCH_LIST, "built_with_torch": b.TORCH_VERSION, "built_with_cuda": b.CUDA_VERSION,
                "cublaslt": getattr(b, "CUBLASLT", None)}
    except ImportError:
        return {"arch_list": None, "built_with_torch": None, "built_with_cuda": None, "cublaslt": None}


def _device() -> dict:
    if not torch.cuda.is_available():
        return {"name": None, "served": False, "note": "no CUDA device: only the CPU path (references) runs"}
    from . import _C
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    probe = _C.probe_device()
    d = {"name": props.name, "index": idx, "capability": f"{props.major}.{props.minor}",
         "sms": props.multi_processor_count}
    if isinstance(probe, str):
        d.update(served=False, note=f"this build has no kernel image for sm_{props.major}{props.minor}: {probe}")
    else:
        binary, ptx = probe
        d.update(served=True, binary=f"sm_{binary}", ptx=f"compute_{ptx}")
    return d


def info() -> dict:
    """Version, compiled architectures, the current device and whether it is served, the knobs in
    force and the tile tables found."""
    return {
        "version": __version__,
        "torch": torch.__version__,
        **_build(),
        "device": _device(),
        "knobs": knobs.in_force(),
        "tables": [f"{a}/{o}" for (a, o) in tables.find_tables()],
    }


def format_info(i: dict) -> str:
    dev = i["device"]
    if dev.get("name"):
        dline = f"{dev['name']} (sm_{dev['capability'].replace('.', '')}, {dev['sms']} SMs): " + (
            f"served by {dev['binary']} machine code" if dev["served"] else f"NOT served - {dev['note']}")
    else:
        dline = dev["note"]
    knob_lines = [f"    {k}={v}" + ("" if v == knobs.KNOBS[k].default else "   (default " + knobs.KNOBS[k].default + ")")
                  for k, v in i["knobs"].items()]
    return "\n".join([
        f"qwen38-kernels {i['version']}  (torch {i['torch']}; built with torch {i['built_with_torch']}, "
        f"CUDA {i['built_with_cuda']})",
        f"  compiled for:  {i['arch_list']}",
        f"  device:        {dline}",
        "  knobs:",
        *knob_lines,
        f"  tile tables:   {', '.join(i['tables']) or '(none yet)'}",
    ])


def check(devices: tuple[str, ...] | None = None, verbose: bool = False):
    """Runs every op check (GPU ones when a served CUDA device is present, CPU ones always) and
    returns the list of CheckResult; ``all(r.ok for r in ...)`` is the verdict."""
    from . import checks
    if devices is None:
        devices = ("cpu", "cuda") if torch.cuda.is_available() and _device().get("served") else ("cpu",)
    results = checks.run_all(devices)
    if verbose:
        for r in results:
            print(f"  [{'PASS' if r.ok else 'FAIL'}] {r.device:4s} {r.name}: {r.detail}  ({r.seconds:.1f} s)")
    return results

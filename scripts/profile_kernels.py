"""Runs one kernel case a few times, for a profiler (ncu) to capture; no timing of its own.

    ncu --kernel-name regex:skinny --launch-skip 2 --launch-count 1 python3 scripts/profile_kernels.py nvfp4 1

Cases: nvfp4 M [N K], fp8 M [N K], head M, step B, chain T, tree N, treechain T (a chain-shaped
tree, node i's parent i - 1, unsplit), rms M [H], add M [H], gated M. Random data of the real shapes
(weights are random bytes: their values do not change the work a kernel does).
"""
from __future__ import annotations

import sys

import torch

import qwen38_kernels  # noqa: F401  (registers torch.ops.qwen38)

OPS = torch.ops.qwen38
DEV = "cuda"


def _x(m: int, k: int) -> torch.Tensor:
    return torch.randn(m, k, device=DEV, dtype=torch.bfloat16)


def random_nvfp4(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random packed e2m1 bytes, finite e4m3 block scales and a global scale of an [n, k] weight."""
    w = torch.randint(0, 256, (n, k // 2), device=DEV, dtype=torch.uint8)
    s = (torch.rand(n, k // 16, device=DEV) * 2 + 0.5).to(torch.float8_e4m3fn)
    return w, s, torch.tensor([0.01], device=DEV)


def random_fp8(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random e4m3 [n, k] weight and its 128x128 block scales."""
    w = (torch.randn(n, k, device=DEV) * 0.5).to(torch.float8_e4m3fn)
    return w, torch.rand((n + 127) // 128, (k + 127) // 128, device=DEV) + 0.5


def case(name: str, a: int, n: int | None = None, k: int = 5120):
    if name == "nvfp4":
        w, s, gs = random_nvfp4(n or 34816, k)
        x = _x(a, k)
        return lambda: OPS.nvfp4_linear(x, w, s, gs, None, None)
    if name == "fp8":
        w, s = random_fp8(n or 34816, k)
        x = _x(a, k)
        return lambda: OPS.fp8_block_linear(x, w, s, None, None)
    if name == "head":
        w = torch.randn(248320, 5120, device=DEV, dtype=torch.bfloat16)
        x = _x(a, 5120)
        return lambda: OPS.head_logits(x, w)
    if name in ("rms", "add", "gated"):
        h = 128 if name == "gated" else n or 5120
        lead = (a, 48) if name == "gated" else (a,)
        x = torch.randn(*lead, h, device=DEV, dtype=torch.bfloat16)
        r = torch.randn_like(x)
        w = torch.randn(h, device=DEV, dtype=torch.bfloat16)
        if name == "rms":
            return lambda: OPS.rms_norm(x, w, 1e-6, True)
        if name == "add":
            return lambda: OPS.add_rms_norm(x, r, w, 1e-6, True)
        return lambda: OPS.rms_norm_gated(x, r, w, 1e-6)
    bf = torch.bfloat16
    t = 1 if name == "step" else a
    b = a if name == "step" else 1
    q, kk = (torch.randn(b, t, 16, 128, device=DEV).to(bf) for _ in range(2))
    v = torch.randn(b, t, 48, 128, device=DEV).to(bf)
    g = -torch.rand(b, t, 48, device=DEV) * 0.5
    beta = torch.sigmoid(torch.randn(b, t, 48, device=DEV)).to(bf)
    pool = torch.randn(b, 48, 128, 128, device=DEV) * 0.05
    slots = torch.arange(b, device=DEV, dtype=torch.int32)
    if name == "step":
        return lambda: OPS.gdn_step(q[:, 0], kk[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)
    if name == "chain":
        return lambda: OPS.gdn_chain_verify(q, kk, v, g, beta, pool, slots)
    if name == "tree":
        sys.path.insert(0, "benchmarks")
        from bench_gdn import tree_parents
        par = torch.tensor([tree_parents(t)], device=DEV, dtype=torch.int32)
        return lambda: OPS.gdn_tree_verify(q, kk, v, g, beta, pool, slots, par)
    if name == "treechain":
        from qwen38_kernels.bench import with_knobs
        par = torch.arange(-1, t - 1, device=DEV, dtype=torch.int32)[None]
        unsplit = with_knobs(OPS.gdn_tree_verify, QWEN38_GDN_TREE_SPLIT="1")
        return lambda: unsplit(q, kk, v, g, beta, pool, slots, par)
    raise SystemExit(f"unknown case {name!r}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    fn = case(argv[0], *(int(a) for a in argv[1:]))
    for _ in range(4):
        fn()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

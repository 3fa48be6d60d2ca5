"""The register-stream skinny kernels with each output tile's k-split warps spread over a cluster
(QWEN38_SKINNY_CLUSTER, csrc/gemm/stream_launch.cuh), side by side with one CTA a tile and with the
ring/skinny kernel (a lab): us per call of the model's small weights (K = 5120, k split 8; --big:
the 5120-row weights of K 6144 and 17408) at 1..32 rows, for every tiles-per-warp choice,
graph-timed back to back on rotating cold weights (qwen38_kernels.sweep's timing). Every configuration writes the same bits (tests/test_skinny_variants.py).

    python benchmarks/lab/cluster_ab.py [--out FILE.md] [--quick] [--big]
"""
from __future__ import annotations

import argparse

import torch

from qwen38_kernels import _C, bench, knobs, sweep

SHAPES = ((48, 5120), (96, 5120), (1024, 5120))
BIG = ((5120, 6144), (5120, 17408))  # --big: the 5120-row weights (160 tiles at 4 a warp)
ROWS = (1, 8, 16, 17, 32)
STREAM_OFF = {"nvfp4_linear": "QWEN38_NVFP4_STREAM", "fp8_block_linear": "QWEN38_FP8_STREAM"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="clusters 1 / auto and the ring only")
    ap.add_argument("--big", action="store_true", help="the 5120-row weights (K 6144, 17408) at 2 and 4 tiles a warp")
    a = ap.parse_args(argv)
    configs = {"ring": None, "cl 1": "1", "auto": "auto"}
    if not a.quick:
        configs.update({"cl 2": "2", "cl 4": "4", "cl 8": "8"})
    head = " | ".join(configs)
    lines = [f"# Skinny kernels in clusters, us per call ({bench.gpu_name()}, graph-timed, cold weights)", "",
             "ring = the ring (NVFP4) / skinny (FP8) kernel; cl C = the stream kernel in clusters of C CTAs a "
             "tile; auto = the launcher's rule.", "",
             f"| op | shape | nt | rows | {head} |", "|---|---|---|---|" + "---|" * len(configs)]
    shapes, nts = (BIG, (2, 4)) if a.big else (SHAPES, (1, 2, 4))
    x = torch.randn(32, max(k for _, k in shapes), device="cuda", dtype=torch.bfloat16)
    for op in ("nvfp4_linear", "fp8_block_linear"):
        fn = sweep._call(op)
        saved = {s: _C.skinny_variant(op, *s) for s in shapes}
        try:
            for n, k in shapes:
                weights = sweep.make_weights(op, n, k)
                xk = x[:, :k].contiguous()
                for nt in nts:
                    if n % (8 * nt):
                        continue
                    _C.set_skinny_variant(op, n, k, 8, nt, nt)
                    for m in ROWS:
                        us = {}
                        for c, v in configs.items():
                            kn = {STREAM_OFF[op]: "0"} if v is None else {"QWEN38_SKINNY_CLUSTER": v}
                            with knobs.override(**kn):
                                us[c] = sweep._time(fn, op, n, k, m, weights, xk)
                        cells = " | ".join(f"{u:.2f}" for u in us.values())
                        lines.append(f"| {op} | {n}x{k} | {nt} | {m} | {cells} |")
                        print(op, n, nt, m, {c: round(u, 2) for c, u in us.items()}, flush=True)
        finally:
            for (n, k), (ks, ntn, ntw, pr, from_table) in saved.items():
                if from_table:
                    _C.set_skinny_variant(op, n, k, ks, ntn, ntw, pr)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

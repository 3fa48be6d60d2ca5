"""``python -m qwen38_kernels [--json FILE] [--no-bench]``: the main job.

Prints info(), runs check() for every op against its reference (PASS/FAIL and the error), and on a
GPU a short benchmark table of the Qwen3.8-27B decode shapes against the streaming-read ceiling
measured in the same run. Exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch


def _bench_summary(quick: bool = True) -> dict:
    from . import bench
    from .ops import add_rms_norm, fp8_block_linear, nvfp4_linear, rms_norm, rms_norm_gated

    ceiling = bench.measure_read_ceiling()
    rows = []

    def run(op, shape, m, fn, make, nbytes, n=None, k=None):
        copies = bench.rotating_copies(make, nbytes)
        us = bench.time_calls(fn, copies)
        rows.append(bench.Record.from_timing(op, "qwen38", shape, n, k, m, us, nbytes, ceiling))

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    for m in (1, 32):
        run("rms_norm", f"{m}x5120", m, lambda x, w: rms_norm(x, w),
            lambda i: (r(m, 5120), r(5120)), (2 * m + 1) * 5120 * 2)
        run("add_rms_norm", f"{m}x5120", m, lambda x, h, w: add_rms_norm(x, h, w),
            lambda i: (r(m, 5120), r(m, 5120), r(5120)), (4 * m + 1) * 5120 * 2)
        run("rms_norm_gated", f"{m}x48x128", m, lambda x, g, w: rms_norm_gated(x, g, w),
            lambda i: (r(m, 48, 128), r(m, 48, 128), r(128)), (3 * m * 48 + 1) * 128 * 2)
    def nvfp4_args(n, k, m):
        # timing needs valid codes and scales, not a quantized matrix: random bytes, scales 2^-6..2^1
        packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        scale = (2.0 ** torch.randint(-6, 2, (n, k // 16), device="cuda").float()).to(torch.float8_e4m3fn)
        return (r(m, k), packed, scale, torch.tensor(1e-3, device="cuda"))

    for n, k in ((34816, 5120), (5120, 17408), (1024, 5120)):
        for m in (1, 32):
            nbytes = n * k // 2 + n * k // 16 + 2 * m * (k + n)
            run("nvfp4_linear", f"{n}x{k}", m, lambda x, p, s, g: nvfp4_linear(x, p, s, g),
                lambda i, n=n, k=k, m=m: nvfp4_args(n, k, m), nbytes, n, k)
    def fp8_args(n, k, m):
        codes = torch.randint(0, 256, (n, k), dtype=torch.uint8, device="cuda") & 0x7E  # no NaN codes
        scale = torch.rand((n + 127) // 128, (k + 127) // 128, device="cuda") * 1e-3
        return (r(m, k), codes.view(torch.float8_e4m3fn), scale)

    for n, k in ((34816, 5120), (5120, 17408)):
        for m in (1, 32):
            nbytes = n * k + 4 * ((n + 127) // 128) * ((k + 127) // 128) + 2 * m * (k + n)
            run("fp8_block_linear", f"{n}x{k}", m, lambda x, w, s: fp8_block_linear(x, w, s),
                lambda i, n=n, k=k, m=m: fp8_args(n, k, m), nbytes, n, k)
    return {"ceiling_GBps": float(ceiling), "ceiling_method": ceiling.method,
            "records": [dataclasses.asdict(x) for x in rows]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwen38_kernels", description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE ('-' = stdout)")
    ap.add_argument("--no-bench", action="store_true", help="skip the benchmark table on a GPU")
    args = ap.parse_args(argv)

    import qwen38_kernels as q
    from ._info import format_info

    info = q.info()
    print(format_info(info))
    gpu = bool(info["device"].get("served"))
    if not torch.cuda.is_available():
        print("\nNo CUDA device here: checking the CPU path against float64 evaluations, the formats "
              "and the tables. The CUDA kernels are not run.")
    elif not gpu:
        print("\nThe CUDA device is not served by this build: checking the CPU path only.")

    print("\nchecks:")
    results = q.check(verbose=True)
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")

    report = {"info": info, "checks": [dataclasses.asdict(r) for r in results]}
    if gpu and not args.no_bench:
        from . import bench
        print("\nbenchmark (graph-timed, cold copies):")
        summary = _bench_summary()
        recs = [bench.Record(**d) for d in summary["records"]]
        print(f"streaming-read ceiling: {summary['ceiling_GBps']:.0f} GB/s ({summary['ceiling_method']})")
        print(bench.short_table(recs))
        report["bench"] = summary

    if args.json:
        text = json.dumps(report, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

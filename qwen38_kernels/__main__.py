"""``python -m qwen38_kernels [--json FILE] [--no-bench]``: the main job.

Prints info(), runs check() for every op against its reference (PASS/FAIL and the error), and on a
GPU a short benchmark table of the Qwen3.8-27B decode shapes against the streaming-read ceiling
measured in the same run (norms, silu_mul, NVFP4 and FP8 GEMMs, the output head, the GDN step and verifies,
the conv step and chain, decode attention; GDN and conv rows count the state and input bytes, latency-bound
at B = 1; attention rows the K and V of the sequence read once).
Exits 1 when a check fails; a benchmark row that fails is reported and does not change that.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch


def _gdn_args(b: int, t: int, seed: int, device: str = "cuda") -> tuple:
    """Random arguments of gdn_step (t = 0) or a verify of t tokens/nodes for b sequences, pool rows
    0..b-1 (the order of the ops' signatures: q, k, v, g, beta, state_pool, slots)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    lead = (b,) if t == 0 else (b, t)

    def rnd(*shape):
        return torch.randn(*shape, device=device, generator=gen)

    return (rnd(*lead, 16, 128).bfloat16(), rnd(*lead, 16, 128).bfloat16(), rnd(*lead, 48, 128).bfloat16(),
            -rnd(*lead, 48).abs() * 0.5, torch.sigmoid(rnd(*lead, 48)).bfloat16(),
            rnd(b, 48, 128, 128) * 0.05, torch.arange(b, device=device))


def _tree_parents_32(device: str = "cuda") -> torch.Tensor:
    """32 nodes in depth-first order: four chains of 8 hanging off the committed state (depth 8)."""
    return torch.tensor([[-1 if n % 8 == 0 else n - 1 for n in range(32)]], device=device)


def _conv_args(t: int, seed: int, device: str = "cuda") -> tuple:
    """Random arguments of conv_step (t = 0) or conv_chain (t tokens), one sequence in state row 0."""
    gen = torch.Generator(device=device).manual_seed(seed)
    c = 10240

    def rnd(*shape):
        return torch.randn(*shape, device=device, generator=gen).bfloat16()

    x = rnd(1, c) if t == 0 else rnd(1, t, c)
    return x, rnd(1, c, 3), rnd(c, 4), torch.zeros(1, dtype=torch.long, device=device)


def _attn_args(t: int, prefix: int, seed: int, device: str = "cuda") -> tuple:
    """Random arguments of attn_decode at the model's geometry (24 q / 4 kv heads of 256, bf16): one
    sequence, a chain of t rows whose keys follow a committed prefix (q, k_cache, v_cache, kv_lens)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    slots = prefix + t

    def rnd(*shape):
        return torch.randn(*shape, device=device, generator=gen).bfloat16()

    return (rnd(1, t, 24, 256), rnd(1, 4, slots, 256), rnd(1, 4, slots, 256),
            torch.tensor([slots], dtype=torch.int32, device=device))


def _bench_summary(quick: bool = True) -> dict:
    from . import bench
    from .ops import (add_rms_norm, attn_decode, conv_chain, conv_step, fp8_block_linear, gdn_chain_verify,
                      gdn_step, gdn_tree_verify, head_logits, nvfp4_linear, rms_norm, rms_norm_gated, silu_mul)

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
        run("silu_mul", f"{m}x(2x17408)", m, silu_mul, lambda i: (r(m, 2 * 17408),), 3 * m * 17408 * 2)
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
    errors = []

    def guarded(name, body):
        # a failing row is reported (printed and kept in the JSON), the other rows still run; the
        # exit status stays the checks' own
        try:
            body()
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {type(e).__name__}: {e}")
            print(f"benchmark of {name} failed: {type(e).__name__}: {e}", file=sys.stderr)

    def head_rows():
        v, k = 248320, 5120
        for m in (1, 32):
            run("head_logits", f"{v}x{k}", m, lambda x, w: head_logits(x, w), lambda i, m=m: (r(m, k), r(v, k)),
                v * k * 2 + m * k * 2 + m * v * 4, v, k)

    state_bytes = 48 * 128 * 128 * 4  # one sequence's fp32 state of a layer

    def gdn_rows():
        for b in (1, 8):  # the step reads and writes the state
            run("gdn_step", f"B={b}", b, lambda *a: gdn_step(*a), lambda i, b=b: _gdn_args(b, 0, i), 2 * b * state_bytes)
        run("gdn_chain_verify", "B=1 T=16", 1, lambda *a: gdn_chain_verify(*a), lambda i: _gdn_args(1, 16, i),
            state_bytes)
        parents = _tree_parents_32()
        run("gdn_tree_verify", "B=1 32 nodes", 1, lambda *a: gdn_tree_verify(*a, parents),
            lambda i: _gdn_args(1, 32, i), state_bytes)

    def conv_rows():
        c = 10240  # bytes: x and y, the state entries (read; and written by the step), the weights
        run("conv_step", "B=1", 1, lambda *a: conv_step(*a), lambda i: _conv_args(0, i), c * (2 * 2 + 2 * 3 * 2 + 4 * 2))
        run("conv_chain", "B=1 T=16", 1, lambda *a: conv_chain(*a), lambda i: _conv_args(16, i),
            c * (16 * 2 * 2 + 3 * 2 + 4 * 2))

    def attn_rows():
        prefix = 8192
        for t in (1, 16):  # bytes: the sequence's K and V read once, q read, o written
            run("attn_decode", f"prefix={prefix} T={t}", t, lambda *a: attn_decode(*a),
                lambda i, t=t: _attn_args(t, prefix, i), 2 * 4 * (prefix + t) * 256 * 2 + 2 * t * 24 * 256 * 2)

    guarded("head_logits", head_rows)
    guarded("gdn", gdn_rows)
    guarded("conv", conv_rows)
    guarded("attn_decode", attn_rows)
    return {"ceiling_GBps": float(ceiling), "ceiling_method": ceiling.method,
            "records": [dataclasses.asdict(x) for x in rows], "errors": errors}


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

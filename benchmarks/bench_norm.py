"""Benchmark the norm family against its peers on the GPU, in one run.

    python benchmarks/bench_norm.py [--quick] [--out benchmarks/results/<gpu>/]

Ops and shapes (Qwen3.8-27B, bf16 activations, random data):
  rms_norm        [M, 5120]                         the layer and final norms (zero-centred)
  rms_norm        [M, 24, 256] q slice of [M, 24, 512]  the per-head q norm on q_proj's q|gate output
  add_rms_norm    [M, 5120] + residual               residual add then the layer norm
  rms_norm_gated  [M, 48, 128] with gate             the GDN output norm (weight [128])
  silu_mul        [M, 2 x 17408] -> [M, 17408]       the MLP's activation on gate_up's output
Providers:
  qwen38           the fused op (qwen38_kernels.<op>, the QWEN38_FUSED_NORM path forced on)
  F.rms_norm       torch.nn.functional.rms_norm with (1 + w) precomputed; for add_rms_norm
                   ``F.rms_norm(x + r)``, for rms_norm_gated ``F.rms_norm(x, w) * silu(gate)``.
                   A peer for speed only: its rounding points differ from the contract.
  F.silu(gate) * up  silu_mul's peer: two torch kernels, the same bits as the op.
  qwen38 v4 shape  the fused op with QWEN38_NORM_STREAM=0 (the v4 launch shapes; same bits): the A/B
  eager_reference  qwen38_kernels.reference.<op> on CUDA tensors (the contract, op by op)
  limit: copy of the same bytes
                   not a peer: a 16-byte Triton copy (qwen38_kernels.bench.copy_bytes) of as many
                   bytes as the op streams in and out (rms_norm, add_rms_norm: they write as many as
                   they read), over the same number of rotating copies: the bound a 1:1 stream meets
                   on this GPU at this size. Not timed for rms_norm_gated (2:1 read:write).
bytes = everything a call must read (activations, residual, gate, weight) plus write (outputs).
Writes norm.json / norm.meta.json / norm.md / norm.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import qwen38_kernels as q
from qwen38_kernels import bench, knobs
from qwen38_kernels import reference as ref

H = 5120          # hidden size
INTER = 17408     # MLP intermediate size
Q_HEADS, HEAD_DIM = 24, 256   # attention q heads; q_proj gives [q(256) | gate(256)] per head
V_HEADS, V_DIM = 48, 128      # GDN v heads
EPS = 1e-6
DTYPE = torch.bfloat16
ROWS = (1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096, 8192)
QUICK_ROWS = (1, 32, 8192)  # the latency and the bandwidth goals
ES = 2  # bytes per bf16 element


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=DTYPE, device="cuda")


def _one_plus(w: torch.Tensor) -> torch.Tensor:
    # the zero-centred weight folded for F.rms_norm (outside the timing)
    return (1.0 + w.float()).to(w.dtype)


def _add_then_norm(x, r, w1):
    s = x + r
    return F.rms_norm(s, (x.shape[-1],), w1, EPS), s


@dataclass
class Case:
    """One (op, shape): how to build a call's arguments for M rows, and what each provider runs.

    ``make(M)`` returns the argument tuple (one rotating copy); ``bytes(M)`` the bytes one call reads
    and writes, ``touched(M)`` the bytes of a copy it reads (which decide the number of copies).
    Each provider is ``(prep, fn)``: ``prep`` turns the shared arguments into the provider's own
    (once, untimed), ``fn`` is the timed call.
    """
    op: str
    shape: str
    make: Callable[[int], tuple]
    bytes: Callable[[int], int]
    touched: Callable[[int], int]
    providers: dict[str, tuple[Callable, Callable]]


def _same(*args):
    return args


def _no_pdl(fn):
    """Our op launched without programmatic dependent launch (QWEN38_PDL=0): the A/B of that knob."""
    return bench.with_knobs(fn, QWEN38_PDL="0")


def _v4_shape(fn):
    """Our op with the streaming kernel off (QWEN38_NORM_STREAM=0): the v4 launch shapes, same bits."""
    return bench.with_knobs(fn, QWEN38_NORM_STREAM="0")


def _copy_limit(elems: Callable[..., int]):
    """The "limit: copy of the same bytes" provider: ``elems(*args)`` bf16 elements read (as many
    written); prep makes a fresh contiguous source and a destination per rotating copy."""
    def prep(*args):
        n = elems(*args)
        return torch.empty(n, dtype=DTYPE, device="cuda").normal_(), torch.empty(n, dtype=DTYPE, device="cuda")

    return prep, lambda src, dst: bench.copy_bytes(dst, src)


def cases() -> list[Case]:
    def q_slice(m):
        # q of q_proj's per-head [q | gate] output: a strided view, as the model feeds the q norm
        return (_randn(m, Q_HEADS, 2 * HEAD_DIM)[..., :HEAD_DIM], _randn(HEAD_DIM))

    return [
        Case("rms_norm", f"{H}",
             make=lambda m: (_randn(m, H), _randn(H)),
             bytes=lambda m: ES * (2 * m * H + H),
             touched=lambda m: ES * (m * H + H),
             providers={
                 "qwen38": (_same, lambda x, w: q.rms_norm(x, w, EPS, True)),
                 "qwen38 PDL off": (_same, _no_pdl(lambda x, w: q.rms_norm(x, w, EPS, True))),
                 "qwen38 v4 shape": (_same, _v4_shape(lambda x, w: q.rms_norm(x, w, EPS, True))),
                 "F.rms_norm": (lambda x, w: (x, _one_plus(w)), lambda x, w1: F.rms_norm(x, (H,), w1, EPS)),
                 "eager_reference": (_same, lambda x, w: ref.rms_norm(x, w, EPS, True)),
                 "limit: copy of the same bytes": _copy_limit(lambda x, w: x.numel()),
             }),
        Case("rms_norm", f"{Q_HEADS}x{HEAD_DIM} q slice",
             make=q_slice,
             bytes=lambda m: ES * (2 * m * Q_HEADS * HEAD_DIM + HEAD_DIM),
             touched=lambda m: ES * (m * Q_HEADS * HEAD_DIM + HEAD_DIM),
             providers={
                 "qwen38": (_same, lambda x, w: q.rms_norm(x, w, EPS, True)),
                 "qwen38 PDL off": (_same, _no_pdl(lambda x, w: q.rms_norm(x, w, EPS, True))),
                 "qwen38 v4 shape": (_same, _v4_shape(lambda x, w: q.rms_norm(x, w, EPS, True))),
                 "F.rms_norm": (lambda x, w: (x, _one_plus(w)),
                                lambda x, w1: F.rms_norm(x, (HEAD_DIM,), w1, EPS)),
                 "eager_reference": (_same, lambda x, w: ref.rms_norm(x, w, EPS, True)),
                 "limit: copy of the same bytes": _copy_limit(lambda x, w: x.numel()),
             }),
        Case("add_rms_norm", f"{H}",
             make=lambda m: (_randn(m, H), _randn(m, H), _randn(H)),
             bytes=lambda m: ES * (4 * m * H + H),
             touched=lambda m: ES * (2 * m * H + H),
             providers={
                 "qwen38": (_same, lambda x, r, w: q.add_rms_norm(x, r, w, EPS, True)),
                 "qwen38 PDL off": (_same, _no_pdl(lambda x, r, w: q.add_rms_norm(x, r, w, EPS, True))),
                 "qwen38 v4 shape": (_same, _v4_shape(lambda x, r, w: q.add_rms_norm(x, r, w, EPS, True))),
                 "F.rms_norm": (lambda x, r, w: (x, r, _one_plus(w)), _add_then_norm),
                 "eager_reference": (_same, lambda x, r, w: ref.add_rms_norm(x, r, w, EPS, True)),
                 "limit: copy of the same bytes": _copy_limit(lambda x, r, w: x.numel() + r.numel()),
             }),
        Case("rms_norm_gated", f"{V_HEADS}x{V_DIM}",
             make=lambda m: (_randn(m, V_HEADS, V_DIM), _randn(m, V_HEADS, V_DIM), _randn(V_DIM)),
             bytes=lambda m: ES * (3 * m * V_HEADS * V_DIM + V_DIM),
             touched=lambda m: ES * (2 * m * V_HEADS * V_DIM + V_DIM),
             providers={
                 "qwen38": (_same, lambda x, g, w: q.rms_norm_gated(x, g, w, EPS)),
                 "qwen38 PDL off": (_same, _no_pdl(lambda x, g, w: q.rms_norm_gated(x, g, w, EPS))),
                 "qwen38 v4 shape": (_same, _v4_shape(lambda x, g, w: q.rms_norm_gated(x, g, w, EPS))),
                 "F.rms_norm": (_same, lambda x, g, w: F.rms_norm(x, (V_DIM,), w, EPS) * F.silu(g)),
                 "eager_reference": (_same, lambda x, g, w: ref.rms_norm_gated(x, g, w, EPS)),
             }),
        Case("silu_mul", f"2x{INTER}",
             make=lambda m: (_randn(m, 2 * INTER),),
             bytes=lambda m: ES * 3 * m * INTER,
             touched=lambda m: ES * 2 * m * INTER,
             providers={
                 "qwen38": (_same, q.silu_mul),
                 "qwen38 PDL off": (_same, _no_pdl(q.silu_mul)),
                 "F.silu(gate) * up": (_same, lambda x: F.silu(x[..., :INTER]) * x[..., INTER:]),
                 "eager_reference": (_same, ref.silu_mul),
             }),
    ]


def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    """Time every (case, rows, provider); returns the records and the meta (ceilings, failures).
    ``ceiling``: a read ceiling already measured in this process (else it is measured first)."""
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    meta["ceiling_method"] = getattr(ceiling, "method", "given by the caller")
    copy = bench.measure_copy_ceiling()
    meta.update(copy_GBps=round(float(copy), 1), copy_method=copy.method)
    print(f"read ceiling {ceiling:.0f} GB/s, copy {copy:.0f} GB/s", file=sys.stderr)

    rows = QUICK_ROWS if quick else ROWS
    meta["rows"] = list(rows)
    work = [(c, m) for c in cases() for m in rows]
    records, failures = [], []
    torch.manual_seed(0)
    with knobs.override(QWEN38_FUSED_NORM="1"):
        for case, m in bench.progress(work, "bench_norm"):
            base = bench.rotating_copies(lambda i: case.make(m), case.touched(m))
            for provider, (prep, fn) in case.providers.items():
                try:
                    us = bench.time_calls(fn, [prep(*a) for a in base])
                except Exception as e:  # one broken peer must not lose the rest of the sweep
                    failures.append(f"{case.op} {case.shape} M={m} {provider}: {type(e).__name__}: {e}")
                    print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                    continue
                records.append(bench.Record.from_timing(case.op, provider, case.shape, None, None, m, us,
                                                        case.bytes(m), ceiling,
                                                        note=f"{len(base)} rotating copies"))
            del base
    if failures:
        meta["failures"] = failures
    return records, meta


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("norm", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"rows {QUICK_ROWS} only",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())

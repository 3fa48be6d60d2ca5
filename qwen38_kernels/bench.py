"""Benchmark machinery shared by ``benchmarks/bench_*.py`` and ``python -m qwen38_kernels``.

Method (DESIGN.md, "Benchmarks"):

* every timing is a CUDA graph of many calls (launch gaps removed), replayed ``repeats`` times and
  timed with CUDA events; the result is the median microseconds per call;
* the calls rotate over copies of the arguments whose total exceeds a few times the L2 cache, so
  every call reads cold memory, as a decode step does;
* the ceiling (a streaming read) is measured in the same run, and each record reports its share.

Only torch is imported here; triton, matplotlib and tqdm are imported when used and are optional.
This module never imports the ops, so it loads before the extension is built.
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import re
import statistics
import sys
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

__all__ = [
    "Bandwidth", "Record", "METHOD", "gpu_name", "l2_bytes", "device_meta", "measure_read_ceiling",
    "measure_copy_ceiling", "rotating_copies", "time_calls", "progress", "write_results",
    "markdown_report", "short_table", "plot_results",
]

# One line that says how every number was taken; written into each result's meta and Markdown.
METHOD = ("one CUDA graph of >= 200 calls rotating over argument copies whose total exceeds 12x L2 "
          "(unless 8192 copies or 8 GiB cap it), so reads are cold; median of 9 timed replays; us per call; "
          "GB/s = (bytes read + written) / time")

_FALLBACK_L2 = 60 << 20  # the H200's L2, used when the device does not report one


# ---- device --------------------------------------------------------------------------------------
def gpu_name(device: int | None = None) -> str:
    """Short slug of the GPU for result folders: "NVIDIA H200" -> "h200", "cpu" without CUDA."""
    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    name = re.sub(r"^nvidia\s+", "", name)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "gpu"


def l2_bytes(device: int | None = None) -> int:
    """L2 cache size in bytes as the device reports it; 60 MiB when it reports none (or no CUDA)."""
    if not torch.cuda.is_available():
        return _FALLBACK_L2
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or _FALLBACK_L2)


def device_meta() -> dict[str, Any]:
    """Device and software versions and the UTC date, for the meta file of a result."""
    meta: dict[str, Any] = {
        "gpu": gpu_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        meta.update(device=props.name, sm=f"{props.major}.{props.minor}", l2_bytes=l2_bytes(),
                    sms=props.multi_processor_count)
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    return meta


# ---- timing --------------------------------------------------------------------------------------
def rotating_copies(make_args: Callable[[int], tuple], bytes_per_call: int, l2: int | None = None,
                    max_copies: int = 8192, max_bytes: int = 8 << 30, factor: float = 12.0) -> list[tuple]:
    """Build enough argument copies that cycling through them reads cold memory.

    ``make_args(i)`` returns the argument tuple of copy ``i``; ``bytes_per_call`` is what one call
    touches of its copy (inputs and weights). The count makes the total exceed ``factor`` x L2, within
    ``max_copies`` (graph size) and ``max_bytes`` (device memory); at least one copy. Warns when the
    caps leave the total within L2 (such a timing would be warm).

    Why 12: cycling over 3x L2 is not cold on the H200. Its L2 keeps part of the copies: nvfp4_linear
    16384x5120 at 1 row took 18.6 us over 4 copies (3x) against 22.1 over 16 (12x) and 32 (24x); 34816x5120
    38.0 against 41.8 (session 33, benchmarks/results/h200/cold_s33.md). 12x and 24x time the same.
    """
    l2 = l2_bytes() if l2 is None else l2
    n = math.floor(factor * l2 / max(bytes_per_call, 1)) + 1
    n = max(1, min(n, max_copies, max_bytes // max(bytes_per_call, 1)))
    if n * bytes_per_call <= l2:
        warnings.warn(f"rotating_copies: {n} copies x {bytes_per_call} bytes fit in the {l2}-byte L2; "
                      "the timing will be (partly) warm", stacklevel=2)
    return [make_args(i) for i in range(n)]


def with_knobs(fn: Callable[..., Any], **values: str) -> Callable[..., Any]:
    """``fn`` called with the knobs ``values`` in force (knobs.override): a benchmark provider for the
    A/B of a launch knob. The ops read their knobs at launch, i.e. while the timing graph is captured."""
    from . import knobs

    def call(*args):
        with knobs.override(**values):
            return fn(*args)
    return call


def time_calls(fn: Callable[..., Any], arg_sets: Sequence[tuple], *, repeats: int = 9,
               min_calls: int = 200, max_calls: int = 4096, warmup: int = 3) -> float:
    """Median microseconds per call of ``fn(*args)``, graph-timed over the rotating ``arg_sets``.

    One CUDA graph calls ``fn`` on each copy in turn, the rotation repeated until the graph holds at
    least ``min_calls`` calls (at most ``max_calls``, but always one full rotation). Outputs that
    ``fn`` allocates come from the graph's private pool and are dropped at once, so the pool reuses
    them call after call. The graph is replayed once untimed, then ``repeats`` times between CUDA
    events.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("time_calls needs a CUDA device")
    n = len(arg_sets)
    if n == 0:
        raise ValueError("time_calls: arg_sets is empty")
    rotations = max(1, min(-(-min_calls // n), max_calls // n))
    calls = rotations * n

    # Eager warm-up on a side stream, as capture requires: compiles/autotunes Triton kernels,
    # creates library handles and fills the allocator before anything is recorded.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for k in range(warmup):
            fn(*arg_sets[k % n])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # captures on its own side stream
        for _ in range(rotations):
            for args in arg_sets:
                fn(*args)
    graph.replay()  # the first replay uploads the graph; not timed
    torch.cuda.synchronize()

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e3 / calls)  # ms -> us
    return statistics.median(per_call)


# ---- ceilings ------------------------------------------------------------------------------------
class Bandwidth(float):
    """A GB/s figure that is a plain float and also says how it was measured (``.method``)."""

    method: str

    def __new__(cls, gbps: float, method: str) -> "Bandwidth":
        self = super().__new__(cls, gbps)
        self.method = method
        return self


@functools.lru_cache(maxsize=None)
def _triton_read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read_sum(src, partial, BLOCK: tl.constexpr):
        # Program p sums src[p*BLOCK : (p+1)*BLOCK] (fp32) and writes one partial. The block offset
        # is a multiple of BLOCK and the pointer 16-byte aligned, so Triton emits 16-byte loads
        # (4 fp32 per ld.global.v4); BLOCK / (32 * num_warps) = 32 values, 8 loads in flight a thread.
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(partial + pid, tl.sum(tl.load(src + offs), axis=0))

    return read_sum


def measure_read_ceiling(nbytes: int = 2 << 30, *, repeats: int = 9) -> Bandwidth:
    """Streaming-read bandwidth in GB/s (``.method`` says how): the ceiling a memory-bound op meets.

    A Triton kernel reads an fp32 buffer of ``nbytes`` with 16-byte loads, each program summing one
    block into a partial; without Triton (or if it fails) a torch reduction over the same buffer.
    The buffer is far larger than L2, so one copy is cold on every call. Graph-timed like any op.
    """
    block, num_warps = 8192, 8
    n = (nbytes // 4) // block * block
    src = torch.randn(n, dtype=torch.float32, device="cuda")
    nbytes = n * 4
    try:
        kernel = _triton_read_kernel()
        partial = torch.empty(n // block, dtype=torch.float32, device="cuda")

        def read(s, p):
            kernel[(n // block,)](s, p, BLOCK=block, num_warps=num_warps)

        us = time_calls(read, [(src, partial)], repeats=repeats, min_calls=20)
        method = (f"triton streaming read, {nbytes >> 20} MiB fp32, 16-byte loads, one partial per "
                  f"{block * 4 >> 10} KiB block")
    except Exception as e:  # no Triton, or it cannot compile here: a torch reduction instead
        us = time_calls(torch.sum, [(src,)], repeats=repeats, min_calls=20)
        method = (f"torch.sum over {nbytes >> 20} MiB fp32 (triton read kernel unavailable: "
                  f"{type(e).__name__}: {e})")
    return Bandwidth(nbytes / us / 1e3, method)


@functools.lru_cache(maxsize=None)
@functools.lru_cache(maxsize=None)
def _triton_copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        # Program p copies src[p*BLOCK : (p+1)*BLOCK] (fp32) with 16-byte loads and stores; MASKED:
        # the tail past n is left alone (else n is a multiple of BLOCK and nothing is masked).
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        if MASKED:
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
        else:
            tl.store(dst + offs, tl.load(src + offs))

    return copy


def copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy the contiguous ``src`` into ``dst`` (same number of bytes, a multiple of 16) with the
    16-byte Triton copy of :func:`measure_copy_ceiling`: a benchmark's "limit: copy of the same bytes",
    what a stream that reads and writes those bytes reaches at that size (ramp-up and drain included)."""
    nbytes = src.numel() * src.element_size()
    if not (src.is_contiguous() and dst.is_contiguous() and nbytes % 16 == 0
            and dst.numel() * dst.element_size() == nbytes):
        raise ValueError(f"copy_bytes: contiguous tensors of the same size (a multiple of 16 bytes) expected, "
                         f"got src {tuple(src.shape)} {src.dtype}, dst {tuple(dst.shape)} {dst.dtype}")
    n, block = nbytes // 4, 4096
    _triton_copy_kernel()[((n + block - 1) // block,)](src.view(torch.float32), dst.view(torch.float32), n,
                                                       BLOCK=block, MASKED=n % block != 0, num_warps=4)


def measure_copy_ceiling(nbytes: int = 1 << 30, *, repeats: int = 9) -> Bandwidth:
    """Device-to-device copy bandwidth in GB/s, read + write counted (graph-timed): what a stream
    that reads and writes as many bytes (1:1) reaches on this GPU. A Triton copy with 16-byte loads
    and stores; without Triton (or if it fails) ``Tensor.copy_``."""
    block, num_warps = 4096, 4
    n = (nbytes // 4) // block * block
    src = torch.randn(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    try:
        kernel = _triton_copy_kernel()

        def copy(d, s):
            kernel[(n // block,)](s, d, n, BLOCK=block, MASKED=False, num_warps=num_warps)

        us = time_calls(copy, [(dst, src)], repeats=repeats, min_calls=20)
        method = f"triton copy of {n * 4 >> 20} MiB fp32, 16-byte loads and stores, read + write counted"
    except Exception as e:
        us = time_calls(torch.Tensor.copy_, [(dst, src)], repeats=repeats, min_calls=20)
        method = (f"Tensor.copy_ of {n * 4 >> 20} MiB fp32, read + write counted (triton copy kernel "
                  f"unavailable: {type(e).__name__}: {e})")
    return Bandwidth(2 * n * 4 / us / 1e3, method)


# ---- records -------------------------------------------------------------------------------------
@dataclass
class Record:
    """One timing: ``op`` run by ``provider`` on weight/problem ``shape`` with ``M`` rows.

    N, K: the weight shape of a GEMM (None where there is none). ``bytes`` is what the call must read
    plus write; GBps = bytes / us; pct_of_ceiling compares that to the read ceiling of the same run.
    TFLOPs: 2 M N K / us for the GEMM records that report a throughput (the prefill tables), else None.
    """
    op: str
    provider: str
    shape: str
    N: int | None
    K: int | None
    M: int
    us: float
    bytes: int
    GBps: float
    ceiling_GBps: float
    pct_of_ceiling: float
    note: str = ""
    TFLOPs: float | None = None

    @classmethod
    def from_timing(cls, op: str, provider: str, shape: str, N: int | None, K: int | None, M: int,
                    us: float, bytes: int, ceiling: float, note: str = "", flops: int | None = None) -> "Record":
        gbps = bytes / us / 1e3  # bytes per us = MB/s; / 1e3 -> GB/s
        tflops = None if flops is None else round(flops / us / 1e6, 2)  # flops per us = MFLOP/s
        return cls(op=op, provider=provider, shape=shape, N=N, K=K, M=M, us=round(us, 3), bytes=int(bytes),
                   GBps=round(gbps, 1), ceiling_GBps=round(float(ceiling), 1),
                   pct_of_ceiling=round(100.0 * gbps / ceiling, 1), note=note, TFLOPs=tflops)


def progress(iterable: Iterable, desc: str, total: int | None = None) -> Iterator:
    """Iterate with a progress bar on stderr: tqdm when installed, else a printed counter."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(iterable, desc=desc, total=total, file=sys.stderr, dynamic_ncols=True)
        return
    of = f"/{total}" if total is not None else ""
    i = 0
    for i, item in enumerate(iterable, 1):
        print(f"\r{desc}: {i}{of}", end="", file=sys.stderr, flush=True)
        yield item
    print(f"\r{desc}: {i}{of} done", file=sys.stderr, flush=True)


# ---- reports -------------------------------------------------------------------------------------
def _unique(values: Iterable) -> list:
    return list(dict.fromkeys(values))  # first-appearance order


def _fmt_us(us: float) -> str:
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 1000 else f"{us:.0f}"


LIMIT_PREFIX = "limit: "  # a provider named so is a bound timed for comparison (a copy), not a peer


def _best_peer(rows: dict[str, Record], ours: str) -> Record | None:
    """The fastest provider that is not ours (variants of ours, named "<ours> ...", are not peers,
    nor are the limits, named "limit: ...")."""
    peers = [r for p, r in rows.items()
             if p != ours and not p.startswith(ours + " ") and not p.startswith(LIMIT_PREFIX)]
    return min(peers, key=lambda r: r.us) if peers else None


def _grouped(records: Sequence[Record]) -> dict[tuple[str, str, int], dict[str, Record]]:
    """(op, shape, M) -> {provider: record}, ops and shapes in first-appearance order, M ascending."""
    groups: dict[tuple[str, str, int], dict[str, Record]] = {}
    for r in records:
        groups.setdefault((r.op, r.shape, r.M), {})[r.provider] = r
    op_order = {op: i for i, op in enumerate(_unique(r.op for r in records))}
    shape_order = {s: i for i, s in enumerate(_unique(r.shape for r in records))}
    return dict(sorted(groups.items(), key=lambda kv: (op_order[kv[0][0]], shape_order[kv[0][1]], kv[0][2])))


def markdown_report(records: Sequence[Record], bench_name: str, meta: dict[str, Any],
                    ours: str = "qwen38", baseline: str = "cuBLAS bf16") -> str:
    """Markdown: the meta as a list, then per op a table with one row per (shape, M), per provider
    us and GB/s (% of ceiling) (TFLOP/s instead for an op whose records all carry one), ``ours``'s
    speedup over the fastest other provider, when the op has ``baseline`` records ``ours``'s
    throughput as a multiple of the baseline's (baseline us / ours us), and per limit provider
    ("limit: ...", not a peer) ``ours``'s speed as a percentage of the limit's (limit us / ours us)."""
    providers = _unique(r.provider for r in records)
    lines = [f"# {bench_name} on {meta.get('device', meta.get('gpu', 'unknown device'))}", ""]
    for k, v in meta.items():
        if isinstance(v, list) and v and isinstance(v[0], str):  # e.g. failures: one line each
            lines += [f"- {k}:"] + [f"  - {item}" for item in v]
        else:
            lines.append(f"- {k}: {v}")
    groups = _grouped(records)
    for op in _unique(k[0] for k in groups):
        op_recs = [r for r in records if r.op == op]
        op_providers = [p for p in providers if any(r.provider == p for r in op_recs)]
        flops = all(r.TFLOPs is not None for r in op_recs)
        has_base = baseline != ours and any(r.provider == baseline for r in op_recs)
        head = ["shape", "M"]
        for p in op_providers:
            head += [f"{p} us", f"{p} TFLOP/s" if flops else f"{p} GB/s (% ceil)"]
        head.append(f"{ours} speedup vs best peer")
        if has_base:
            head.append(f"{ours} vs {baseline}")
        limits = [p for p in op_providers if p.startswith(LIMIT_PREFIX)]
        head += [f"{ours} speed as % of the {p[len(LIMIT_PREFIX):]}" for p in limits]
        lines += ["", f"## {op}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for (op_k, shape, m), rows in groups.items():
            if op_k != op:
                continue
            cells = [shape, str(m)]
            for p in op_providers:
                r = rows.get(p)
                if r is None:
                    cells += ["-", "-"]
                else:
                    cells += [_fmt_us(r.us), f"{r.TFLOPs:.0f}" if flops else f"{r.GBps:.0f} ({r.pct_of_ceiling:.0f}%)"]
            peer, mine = _best_peer(rows, ours), rows.get(ours)
            cells.append(f"{peer.us / mine.us:.2f}x ({peer.provider})" if peer and mine else "-")
            if has_base:
                base = rows.get(baseline)
                cells.append(f"{base.us / mine.us:.2f}x" if base and mine else "-")
            for p in limits:
                lim = rows.get(p)
                cells.append(f"{100.0 * lim.us / mine.us:.0f}%" if lim and mine else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def short_table(records: Sequence[Record], ours: str = "qwen38") -> str:
    """A compact fixed-width summary for the terminal: ours vs the fastest peer per (op, shape, M)."""
    head = ("op", "shape", "M", f"{ours} us", "% ceil", "best peer", "peer us", "speedup")
    rows = []
    for (op, shape, m), by_p in _grouped(records).items():
        r, peer = by_p.get(ours), _best_peer(by_p, ours)
        rows.append((op, shape, str(m),
                     _fmt_us(r.us) if r else "-", f"{r.pct_of_ceiling:.0f}%" if r else "-",
                     peer.provider if peer else "-", _fmt_us(peer.us) if peer else "-",
                     f"{peer.us / r.us:.2f}x" if r and peer else "-"))
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 or i == 5 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*row) for row in [head, *rows])


def plot_results(records: Sequence[Record], path: Path | str, title: str, ours: str = "qwen38") -> bool:
    """PNG: GB/s vs rows (log2 axis), one subplot per (op, shape), a line per provider, the read
    ceiling dashed. A panel whose records all carry TFLOPs (prefill) plots TFLOP/s instead, with the
    read-ceiling roofline of ``ours``'s bytes (2 M N K flops in the time its bytes take at the
    ceiling) dashed. Returns False (after saying so) when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # object API: no pyplot, no global backend switch
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}", file=sys.stderr)
        return False
    panels = _unique((r.op, r.shape) for r in records)
    providers = _unique(r.provider for r in records)
    ncols = min(3, math.ceil(math.sqrt(len(panels))))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5.5 * ncols, 4.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (op, shape) in zip(axes, panels):
        rs = [r for r in records if (r.op, r.shape) == (op, shape)]
        flops = all(r.TFLOPs is not None for r in rs)
        for i, p in enumerate(providers):
            pts = sorted((r.M, r.TFLOPs if flops else r.GBps) for r in rs if r.provider == p)
            if pts:
                ax.plot(*zip(*pts), marker="o", markersize=3, label=p, color=f"C{i}")
        ceiling = max(r.ceiling_GBps for r in rs)
        ms = sorted({r.M for r in rs})
        if flops:
            top = max(r.TFLOPs for r in rs) * 1.15
            roof = sorted((r.M, r.TFLOPs * r.ceiling_GBps / r.GBps) for r in rs if r.provider == ours)
            if roof and min(v for _, v in roof) < 2 * top:  # in view where it binds (few rows); else off the top
                top = max(top, min(v for _, v in roof) * 1.05)
            if roof:
                ax.plot(*zip(*roof), linestyle="--", color="gray",
                        label=f"{ours} bytes at the read ceiling ({ceiling:.0f} GB/s)")
            ax.set_ylim(0, top)
            ylabel = "TFLOP/s (2 M N K / time)"
        else:
            ax.axhline(ceiling, linestyle="--", color="gray", label=f"read ceiling {ceiling:.0f}")
            ax.set_ylim(0, ceiling * 1.08)
            ylabel = "GB/s (read + write)"
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms], fontsize=7)
        ax.minorticks_off()
        ax.set(title=f"{op}  {shape}", xlabel="rows (M)", ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    return True


def write_results(records: Sequence[Record], bench_name: str, out_dir: Path | str, meta: dict[str, Any],
                  ours: str = "qwen38") -> list[Path]:
    """Write ``<bench_name>.json`` (the list of records), ``.meta.json`` (device, versions, date and
    ``meta``: ceiling, method...), ``.md`` (tables) and ``.png`` (plots) into ``out_dir``.
    Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {**device_meta(), "method": METHOD, **meta}
    paths = [out / f"{bench_name}.json", out / f"{bench_name}.meta.json", out / f"{bench_name}.md"]
    paths[0].write_text(json.dumps([asdict(r) for r in records], indent=1) + "\n")
    paths[1].write_text(json.dumps(meta, indent=1, default=str) + "\n")
    paths[2].write_text(markdown_report(records, bench_name, meta, ours))
    png = out / f"{bench_name}.png"
    if records and plot_results(records, png, f"{bench_name} on {meta.get('device', meta['gpu'])}", ours):
        paths.append(png)
    return paths


# ---- the command line every benchmarks/bench_*.py shares -----------------------------------------
def bench_main(bench_name: str, run: Callable[..., tuple[list[Record], dict]], *, description: str,
               quick_help: str, results_root: Path, argv: Sequence[str] | None = None) -> int:
    """``--out DIR`` (default ``results_root/<gpu>``) and ``--quick``; runs ``run(quick=...)``, prints
    the short table, writes the results. Exit status: 2 without CUDA, 1 when a timing failed."""
    import argparse

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, default=None,
                   help="result folder (default: benchmarks/results/<gpu> beside the script)")
    p.add_argument("--quick", action="store_true", help=quick_help)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"bench_{bench_name} needs a CUDA device", file=sys.stderr)
        return 2
    out = args.out or Path(results_root) / gpu_name()
    records, meta = run(quick=args.quick)
    meta["quick"] = args.quick
    print(short_table(records))
    for path in write_results(records, bench_name, out, meta):
        print(f"wrote {path}")
    return 1 if "failures" in meta else 0

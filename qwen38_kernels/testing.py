"""Helpers the test suite uses for every op, public so that users can fuzz their own calls too.

    from qwen38_kernels import testing as qt
    # QWEN38_POISON_OUTPUTS=1: CUDA op outputs start as NaN (knobs.py)
    y = torch.ops.qwen38.rms_norm(x, w, 1e-6, True)
    qt.assert_row_invariant(lambda x: torch.ops.qwen38.rms_norm(x, w, 1e-6, True), x)

What each helper checks, in the words of the numerics contract (DESIGN.md):
- ``assert_row_invariant`` / ``assert_row_invariant_at``: row r of an M-row call is bit-identical to
  the 1-row call of that row (every M in 1..32, every position).
- ``assert_deterministic``, ``assert_graph_equals_eager``: the same call gives the same bits, eager or
  replayed from a CUDA graph.
- ``poison_like`` / ``poisoned_empty``: NaN-filled tensors, so an output element a kernel forgets to
  write reads as NaN instead of as whatever the memory held (often zeros, which hide the bug). The
  ops' own outputs are poisoned with the knob QWEN38_POISON_OUTPUTS=1.
- ``ulp_diff`` / ``ulp_histogram``: distance in units in the last place, the measure of the accuracy
  tests (max 1 ulp from the float64 evaluation rounded at the reference's rounding points).
- ``assert_knob_keeps_bits``: a launch knob (KNOBS.md: the ones that choose a kernel or a launch
  shape) changes no bit of a call, at every row count given.
- ``cuda_kernel_names``: the CUDA kernels a call launched (torch.profiler), so a test can tell which
  kernel served it.
- ``dfs_trees``: a hypothesis strategy of draft trees in depth-first order (the verify ops' parents).

Nothing here needs pytest; the functions raise ``AssertionError`` with a message that says which row,
which output and how far off.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

__all__ = [
    "devices", "randn_nonzero",
    "poison_like", "poisoned_empty",
    "ulp_diff", "ulp_histogram", "assert_ulp_close", "assert_bitwise_equal",
    "run_opcheck", "assert_graph_equals_eager", "assert_row_invariant", "assert_row_invariant_at",
    "assert_deterministic", "assert_knob_keeps_bits", "cuda_kernel_names", "dfs_trees",
]

# ---- devices and data ------------------------------------------------------------------------


def devices() -> list[str]:
    """``["cpu"]`` plus ``"cuda"`` when a CUDA device is available."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def randn_nonzero(*shape: int, dtype: torch.dtype = torch.bfloat16, device="cpu", scale: float = 1.0,
                  shift: float = 0.0, seed: int = 0) -> torch.Tensor:
    """``shift + scale * randn(shape)`` rounded to ``dtype``, with no exact zero anywhere.

    Drawn on the CPU from ``seed`` and then moved, so the same seed gives the same data on every
    device. A zero after rounding is replaced by ``scale`` (zeros hide missing scale factors and
    unwritten outputs, so the accuracy tests never use them).
    """
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(*shape, generator=g, dtype=torch.float32) * scale + shift
    t = v.to(dtype)
    t = torch.where(t == 0, torch.tensor(scale if scale != 0 else 1.0, dtype=dtype), t)
    return t.to(device)


# ---- output rounding -----------------------------------------------------------------------------


def spacing(y: torch.Tensor) -> torch.Tensor:
    """float64 gap from |y| to the next value of y's dtype up: at least the rounding gap around y, so
    a correctly rounded output is within ``spacing(y) / 2`` of the exact value."""
    a = y.abs()
    return (torch.nextafter(a, torch.full_like(a, float("inf"))) - a).double()


def rounding_slack(y: torch.Tensor) -> torch.Tensor:
    """How far a 16-bit output ``y`` may be from the fp32 value it rounds (``spacing(y) / 2``), as
    float64; zeros for an fp32 output (its fp32 roundings belong to the caller's error bound)."""
    if y.dtype == torch.float32:
        return torch.zeros_like(y, dtype=torch.float64)
    return spacing(y) / 2


# ---- poisoning -------------------------------------------------------------------------------

# 0xFF in every byte is a NaN in bf16, fp16, fp32, fp64, float8_e4m3fn and float8_e5m2, and -1 (or
# the maximum) in the integer types: one fill poisons every dtype an op can return.
_POISON_BYTE = 0xFF


def _fill_poison(t: torch.Tensor) -> torch.Tensor:
    if t.numel() == 0:
        return t
    if t.is_floating_point() and t.element_size() >= 2:
        return t.fill_(float("nan"))
    if t.is_contiguous():
        t.view(torch.uint8).fill_(_POISON_BYTE)
    else:
        t.copy_(poison_like(t.contiguous()))
    return t


def poison_like(t: torch.Tensor) -> torch.Tensor:
    """A new tensor like ``t`` (shape, dtype, device, strides) holding NaN (0xFF bytes for types
    without NaN). Pass it as the ``out`` of an op that takes one; unwritten elements stay NaN."""
    return _fill_poison(torch.empty_like(t, memory_format=torch.preserve_format))


def poisoned_empty(*size, dtype: torch.dtype = torch.float32, device=None, **kwargs) -> torch.Tensor:
    """``torch.empty(*size, ...)`` filled with NaN (0xFF bytes for types without NaN)."""
    return _fill_poison(torch.empty(*size, dtype=dtype, device=device, **kwargs))


def offset_copy(t: torch.Tensor, elems: int) -> torch.Tensor:
    """A contiguous copy of ``t`` whose data starts ``elems`` elements past an allocation's start
    (a view the way a slice of a larger buffer is one): for alignment checks and fallbacks."""
    flat = torch.empty(t.numel() + elems, dtype=t.dtype, device=t.device)
    return flat[elems:].view(t.shape).copy_(t)


# ---- ulps and bits -----------------------------------------------------------------------------

_INT_OF = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
           torch.float64: torch.int64}
_ULP_NAN_MISMATCH = 1 << 40  # "huge": one side NaN, the other not


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """Integers that order like the floats: consecutive floats differ by 1, +0 == -0."""
    i = t.contiguous().view(_INT_OF[t.dtype]).to(torch.int64)
    if t.dtype == torch.float64:
        mag = i & ((1 << 63) - 1)
    else:
        mag = i & ((1 << (8 * t.element_size() - 1)) - 1)
    return torch.where(i < 0, -mag, mag)


def ulp_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance between ``a`` and ``b`` in ulps of their (common) float dtype, as int64.

    Computed on the bit patterns (sign-magnitude mapped to an ordered integer line), so it is exact,
    +0 and -0 are 0 apart, and +inf is one ulp above the largest finite value. Two NaNs are 0 apart;
    a NaN against a number is 2**40.
    """
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_diff: dtypes differ: {a.dtype} vs {b.dtype}")
    if a.dtype not in _INT_OF:
        raise TypeError(f"ulp_diff: unsupported dtype {a.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"ulp_diff: shapes differ: {list(a.shape)} vs {list(b.shape)}")
    d = (_ordered(a) - _ordered(b)).abs()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, _ULP_NAN_MISMATCH), d)


def ulp_histogram(a: torch.Tensor, b: torch.Tensor) -> dict[int, int]:
    """``{ulps: count}`` over all elements of ``a`` vs ``b``."""
    u = ulp_diff(a, b).flatten()
    if u.numel() == 0:
        return {}
    vals, counts = torch.unique(u.cpu(), return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, counts)}


def _where_worst(a: torch.Tensor, b: torch.Tensor, u: torch.Tensor) -> str:
    flat = int(u.flatten().argmax())
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), u.shape)) if u.dim() else ()
    return (f"worst at index {list(idx)}: {float(a.flatten()[flat])!r} vs {float(b.flatten()[flat])!r} "
            f"({int(u.flatten()[flat])} ulp)")


def assert_ulp_close(actual: torch.Tensor, expected: torch.Tensor, max_ulp: int, msg: str = "") -> int:
    """Every element of ``actual`` within ``max_ulp`` ulps of ``expected``; returns the max ulp.
    The failure message carries the ulp histogram and the worst element."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise AssertionError(f"{msg}: got {actual.dtype} {list(actual.shape)}, expected "
                             f"{expected.dtype} {list(expected.shape)}")
    if actual.numel() == 0:
        return 0
    u = ulp_diff(actual, expected)
    worst = int(u.max())
    if worst > max_ulp:
        raise AssertionError(f"{msg}: max {worst} ulp > {max_ulp} (ulp histogram "
                             f"{ulp_histogram(actual, expected)}; {_where_worst(actual, expected, u)})")
    return worst


def _bits(t: torch.Tensor) -> torch.Tensor:
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(ints[t.element_size()])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    """Same shape, dtype and bit pattern (NaNs compare by their bits; -0 differs from +0)."""
    prefix = f"{msg}: " if msg else ""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"{prefix}{a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)}")
    if a.numel() == 0:
        return
    if a.device != b.device:
        b = b.to(a.device)
    neq = _bits(a) != _bits(b)
    n = int(neq.sum())
    if n:
        first = int(neq.flatten().nonzero()[0])
        idx = [int(i) for i in torch.unravel_index(torch.tensor(first), a.shape)]
        extra = ""
        if a.dtype in _INT_OF:
            extra = f"; ulp histogram {ulp_histogram(a, b)}"
        raise AssertionError(
            f"{prefix}{n} of {a.numel()} elements differ in their bits; first at {idx}: "
            f"{a.flatten()[first].item()!r} vs {b.flatten()[first].item()!r}{extra}")


def _as_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return tuple(t for t in flat if isinstance(t, torch.Tensor))


def _assert_outputs_equal(got: Any, want: Any, msg: str) -> None:
    g, w = _as_tensors(got), _as_tensors(want)
    if len(g) != len(w):
        raise AssertionError(f"{msg}: {len(g)} outputs vs {len(w)}")
    for k, (x, y) in enumerate(zip(g, w)):
        assert_bitwise_equal(x, y, f"{msg}, output {k}")


# ---- op registration ---------------------------------------------------------------------------


def run_opcheck(op, args: Sequence[Any], kwargs: dict | None = None, *,
                test_utils: str | Sequence[str] | None = None) -> dict:
    """``torch.library.opcheck`` (schema, autograd registration, fake tensor, AOT dispatch) on one
    set of sample arguments; raises on the first failure and returns opcheck's report."""
    extra = {} if test_utils is None else {"test_utils": test_utils}
    return torch.library.opcheck(op, tuple(args), kwargs or {}, **extra)


# ---- graph, determinism ------------------------------------------------------------------------


def assert_graph_equals_eager(fn: Callable, *args, warmup: int = 2) -> Any:
    """Run ``fn(*args)`` eagerly, capture it in a ``torch.cuda.CUDAGraph`` (after ``warmup`` calls
    on a side stream), poison the graph's outputs with NaN, replay, and require the replayed outputs
    to equal the eager ones bit for bit. Returns the eager outputs."""
    eager = fn(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = fn(*args)
    for t in _as_tensors(static):
        _fill_poison(t)  # a replay that writes nothing must not pass on the capture's leftovers
    graph.replay()
    torch.cuda.synchronize()
    _assert_outputs_equal(static, eager, "graph replay vs eager")
    return eager


def assert_deterministic(fn: Callable, *args, times: int = 3) -> Any:
    """``fn(*args)`` gives the same bits ``times`` times in a row. Returns the first outputs."""
    first = fn(*args)
    for i in range(1, times):
        _assert_outputs_equal(fn(*args), first, f"call {i + 1} vs call 1")
    return first


# ---- row invariance ----------------------------------------------------------------------------


def _row_tensors(x_rows) -> tuple[torch.Tensor, ...]:
    return tuple(x_rows) if isinstance(x_rows, (tuple, list)) else (x_rows,)


def _check_rows(rows: tuple[torch.Tensor, ...], row_dim: int) -> int:
    n = rows[0].shape[row_dim]
    for t in rows[1:]:
        if t.shape[row_dim] != n:
            raise ValueError(f"row tensors disagree on the row count: {[list(r.shape) for r in rows]}")
    return n


def _first_bad_row(got: torch.Tensor, want: torch.Tensor, row_dim: int) -> int:
    neq = (_bits(got) != _bits(want)).movedim(row_dim, 0).reshape(got.shape[row_dim], -1).any(1)
    return int(neq.nonzero()[0])


def assert_row_invariant(fn: Callable, x_rows, *other_args, max_rows: int = 32, row_dim: int = 0) -> None:
    """For every M in 1..min(max_rows, rows): ``fn`` on the first M rows gives, for each row r < M,
    the bits of ``fn`` on row r alone.

    ``x_rows``: a tensor, or a tuple of tensors sliced together (x and residual, x and gate), with the
    rows along ``row_dim``; ``other_args`` are passed unchanged after them. Every output of ``fn``
    (a tensor or a tuple of them) must have the rows along ``row_dim`` too. Rows are taken with
    ``narrow``, so a strided ``x`` stays strided.
    """
    rows = _row_tensors(x_rows)
    n = min(_check_rows(rows, row_dim), max_rows)
    singles = [_as_tensors(fn(*(t.narrow(row_dim, r, 1) for t in rows), *other_args)) for r in range(n)]
    if n == 0:
        return
    stacked = [torch.cat([s[k] for s in singles], dim=row_dim) for k in range(len(singles[0]))]
    for m in range(1, n + 1):
        outs = _as_tensors(fn(*(t.narrow(row_dim, 0, m) for t in rows), *other_args))
        if len(outs) != len(stacked):
            raise AssertionError(f"M={m}: {len(outs)} outputs vs {len(stacked)} for one row")
        for k, (o, s) in enumerate(zip(outs, stacked)):
            want = s.narrow(row_dim, 0, m)
            if o.shape != want.shape or o.dtype != want.dtype:
                raise AssertionError(f"M={m}, output {k}: {o.dtype} {list(o.shape)} vs 1-row calls "
                                     f"{want.dtype} {list(want.shape)}")
            if not torch.equal(_bits(o), _bits(want)):
                r = _first_bad_row(o, want, row_dim)
                assert_bitwise_equal(o.narrow(row_dim, r, 1), want.narrow(row_dim, r, 1),
                                     f"row invariance: row {r} of the M={m} call, output {k}, vs the "
                                     f"1-row call of that row")


def assert_row_invariant_at(fn: Callable, x_rows, row: int, *other_args, row_dim: int = 0) -> None:
    """Row ``row`` of ``fn(x_rows, *other_args)`` (an M-row call) has the bits of ``fn`` on that row
    alone. With ``x_rows`` built by placing one row at a chosen position among other rows, this is
    the check the hypothesis fuzz runs for (M, position, shape, dtype)."""
    rows = _row_tensors(x_rows)
    m = _check_rows(rows, row_dim)
    if not 0 <= row < m:
        raise ValueError(f"row {row} out of range for {m} rows")
    full = _as_tensors(fn(*rows, *other_args))
    one = _as_tensors(fn(*(t.narrow(row_dim, row, 1) for t in rows), *other_args))
    if len(full) != len(one):
        raise AssertionError(f"{len(full)} outputs for M={m} vs {len(one)} for one row")
    for k, (f, o) in enumerate(zip(full, one)):
        assert_bitwise_equal(f.narrow(row_dim, row, 1), o,
                             f"row invariance: row {row} of the M={m} call, output {k}, vs the 1-row call")


def assert_knob_keeps_bits(fn: Callable, x_rows: torch.Tensor, knob: str, value: str, *,
                           rows: Sequence[int] = (1, 3, 8, 9, 16, 17, 25, 32),
                           extras: Sequence[tuple] = ((),), what: str = "") -> None:
    """For every M in ``rows`` and every argument tuple in ``extras``: ``fn(x_rows[:M], *extra)`` as the
    knobs stand and with ``knob`` set to ``value`` give the same bits."""
    from . import knobs

    for m in rows:
        for i, extra in enumerate(extras):
            got = fn(x_rows[:m], *extra)
            with knobs.override(**{knob: value}):
                want = fn(x_rows[:m], *extra)
            assert_bitwise_equal(got, want, f"{what}{m} rows, extra arguments #{i}: {knob}={value} changes bits")


def assert_xfrag_knob(call: Callable, x_rows: torch.Tensor, bias: torch.Tensor, x_long: torch.Tensor, knob: str,
                      kernel: str, prefill_knob: str) -> None:
    """The fragment-ordered x of a weight GEMM's stream kernel (``knob``: auto / 0 / 1; its copy kernel
    ``xfrag_kernel`` and the GEMM kernel ``kernel``), for ``call(x, bias=None, out_dtype=None)`` on a
    weight the kernel serves and a 32-row (possibly strided) ``x_rows``: forced on, every row count
    launches the copy and the kernel and gives the bits of the row-major reads (0), with bias and fp32
    output, in a CUDA graph and in 32-row slices of ``x_long`` (``prefill_knob`` = chunked); rows stay
    invariant; auto launches them on compute capability 9 from 9 rows only."""
    from . import knobs

    def frag(m: int) -> list[str]:
        return [s for s in cuda_kernel_names(lambda: call(x_rows[:m])) if "xfrag_kernel" in s or kernel in s]

    cc9 = torch.cuda.get_device_properties(x_rows.device).major == 9
    what = f"{x_rows.dtype} {knob}: "
    for m in (1, 8, 9, 32):
        with knobs.override(**{knob: "1"}):
            assert len(frag(m)) == 2, f"{what}knob 1, {m} rows"
        with knobs.override(**{knob: "0"}):
            assert not frag(m), f"{what}knob 0, {m} rows"
        assert len(frag(m)) == (2 if cc9 and m >= 9 else 0), f"{what}auto, {m} rows"
    with knobs.override(**{knob: "0"}):
        assert_knob_keeps_bits(lambda t, *e: call(t, *e), x_rows, knob, "1", rows=(1, 3, 8, 9, 16, 17, 24, 25, 32),
                               extras=((None, None), (bias, torch.float32)), what=what)
        want = call(x_rows[:27], bias)
    with knobs.override(**{knob: "1"}):
        assert_row_invariant(lambda t: call(t), x_rows, max_rows=32)
        assert_bitwise_equal(assert_graph_equals_eager(lambda t: call(t, bias), x_rows[:27]), want,
                             f"{what}graph with the copy vs row-major")
    with knobs.override(**{prefill_knob: "chunked", knob: "0"}):
        assert_knob_keeps_bits(lambda t: call(t), x_long, knob, "1", rows=(x_long.shape[0],),
                               what=f"{what}chunked: ")


def cuda_kernel_names(fn: Callable, *args) -> list[str]:
    """The names of the CUDA kernels ``fn(*args)`` launches, in launch order (torch.profiler's CUDA
    activity; the call runs once more first, outside the profile, so lazy setup is not in it)."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# ---- draft trees ----------------------------------------------------------------------------------

def dfs_trees(max_nodes: int):
    """A hypothesis strategy (hypothesis is imported only here): the parents of a random tree of 1 to
    ``max_nodes`` nodes in depth-first pre-order, -1 for a child of the committed state. Each node
    takes any depth from 1 to one deeper than the node before it; its parent is the current path's
    node one level up (the order ``gdn_tree_verify``, ``conv_tree`` and ``attn_decode``'s masks take)."""
    from hypothesis import strategies as st

    @st.composite
    def trees(draw):
        n = draw(st.integers(1, max_nodes))
        parents, path = [], [-1]
        for i in range(n):
            d = draw(st.integers(1, len(path)))
            parents.append(path[d - 1])
            del path[d:]
            path.append(i)
        return parents

    return trees()

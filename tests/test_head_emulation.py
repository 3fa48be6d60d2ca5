"""The output head's tile kernels (csrc/gemm/head_tiles.cuh) run on the host by
tests/native/head_host_emulation.cpp. Its mma is a model (exact products, a double sum, one fp32
rounding), so its bits are not a GPU's: what it checks is the loaders, the stage ring, the fragment
layouts, the stores and the greedy epilogue against the reference, and that the column tile, the
stage count and the row count change no bit under that model. (Its own module: test_head.py runs
every test under both CUDA kernels.)"""
from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from qwen38_kernels import testing as qt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_head import _within_bound  # noqa: E402


@pytest.fixture(scope="session")
def head_emulator(host_emulator):
    return host_emulator("head_host_emulation")


def _emulate_head(exe, tmp_path, x, w, *, cols, stages, argmax, copies="late", sched="rr", tiles=0):
    import subprocess
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "x.bin").write_bytes(x.contiguous().view(torch.int16).numpy().tobytes())
    (tmp_path / "w.bin").write_bytes(w.contiguous().view(torch.int16).numpy().tobytes())
    prm = {"m": x.shape[0], "v": w.shape[0], "k": x.shape[1], "f16": int(x.dtype == torch.float16), "cols": cols,
           "stages": stages, "argmax": int(argmax), "copies": copies, "sched": sched, "x": "x.bin", "w": "w.bin"}
    if tiles:
        prm["tiles"] = tiles  # the narrow kernel's balanced tiles (QWEN38_HEAD_BALANCE): this many CTAs
    (tmp_path / "params.txt").write_text("".join(f"{kk} {vv}\n" for kk, vv in prm.items()))
    subprocess.run([str(exe), str(tmp_path)], check=True, capture_output=True, timeout=900)
    if argmax:
        val = torch.frombuffer(bytearray((tmp_path / "best_val.bin").read_bytes()), dtype=torch.float32)
        idx = torch.frombuffer(bytearray((tmp_path / "best_idx.bin").read_bytes()), dtype=torch.int64)
        return idx, val
    y = torch.frombuffer(bytearray((tmp_path / "y.bin").read_bytes()), dtype=torch.float32)
    return y.view(x.shape[0], w.shape[0])


# (column tile, stages): the tiles kernel at 3 / 4 stages, the narrow kernels at 4 / 8
_EMU_TILES = [(128, 3), (128, 4), (64, 4), (64, 8), (32, 8)]


@pytest.mark.parametrize("copies,sched", [("late", "prio"), ("early", "prio"), ("late", "rr")])
def test_host_emulation_tiles_logits_and_argmax(head_emulator, tmp_path, copies, sched):
    """5 rows, 200 columns (a partial last tile at every width), K = 320 (5 stages of 64): the logits
    within the float64 bound and bit-equal across the column tiles and stage counts; head_argmax's
    (index, logit) the winner of those logits, bit for bit; a tie and a NaN row resolved as documented
    (lowest index; NaN first)."""
    x = qt.randn_nonzero(5, 320, dtype=torch.bfloat16, seed=61)
    w = qt.randn_nonzero(200, 320, dtype=torch.bfloat16, seed=62, scale=0.05)
    w[150] = w[17]  # a tie in every row: the lower index wins
    x[3, 7] = float("nan")  # row 3: every logit NaN, the first column wins
    first = None
    for cols, stages in _EMU_TILES:
        y = _emulate_head(head_emulator, tmp_path / f"y{cols}-{stages}", x, w, cols=cols, stages=stages,
                          argmax=False, copies=copies, sched=sched)
        ok = torch.arange(5) != 3
        _within_bound(y[ok], x[ok], w, f"emulated tiles {cols} x {stages}")
        assert bool(torch.isnan(y[3]).all())
        if first is None:
            first = y
        qt.assert_bitwise_equal(torch.where(torch.isnan(y), 0, y), torch.where(torch.isnan(first), 0, first),
                                f"columns {cols}, {stages} stages vs 128 x 3")
        idx, val = _emulate_head(head_emulator, tmp_path / f"a{cols}-{stages}", x, w, cols=cols, stages=stages,
                                 argmax=True, copies=copies, sched=sched)
        want = torch.where(torch.isnan(y), float("inf"), y).argmax(-1)  # NaN counts as the maximum
        assert idx.tolist() == want.tolist(), (cols, stages, idx.tolist(), want.tolist())
        assert idx[3] == 0 and bool(torch.isnan(val[3]))
        qt.assert_bitwise_equal(val[ok], y[ok].gather(-1, idx[ok, None])[:, 0], f"argmax logit {cols} x {stages}")


@pytest.mark.parametrize("cols,stages,tiles", [(64, 4, 4), (64, 8, 5), (64, 4, 7), (64, 4, 25), (32, 4, 7),
                                               (32, 8, 12)])
def test_host_emulation_balanced_tiles_are_the_same_logits(head_emulator, tmp_path, cols, stages, tiles):
    """QWEN38_HEAD_BALANCE: T tiles of near-equal width (the 25 column groups of 8 of V = 200 cut at
    i 25 / T; 8 columns of the last group past V) give the uniform tiles' logits and argmax, bit for bit:
    every column written once, none lost at the cuts."""
    x = qt.randn_nonzero(9, 192, dtype=torch.bfloat16, seed=71)
    w = qt.randn_nonzero(197, 192, dtype=torch.bfloat16, seed=72, scale=0.05)
    w[190] = w[3]  # a tie across tiles: the lower index wins
    want = _emulate_head(head_emulator, tmp_path / "u", x, w, cols=cols, stages=stages, argmax=False)
    _within_bound(want, x, w, "uniform tiles")
    y = _emulate_head(head_emulator, tmp_path / "b", x, w, cols=cols, stages=stages, argmax=False, tiles=tiles,
                      sched="prio")
    qt.assert_bitwise_equal(y, want, f"{tiles} balanced tiles of <= {cols} columns")
    idx, val = _emulate_head(head_emulator, tmp_path / "a", x, w, cols=cols, stages=stages, argmax=True,
                             tiles=tiles)
    assert idx.tolist() == want.argmax(-1).tolist()
    qt.assert_bitwise_equal(val, want.gather(-1, idx[:, None])[:, 0], "argmax logit")


def test_host_emulation_rows_are_their_one_row_calls(head_emulator, tmp_path):
    """Under the emulator's mma model: each row of a 32-row call == its 1-row call, bit for bit, at the
    default (64 columns, 8 stages) and the 128-column tiles."""
    x = qt.randn_nonzero(32, 192, dtype=torch.float16, seed=71)
    w = qt.randn_nonzero(96, 192, dtype=torch.float16, seed=72, scale=0.05)
    for cols, stages in [(64, 8), (128, 3)]:
        y = _emulate_head(head_emulator, tmp_path / f"all{cols}", x, w, cols=cols, stages=stages, argmax=False)
        for r in (0, 13, 31):
            one = _emulate_head(head_emulator, tmp_path / f"r{r}-{cols}", x[r:r + 1], w, cols=cols, stages=stages,
                                argmax=False)
            qt.assert_bitwise_equal(y[r:r + 1], one, f"row {r} of 32, {cols} columns")


def test_host_emulation_argmax_ties_inside_and_across_tiles(head_emulator, tmp_path):
    """Three equal top columns in every row: 10 and 45 (two column warps of one tile at 64 and 128
    columns; two tiles at 32) and 170 (another tile): the lowest index, 10, wins at every width."""
    x = qt.randn_nonzero(4, 128, dtype=torch.bfloat16, seed=81).abs()
    w = qt.randn_nonzero(200, 128, dtype=torch.bfloat16, seed=82, scale=0.05)
    w[10] = w[45] = w[170] = 0.5
    for cols, stages in _EMU_TILES:
        idx, val = _emulate_head(head_emulator, tmp_path / f"t{cols}-{stages}", x, w, cols=cols, stages=stages,
                                 argmax=True)
        assert idx.tolist() == [10] * 4, (cols, stages, idx.tolist())

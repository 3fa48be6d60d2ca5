"""Decode attention's CUDA kernels (csrc/attn/attn_kernel.cuh) run on the host by
tests/native/attn_host_emulation.cpp. Its mma is a model (exact products, a double sum, one fp32
rounding), so its bits are not a GPU's: what it checks is the token table and visible-draft lists, the
walk of a row's keys (prefix chunks shared by a CTA's tokens, the chunks past the prefix gathered per
token, split ranges), the cp.async slots and barriers, the fragment layouts, the online softmax, the
split workspace and its merge, the padding rows - against the float64 bound - and, under that model,
that a verify row (chain or tree node) equals its one-token call after compaction bit for bit across
chunk (64 keys) and split (256 keys) boundaries. The GPU runs the same checks in test_attn.py."""
from __future__ import annotations

import math
import struct
import subprocess

import pytest
import torch

from qwen38_kernels import testing as qt
from qwen38_kernels.reference import attn as ref


@pytest.fixture(scope="session")
def attn_emulator(host_emulator):
    return host_emulator("attn_host_emulation")


def _emulate(exe, path, qq, k, v, kv_lens, mask=None, lengths=None, *, scale=None, copies="late", sched="rr",
             split=None, ring=2):
    """The kernels' output for these inputs (contiguous copies; index tensors as int64)."""
    path.mkdir(parents=True, exist_ok=True)
    b, t, hq, d = qq.shape
    sc = d ** -0.5 if scale is None else scale
    scale_log2 = struct.unpack("<I", struct.pack("<f", sc * math.log2(math.e)))[0]  # the launcher's rounding
    prm = {"b": b, "t": t, "hq": hq, "hkv": k.shape[1], "d": d, "slots": k.shape[2],
           "f16": int(qq.dtype == torch.float16), "scale_bits": scale_log2, "copies": copies, "sched": sched,
           "q": "q.bin", "k": "k.bin", "v": "v.bin", "kv_lens": "kv_lens.bin"}
    if split is not None:  # the split rule "MIN,MAX" (QWEN38_ATTN_SPLIT)
        prm["split"] = split
    prm["ring"] = ring  # K/V slots of the split kernel (QWEN38_ATTN_SLOTS)
    for name, x in (("q", qq), ("k", k), ("v", v)):
        (path / f"{name}.bin").write_bytes(x.contiguous().view(torch.int16).numpy().tobytes())
    (path / "kv_lens.bin").write_bytes(kv_lens.to(torch.int64).numpy().tobytes())
    if lengths is not None:
        prm["lengths"] = "lengths.bin"
        (path / "lengths.bin").write_bytes(lengths.to(torch.int64).numpy().tobytes())
    if mask is not None:
        prm["mask"] = "mask.bin"
        (path / "mask.bin").write_bytes(mask.contiguous().to(torch.uint8).numpy().tobytes())
    (path / "params.txt").write_text("".join(f"{kk} {vv}\n" for kk, vv in prm.items()))
    subprocess.run([str(exe), str(path)], check=True, capture_output=True, timeout=600)
    o = torch.frombuffer(bytearray((path / "o.bin").read_bytes()), dtype=torch.int16)
    return o.view(qq.dtype).view(qq.shape)


def _inputs(b, t, hq, hkv, d, slots, seed, dt):
    qq = qt.randn_nonzero(b, t, hq, d, dtype=dt, seed=seed)
    k = qt.randn_nonzero(b, hkv, slots, d, dtype=dt, seed=seed + 1)
    v = qt.randn_nonzero(b, hkv, slots, d, dtype=dt, seed=seed + 2)
    return qq, k, v


def _idx(values):
    return torch.tensor(values, dtype=torch.int64)


def _within_bound(o, qq, k, v, kl, mask=None, lengths=None, what=""):
    o64, bound = ref.attn_decode_f64_bound(qq, k, v, kl, mask, lengths)
    err = (o.double() - o64).abs()
    bad = err > bound  # (NaN, an unwritten element, is outside too)
    bad |= torch.isnan(o)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} of {bad.numel()} elements outside the f64 bound; first "
                                 f"at {tuple(int(i) for i in bad.nonzero()[0])}")


def _dfs_tree(t: int) -> list[int]:
    """A depth-first tree of t nodes: alternately one level deeper and a sibling one level up."""
    par, path = [], [-1]
    for i in range(t):
        d = len(path) if i % 3 else max(1, len(path) - 1)
        par.append(path[d - 1])
        del path[d:]
        path.append(i)
    return par


# (B, T, Hq, Hkv, D, dtype, kv_lens, lengths, tree parents per sequence or None, copies, sched)
_CASES = {
    # a chain batch with padding rows: G 6, two tiles of two tokens, rows of 1 and 2 splits (n 296..300)
    "chain-pad-g6-d128-bf16": (2, 5, 12, 2, 128, torch.bfloat16, [300, 70], [5, 2], None, "late", "prio"),
    # a tree batch, G 16 (a tile a token), fp16, one sequence with no rows at all
    "tree-g16-d64-f16": (3, 9, 16, 1, 64, torch.float16, [140, 75, 9], [9, 6, 0],
                         [[-1, 0, 1, 1, -1, 4, 5, 4, 7], [-1, 0, 0, 2, 3, -1, 0, 0, 0], [-1] * 9], "early", "rr"),
    # the model's geometry, D 256, 3 splits (n 519..521), fp16
    "chain-g6-d256-f16": (1, 3, 6, 1, 256, torch.float16, [521], None, None, "late", "rr"),
    # G 1: 16 tokens a tile, 32 a CTA (the whole 32-bit member mask), two token groups
    "chain-g1-t40-d64-bf16": (1, 40, 2, 2, 64, torch.bfloat16, [300], None, None, "late", "prio"),
    # G 5: 3 tokens a tile (row 15 a zero row), caches shorter than a chunk
    "chain-g5-short-f16": (2, 7, 10, 2, 128, torch.float16, [60, 7], [7, 4], None, "early", "prio"),
    # a one-key cache and a sequence with no keys and no rows
    "one-key-and-empty-bf16": (2, 1, 4, 1, 64, torch.bfloat16, [1, 0], [1, 0], None, "late", "rr"),
    # a 64-node tree, G 16
    "tree-t64-g16-d64-bf16": (1, 64, 16, 1, 64, torch.bfloat16, [200], None, [_dfs_tree(64)], "late", "prio"),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_host_emulation_within_the_f64_bound(attn_emulator, tmp_path, case):
    b, t, hq, hkv, d, dt, kl, ls, parents, copies, sched = _CASES[case]
    qq, k, v = _inputs(b, t, hq, hkv, d, max(max(kl), 1), seed=len(case), dt=dt)
    kl = _idx(kl)
    ls = None if ls is None else _idx(ls)
    mask = None
    if parents is not None:
        mask = torch.stack([ref.tree_mask(p) for p in parents])
    o = _emulate(attn_emulator, tmp_path, qq, k, v, kl, mask, ls, copies=copies, sched=sched)
    _within_bound(o, qq, k, v, kl, mask, ls, case)
    # three K/V slots (two loads in flight; QWEN38_ATTN_SLOTS): the same bits
    o3 = _emulate(attn_emulator, tmp_path / "ring3", qq, k, v, kl, mask, ls, copies=copies, sched=sched, ring=3)
    qt.assert_bitwise_equal(o3, o, f"{case}: three K/V slots against two")
    if ls is not None:  # padding rows are zeros
        for i in range(b):
            assert not bool(o[i, int(ls[i]):].float().any()), f"{case}: padding rows of sequence {i}"


def test_host_emulation_chain_rows_are_one_token_calls(attn_emulator, tmp_path):
    """A 12-row chain after a prefix of 250: its rows see 251..262 keys, across the chunk and split
    boundary at 256 (rows of one and of two splits in one CTA, the last chunk gathered per token). Each
    row == the one-token call at its position, bit for bit; the batch position and a second sequence
    change nothing."""
    t, hq, hkv, d, prefix = 12, 6, 1, 64, 250
    qq, k, v = _inputs(2, t, hq, hkv, d, prefix + t + 4, seed=5, dt=torch.bfloat16)
    qq[1], k[1], v[1] = qq[0], k[0], v[0]
    k[:, :, prefix + t:], v[:, :, prefix + t:] = float("nan"), float("nan")  # never read
    kl = _idx([prefix + t, prefix + t])
    o = _emulate(attn_emulator, tmp_path / "all", qq, k, v, kl, sched="prio")
    _within_bound(o, qq, k, v, kl, what="chain")
    qt.assert_bitwise_equal(o[0], o[1], "the same rows, another batch position")
    for r in (0, 5, 6, 11):
        one = _emulate(attn_emulator, tmp_path / f"r{r}", qq[:1, r:r + 1], k[:1], v[:1], _idx([prefix + r + 1]))
        qt.assert_bitwise_equal(o[0, r], one[0, 0], f"chain row {r} (n = {prefix + r + 1})")


def test_host_emulation_tree_nodes_are_one_token_calls_after_compaction(attn_emulator, tmp_path):
    """A 14-node tree after a prefix of 58 (its nodes see 59..64+ keys: paths that end in the first
    chunk and paths that reach the second), G 6 (two tiles of two tokens a CTA): node i == the one-token
    call on a cache compacted to the prefix and i's path, bit for bit."""
    parents = [-1, 0, 1, 2, 3, 4, 5, 6, 1, 8, -1, 10, 11, 12]
    t, hq, hkv, d, prefix = len(parents), 12, 2, 128, 58
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t + 2, seed=9, dt=torch.float16)
    mask = ref.tree_mask(parents)[None]
    kl = _idx([prefix + t])
    o = _emulate(attn_emulator, tmp_path / "tree", qq, k, v, kl, mask, copies="early", sched="prio")
    _within_bound(o, qq, k, v, kl, mask, what="tree")
    for i in (3, 7, 9, 13):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = parents[j]
        keep = _idx(list(range(prefix)) + [prefix + j for j in path[::-1]])
        one = _emulate(attn_emulator, tmp_path / f"n{i}", qq[:, i:i + 1], k.index_select(2, keep),
                       v.index_select(2, keep), _idx([keep.numel()]))
        qt.assert_bitwise_equal(o[0, i], one[0, 0], f"tree node {i} (path {path[::-1]})")


def test_host_emulation_rows_past_16k_keys_split_longer(attn_emulator, tmp_path):
    """Past 256 chunks (16384 keys) a row's splits hold 5 chunks instead of 4 (at most 64 splits). Four
    chain rows after 16382 keys, one CTA (G 6: two tiles of two tokens): rows 0, 1 see 16383 / 16384 keys
    (splits of 4 chunks), rows 2, 3 see 16385 / 16386 (splits of 5), so the CTA of split s serves chunks
    4s.. for two rows and 5s.. for the others. Within the bound, and rows 1 and 2 == their one-token
    calls, bit for bit."""
    t, hq, hkv, d, prefix = 4, 6, 1, 64, 16382
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t, seed=3, dt=torch.bfloat16)
    kl = _idx([prefix + t])
    o = _emulate(attn_emulator, tmp_path / "all", qq, k, v, kl)
    _within_bound(o, qq, k, v, kl, what="past 16K keys")
    for r in (1, 2):
        one = _emulate(attn_emulator, tmp_path / f"r{r}", qq[:, r:r + 1], k, v, _idx([prefix + r + 1]))
        qt.assert_bitwise_equal(o[0, r], one[0, 0], f"row {r} (n = {prefix + r + 1})")


@pytest.mark.parametrize("split", ["1,8", "2,3"])
def test_host_emulation_other_split_rules_keep_rows_one_token_calls(attn_emulator, tmp_path, split):
    """QWEN38_ATTN_SPLIT (the lab knob of the split rule): 1,8 cuts a row into one-chunk splits up to 8
    chunks and then longer ones, 2,3 into at most 3 splits of 2 or more chunks. Nine chain rows after
    505 keys see 506..514 keys: rows 0..6 8 chunks (8 splits of 1; 3 of 3, 3, 2), rows 7, 8 9 chunks
    (5 splits of 2, 2, 2, 2, 1; 3 of 3). Within the bound, and each row == its one-token call under the
    same rule."""
    t, hq, hkv, d, prefix = 9, 6, 1, 64, 505
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t, seed=11, dt=torch.bfloat16)
    kl = _idx([prefix + t])
    o = _emulate(attn_emulator, tmp_path / "all", qq, k, v, kl, split=split, ring=3)
    _within_bound(o, qq, k, v, kl, what=f"split rule {split}")
    for r in (2, 7, 8):
        one = _emulate(attn_emulator, tmp_path / f"r{r}", qq[:, r:r + 1], k, v, _idx([prefix + r + 1]), split=split,
                       ring=2 + r % 2)
        qt.assert_bitwise_equal(o[0, r], one[0, 0], f"row {r} (n = {prefix + r + 1}) under split rule {split}")

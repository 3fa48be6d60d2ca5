"""benchmarks/round.py: one decode round summed from the recorded per-op timings (CPU only)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _round_module():
    spec = importlib.util.spec_from_file_location("round_sum", ROOT / "benchmarks" / "round.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["round_sum"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _write(folder: Path, name: str, recs: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(recs))


def _rec(op, shape, m, us, nbytes=4_000_000, provider="qwen38"):
    return dict(op=op, provider=provider, shape=shape, M=m, us=us, bytes=nbytes, ceiling_GBps=4000.0)


def test_sums_counts_picks_rows_and_lists_missing_ops(tmp_path):
    rs = _round_module()
    res = tmp_path / "gpu"
    _write(res, "nvfp4", [_rec("nvfp4_linear", "34816x5120 gate+up", 1, 50.0),
                          _rec("nvfp4_linear", "34816x5120 gate+up", 32, 90.0),
                          _rec("nvfp4_linear", "34816x5120 gate+up", 1, 1.0, provider="cuBLAS bf16"),
                          _rec("nvfp4_linear", "5120x17408 down", 1, 30.0)])
    _write(res, "norm", [_rec("add_rms_norm", "5120", 1, 2.0), _rec("add_rms_norm", "5120", 32, 3.0)])
    _write(res, "gdn", [_rec("gdn_step", "B sequences x 1 token", 1, 5.0)])
    assert rs.main(["--results", str(res), "--out", str(tmp_path / "out")]) == 0
    rounds = {r["name"]: r for r in json.loads((tmp_path / "out" / "round.json").read_text())}
    dec, ver = rounds["decode"], rounds["verify 16"]
    lines = {x["what"]: x for x in dec["lines"]}
    assert lines["nvfp4_linear 34816x5120: MLP gate+up"]["us"] == 64 * 50.0  # qwen38 only, 1 row
    assert lines["add_rms_norm 5120 (input, post-attention)"]["us"] == 128 * 2.0
    assert lines["gdn_step"]["us"] == 48 * 5.0
    assert abs(dec["total_us"] - sum(x["us"] for x in dec["lines"])) < 1e-6
    assert "decode attention (1 query, 8192-key prefix)" in dec["missing"]
    assert "nvfp4_linear 16384x5120: GDN qkv+z" in dec["missing"]
    # 16 rows: the 32-row record stands in (an upper bound), a shape without one is missing
    vlines = {x["what"]: x for x in ver["lines"]}
    assert vlines["nvfp4_linear 34816x5120: MLP gate+up"]["us_each"] == 90.0
    assert vlines["nvfp4_linear 34816x5120: MLP gate+up"]["rows_used"] == 32
    assert "nvfp4_linear 5120x17408: MLP down" in ver["missing"]
    assert lines["nvfp4_linear 34816x5120: MLP gate+up"]["floor_us"] == 64 * 1e-3 * 4_000_000 / 4000.0
    found = [x for x in dec["lines"] if x["us_each"] is not None]
    assert dec["bytes"] == sum(4_000_000 * x["count"] for x in found)
    assert abs(dec["gb10_floor_us"] - dec["bytes"] / rs.GB10_GBPS / 1e3) < 1e-6
    md = (tmp_path / "out" / "round.md").read_text()
    assert "**Total:" in md and "(>= 32)" in md


def test_the_recorded_h200_round_adds_up():
    """The committed H200 records give both rounds, every op but the unbuilt one (RoPE) found, decode
    attention at the default 8192-key prefix included."""
    rs = _round_module()
    recs = rs.Records(ROOT / "benchmarks" / "results" / "h200")
    for name, rows in (("decode", 1), ("verify 16", 16)):
        rd = rs.build_round(recs, name, rows)
        assert set(rd.missing) == {"RoPE"}
        attn = f"decode attention ({rows} quer{'y' if rows == 1 else 'ies'}, 8192-key prefix)"
        assert any(line.what == attn for line in rd.lines), [line.what for line in rd.lines]
        assert rd.floor_us < rd.total_us


def test_an_nvfp4_head_record_adds_two_rounds(tmp_path):
    """bench_head's `qwen38 nvfp4 head` records (the head's weight in NVFP4) give two more rounds with
    that head in place of the bf16 one; the bf16 rounds keep theirs."""
    rs = _round_module()
    res = tmp_path / "gpu"
    _write(res, "head", [_rec("head", "248320x5120 lm_head", 1, 580.0, nbytes=2_543_000_000),
                         _rec("head", "248320x5120 lm_head", 1, 300.0, nbytes=715_000_000,
                              provider=rs.NVFP4_HEAD)])
    assert rs.main(["--results", str(res), "--out", str(tmp_path / "out")]) == 0
    rounds = {r["name"]: r for r in json.loads((tmp_path / "out" / "round.json").read_text())}
    assert set(rounds) == {"decode", "verify 16", "decode, NVFP4 head", "verify 16, NVFP4 head"}
    head = [x for x in rounds["decode"]["lines"] if x["what"].startswith("head_logits")][0]
    nv = [x for x in rounds["decode, NVFP4 head"]["lines"] if "the head in NVFP4" in x["what"]][0]
    assert head["us_each"] == 580.0 and nv["us_each"] == 300.0 and nv["bytes_each"] == 715_000_000
    assert rounds["decode"]["total_us"] - rounds["decode, NVFP4 head"]["total_us"] == 280.0
    _write(res, "head", [_rec("head", "248320x5120 lm_head", 1, 580.0)])  # no NVFP4 record: two rounds
    assert rs.main(["--results", str(res), "--out", str(tmp_path / "out")]) == 0
    assert len(json.loads((tmp_path / "out" / "round.json").read_text())) == 2


def test_attention_records_at_the_context_prefix(tmp_path):
    """bench_attn's records (shape "prefix=P T=T", M = T) stand for the 16 attention layers at the prefix
    --context names; another prefix leaves the line missing."""
    rs = _round_module()
    res = tmp_path / "gpu"
    _write(res, "attn", [_rec("attn_decode", "prefix=8192 T=1", 1, 25.0),
                         _rec("attn_decode", "prefix=8192 T=16", 16, 74.0),
                         _rec("attn_decode", "prefix=32768 T=1", 1, 60.0)])
    assert rs.main(["--results", str(res), "--out", str(tmp_path / "a")]) == 0
    rounds = {r["name"]: r for r in json.loads((tmp_path / "a" / "round.json").read_text())}
    att = {r: [x for x in rounds[r]["lines"] if x["what"].startswith("decode attention")][0] for r in rounds}
    assert att["decode"]["us"] == 16 * 25.0 and att["verify 16"]["us"] == 16 * 74.0
    assert rs.main(["--results", str(res), "--context", "32768", "--out", str(tmp_path / "b")]) == 0
    rounds = {r["name"]: r for r in json.loads((tmp_path / "b" / "round.json").read_text())}
    assert [x for x in rounds["decode"]["lines"] if x["what"].startswith("decode attention")][0]["us"] == 16 * 60.0
    assert "decode attention (16 queries, 32768-key prefix)" in rounds["verify 16"]["missing"]

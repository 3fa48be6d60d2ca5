"""CPU tests of the benchmark harness's reporting (qwen38_kernels.bench): who counts as a peer, the
limit columns, and the copy helper's argument check."""
import pytest
import torch

from qwen38_kernels import bench


def _rec(provider: str, us: float, m: int = 8192) -> bench.Record:
    return bench.Record.from_timing("rms_norm", provider, "5120", None, None, m, us, 168_000_000, 4600.0)


def test_best_peer_skips_our_variants_and_the_limits():
    rows = {p: _rec(p, us) for p, us in [("qwen38", 45.0), ("qwen38 PDL off", 40.0), ("F.rms_norm", 55.0),
                                          ("limit: copy of the same bytes", 43.0)]}
    peer = bench._best_peer(rows, "qwen38")
    assert peer is not None and peer.provider == "F.rms_norm"


def test_markdown_names_a_real_peer_and_reports_the_limit_share():
    recs = [_rec("qwen38", 45.0), _rec("F.rms_norm", 55.0), _rec("limit: copy of the same bytes", 43.0)]
    md = bench.markdown_report(recs, "norm", {"device": "test"})
    header = next(line for line in md.splitlines() if line.startswith("| shape"))
    assert "qwen38 speed as % of the copy of the same bytes" in header
    row = next(line for line in md.splitlines() if line.startswith("| 5120 | 8192"))
    assert "1.22x (F.rms_norm)" in row  # 55 / 45, not the copy's 43 / 45
    assert row.rstrip(" |").endswith("96%")  # 43 / 45


def test_copy_bytes_rejects_mismatched_tensors_naming_both():
    with pytest.raises(ValueError, match=r"src \(10,\).*dst \(12,\)"):
        bench.copy_bytes(torch.empty(12, dtype=torch.bfloat16), torch.empty(10, dtype=torch.bfloat16))


def test_with_knobs_sets_the_knob_for_the_call_only():
    import os
    before = os.environ.get("QWEN38_PDL")
    seen = bench.with_knobs(lambda a, b: (a + b, os.environ.get("QWEN38_PDL")), QWEN38_PDL="0")(1, 2)
    assert seen == (3, "0")
    assert os.environ.get("QWEN38_PDL") == before

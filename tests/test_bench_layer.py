"""benchmarks/bench_layer.py: the GDN decoder layer it times is wired from the library's ops (CPU paths)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("bench_layer", ROOT / "benchmarks" / "bench_layer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_layer_runs_on_the_cpu_and_changes_its_state():
    bl = _module()
    torch.manual_seed(1)
    layer = bl.make_layer("cpu")
    pool, conv = layer["pool"].clone(), layer["conv_state"].clone()
    env = {"x": torch.randn(1, bl.HIDDEN, dtype=torch.bfloat16),
           "r": torch.randn(1, bl.HIDDEN, dtype=torch.bfloat16)}
    x0 = env["x"]
    bl.run_layer(bl.layer_ops(layer), env)
    assert env["x"].shape == (1, bl.HIDDEN) and env["x"].dtype == torch.bfloat16
    assert bool(torch.isfinite(env["x"]).all()) and not torch.equal(env["x"], x0)
    # the decode step wrote slot 1 of the GDN pool and of the conv state, and nothing else
    assert not torch.equal(layer["pool"][1], pool[1]) and torch.equal(layer["pool"][0], pool[0])
    assert not torch.equal(layer["conv_state"][1], conv[1]) and torch.equal(layer["conv_state"][0], conv[0])
    assert env["qkvz"].shape == (1, 16384) and env["o2"].shape == (1, 6144) and env["gu"].shape == (1, 34816)


def test_smoke_entry_point():
    assert _module().main(["--smoke"]) == 0


def test_ba_first_only_reorders_the_projections():
    bl = _module()
    layer = bl.make_layer("cpu")
    names = [n for n, _ in bl.layer_ops(layer)]
    swapped = [n for n, _ in bl.layer_ops(layer, ba_first=True)]
    assert sorted(names) == sorted(swapped) and names != swapped
    assert swapped[1].endswith("(ba)") and swapped[2].endswith("(qkvz)") and names[3:] == swapped[3:]
    assert _module().main(["--smoke", "--ba-first"]) == 0


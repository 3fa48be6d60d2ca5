"""The main job (`python -m qwen38_kernels`; CI runs it itself): the argument builders of its GPU
benchmark table give arguments the ops accept, checked through the ops' CPU path, so a wrong shape
or argument order shows without a GPU."""
from __future__ import annotations

import torch

from qwen38_kernels import __main__ as main_job
from qwen38_kernels import ops


def test_gdn_and_conv_benchmark_arguments_are_accepted_by_the_ops():
    for b in (1, 8):
        o = ops.gdn_step(*main_job._gdn_args(b, 0, seed=b, device="cpu"))
        assert o.shape == (b, 48, 128) and torch.isfinite(o.float()).all()
    o = ops.gdn_chain_verify(*main_job._gdn_args(1, 16, seed=3, device="cpu"))
    assert o.shape == (1, 16, 48, 128)
    parents = main_job._tree_parents_32(device="cpu")
    o = ops.gdn_tree_verify(*main_job._gdn_args(1, 32, seed=4, device="cpu"), parents)
    assert o.shape == (1, 32, 48, 128) and torch.isfinite(o.float()).all()
    y = ops.conv_step(*main_job._conv_args(0, seed=5, device="cpu"))
    assert y.shape == (1, 10240)
    y = ops.conv_chain(*main_job._conv_args(16, seed=6, device="cpu"))
    assert y.shape == (1, 16, 10240)


def test_attention_benchmark_arguments_are_accepted_by_the_op():
    for t in (1, 16):
        o = ops.attn_decode(*main_job._attn_args(t, 40, seed=t, device="cpu"))
        assert o.shape == (1, t, 24, 256) and torch.isfinite(o.float()).all()

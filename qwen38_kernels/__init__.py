"""qwen38-kernels: row-invariant CUDA kernels for speculative decoding of Qwen3.8-27B.

    import qwen38_kernels as q
    y = q.rms_norm(x, w)                       # == torch.ops.qwen38.rms_norm(x, w, 1e-6, True)
    q.info()                                   # build, device, knobs, tables

Every op lives in ``torch.ops.qwen38`` (schemas in csrc/bindings.cpp), has a pure-PyTorch reference
of the same name in ``qwen38_kernels.reference`` (also its CPU kernel) and a fake kernel for
torch.compile.
"""
from __future__ import annotations

__version__ = "0.1.0"

import torch  # noqa: F401  (loads libtorch, which _C links against)

try:
    from . import _C  # noqa: F401  (registers the qwen38 schemas and CUDA kernels)
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        "qwen38_kernels._C is not built or does not load (" + str(e) + "). Build it with "
        "`pip install --no-build-isolation -e .` from the repository root, against the torch you "
        "import here."
    ) from e

from . import knobs, reference  # noqa: E402
from . import formats, nn, spec  # noqa: E402
from .ops import (add_rms_norm, attn_decode, conv_chain, conv_commit, conv_step, conv_tree, fp8_block_linear,  # noqa: E402
                  gdn_chain_verify, gdn_commit, gdn_commit_verify, gdn_step, gdn_step_raw, gdn_tree_verify,
                  head_argmax, head_logits, nvfp4_dequantize, nvfp4_linear, rms_norm, rms_norm_gated, silu_mul)
from ._info import check, info  # noqa: E402
from . import tables as _tables  # noqa: E402

_tables.register_skinny_tables()  # the current device's tile tables -> the skinny kernels' launch variants

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "silu_mul", "nvfp4_linear", "nvfp4_dequantize",
           "fp8_block_linear", "head_logits", "head_argmax", "gdn_step", "gdn_step_raw", "gdn_chain_verify",
           "gdn_tree_verify", "gdn_commit", "gdn_commit_verify", "conv_step", "conv_chain", "conv_tree",
           "conv_commit", "attn_decode", "formats", "nn", "info", "check", "knobs", "reference", "__version__"]

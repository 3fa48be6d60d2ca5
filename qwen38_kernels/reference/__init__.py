"""Pure-PyTorch references, one module per op family, with the same names as the ops.

norm: rms_norm, add_rms_norm, rms_norm_gated, silu_mul (ops with CUDA kernels)
gemm: nvfp4_linear (op; CUDA: skinny kernel for 1-32 rows, prefill paths for more), nvfp4_dequantize (op)
fp8:  fp8_block_linear, head_logits, head_argmax (references of ops still to build)
gdn:  gdn_gates, gdn_step(_raw), gdn_chain_verify, gdn_tree_verify, gdn_commit, conv_step,
      conv_chain, conv_tree, conv_commit (references of ops still to build)
attn: attn_decode (op; its CPU kernel, and CUDA's until the kernel lands), attn_decode_f64_bound
"""
from .attn import attn_decode, attn_decode_f64_bound
from .fp8 import fp8_block_linear, fp8_block_linear_f64_bound, head_argmax, head_logits, head_logits_f64_bound
from .gdn import (conv_chain, conv_commit, conv_step, conv_tree, gdn_chain_verify, gdn_commit, gdn_commit_verify,
                  gdn_gates, gdn_step, gdn_step_raw, gdn_tree_verify)
from .gemm import nvfp4_dequantize, nvfp4_linear, nvfp4_linear_f64_bound
from .norm import add_rms_norm, rms_norm, rms_norm_gated, rms_norm_gated_f64_branches, silu_mul, silu_mul_f64_branches

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "rms_norm_gated_f64_branches", "silu_mul",
           "silu_mul_f64_branches", "nvfp4_linear",
           "nvfp4_linear_f64_bound", "nvfp4_dequantize", "fp8_block_linear", "fp8_block_linear_f64_bound", "head_logits",
           "head_logits_f64_bound", "head_argmax", "gdn_gates", "gdn_step", "gdn_step_raw",
           "gdn_chain_verify", "gdn_tree_verify", "gdn_commit", "gdn_commit_verify", "conv_step", "conv_chain", "conv_tree",
           "conv_commit", "attn_decode", "attn_decode_f64_bound"]

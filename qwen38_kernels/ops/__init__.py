"""Public op wrappers, one module per family."""
from .attn import attn_decode
from .conv import conv_chain, conv_commit, conv_step, conv_tree
from .fp8 import fp8_block_linear
from .gdn import gdn_chain_verify, gdn_commit, gdn_commit_verify, gdn_step, gdn_step_raw, gdn_tree_verify
from .gemm import nvfp4_dequantize, nvfp4_linear
from .head import head_argmax, head_logits
from .norm import add_rms_norm, rms_norm, rms_norm_gated, silu_mul

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "silu_mul", "nvfp4_linear", "nvfp4_dequantize",
           "fp8_block_linear", "head_logits", "head_argmax", "gdn_step", "gdn_step_raw", "gdn_chain_verify",
           "gdn_tree_verify", "gdn_commit", "gdn_commit_verify", "conv_step", "conv_chain", "conv_tree",
           "conv_commit", "attn_decode"]

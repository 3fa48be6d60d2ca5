"""Public op wrappers, one module per family."""
from .fp8 import fp8_block_linear
from .gdn import gdn_chain_verify, gdn_commit, gdn_commit_verify, gdn_step, gdn_step_raw, gdn_tree_verify
from .gemm import nvfp4_linear
from .norm import add_rms_norm, rms_norm, rms_norm_gated

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "nvfp4_linear", "fp8_block_linear", "gdn_step", "gdn_step_raw",
           "gdn_chain_verify", "gdn_tree_verify", "gdn_commit", "gdn_commit_verify"]

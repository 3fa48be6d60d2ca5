"""Pure-PyTorch references, one module per op family, with the same names as the ops."""
from .gemm import nvfp4_linear, nvfp4_linear_f64_bound
from .norm import add_rms_norm, rms_norm, rms_norm_gated, rms_norm_gated_f64_branches

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "rms_norm_gated_f64_branches", "nvfp4_linear",
           "nvfp4_linear_f64_bound"]

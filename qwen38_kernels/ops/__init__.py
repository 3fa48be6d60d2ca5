"""Public op wrappers, one module per family."""
from .fp8 import fp8_block_linear
from .gemm import nvfp4_linear
from .head import head_argmax, head_logits
from .norm import add_rms_norm, rms_norm, rms_norm_gated

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gated", "nvfp4_linear", "fp8_block_linear", "head_logits", "head_argmax"]

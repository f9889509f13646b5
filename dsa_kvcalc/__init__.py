"""dsa-kvcalc: capacity calculator for serving DeepSeek-Sparse-Attention models on vLLM."""

__version__ = "0.1.0"

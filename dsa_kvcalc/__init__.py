"""dsa-kvcalc: capacity calculator for serving DeepSeek-Sparse-Attention models on vLLM."""

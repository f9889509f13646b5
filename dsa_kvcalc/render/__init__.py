"""Rendering for people: tables, markdown, CSV, text. No arithmetic beyond unit conversion for display."""

from dsa_kvcalc.catalog import GIB


def gib(value: int) -> str:
    """Bytes as GiB with two decimals, the way vLLM prints them."""
    return f"{value / GIB:.2f}"

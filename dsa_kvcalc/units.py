"""Units: GiB and MiB as vLLM prints them (2^30, 2^20 bytes)."""

GIB = 1 << 30
MIB = 1 << 20


def bytes_of_gib(value: float) -> int:
    return round(value * GIB)

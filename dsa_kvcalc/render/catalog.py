"""The model and GPU catalogs as tables, each entry with its source. Columns fold rather than cut a name."""

from dsa_kvcalc.catalog import GIB, GPUS, MODELS


def render_models(console) -> None:
    from rich.table import Table

    table = Table("model", "layers", "index topk", "KV B/token fp8", "KV B/token bf16", "checkpoint GiB", "max len")
    for column in table.columns:
        column.overflow = "fold"
    for m in MODELS:
        table.add_row(m.name, str(m.num_layers), str(m.index_topk), f"{m.kv_bytes_per_token['fp8']:,}",
                      f"{m.kv_bytes_per_token['bf16']:,}", f"{m.checkpoint_bytes / GIB:.1f}",
                      f"{m.max_position_embeddings:,}")
    console.print(table)
    for m in MODELS:
        console.print(f"{m.name}: {m.source}; KV: {m.kv_note}")


def render_gpus(console) -> None:
    from rich.table import Table

    table = Table("gpu", "arch", "total memory (torch)", "bytes")
    for column in table.columns:
        column.overflow = "fold"
    for g in GPUS:
        table.add_row(g.name, g.arch, f"{g.total_memory_bytes / GIB:.2f} GiB", f"{g.total_memory_bytes:,}")
    console.print(table)
    for g in GPUS:
        console.print(f"{g.name}: {g.source}")

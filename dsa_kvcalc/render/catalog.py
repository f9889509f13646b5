"""The model and GPU catalogs as tables (render.print_table: no figure or name is ever cut), each entry with its
source."""

import dataclasses

from dsa_kvcalc.catalog import GPUS, MODELS
from dsa_kvcalc.units import GIB
from dsa_kvcalc.render import json_text, print_table, print_prose
from dsa_kvcalc.report import TOOL


def render_models(console) -> None:
    header = ["model", "layers + MTP", "index topk", "KV cache", "checkpoint GiB", "max len"]
    rows = [[m.name, f"{m.num_layers} + {m.mtp_layers}", str(m.index_topk), "derived",
             f"{m.checkpoint.value / GIB:.1f} {m.checkpoint.provenance}", f"{m.max_position_embeddings:,}"]
            for m in MODELS]
    print_table(console, header, rows)
    for m in MODELS:
        print_prose(console, f"{m.name}: config {m.config_source}; checkpoint {m.checkpoint.basis}"
                             + (f"; {m.note}" if m.note else ""))


def render_gpus(console) -> None:
    header = ["gpu", "as torch names it", "arch", "total memory (torch)", "bytes"]
    rows = [[g.name, next((a for a in g.aliases if a.startswith(("NVIDIA", "AMD"))), "-"), g.arch,
             f"{g.total_memory_bytes / GIB:.2f} GiB", f"{g.total_memory_bytes:,}"] for g in GPUS]
    print_table(console, header, rows, left=(0, 1, 2))
    for g in GPUS:
        print_prose(console, f"{g.name}: {g.source}")


TABLES = {"models": render_models, "gpus": render_gpus}
CATALOGS = {"models": MODELS, "gpus": GPUS}


def catalog_json(name: str) -> str:
    """Every field of every entry of a catalog (Paths as text)."""
    return json_text({"tool": TOOL, name: [dataclasses.asdict(e) for e in CATALOGS[name]]})


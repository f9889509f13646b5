"""Rendering sweep rows (CSV and JSON lines, streamed; a rich table) and recommendations. No arithmetic of its own."""

import csv
import io
import itertools
import pickle
import tempfile

from dsa_kvcalc.render import csv_fields, gib, json_text, print_table, print_prose
from dsa_kvcalc.report import TOOL
from dsa_kvcalc.sweep import Candidate


CHUNK_ROWS = 256  # rows written at once: memory stays flat, and the writes few
WAIT_BYTES = 1 << 20  # rows waiting for the header's fields, kept in memory up to this much


def csv_lines(rows):
    """The header comes from the rows up to the first available backend's (whose fields are complete), plus the
    error column; those rows wait, the rest stream through. Waiting rows past WAIT_BYTES go to a temporary file:
    memory stays flat even when no point plans."""
    with tempfile.SpooledTemporaryFile(max_size=WAIT_BYTES) as waiting:
        seen: dict = {}
        for row in rows:
            pickle.dump(row, waiting)
            seen |= dict.fromkeys(row)
            if row.get("available"):
                break
        fields = csv_fields([seen, {"error": ""}])
        planned = fields[:-1]  # a planned row's keys, in order, where no error row came before the header's
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(fields)
        waiting.seek(0)
        for count, row in enumerate(itertools.chain(unpickled(waiting), rows), 1):
            writer.writerow([*row.values(), ""] if list(row) == planned else [row.get(field, "") for field in fields])
            if count % CHUNK_ROWS == 0:
                yield out.getvalue()
                out.seek(0)
                out.truncate()
        yield out.getvalue()


def unpickled(file):
    """The rows pickled into file, one by one."""
    while True:
        try:
            yield pickle.load(file)
        except EOFError:
            return


def jsonl_lines(rows):
    """One JSON object a row; a varied value YAML read as a date (an error row's) as its text."""
    for row in rows:
        yield json_text(row, None)


def table_cells(keys: list[str], row: dict, notes: dict[str, int]) -> list[str]:
    """One table row; errors and unavailable backends become numbered notes under the table."""
    varied = [str(row[key]) for key in keys]
    if "error" in row:
        return [*varied, f"error [{notes.setdefault(row['error'], len(notes) + 1)}]", "", "", "", ""]
    if not row["available"]:
        note = notes.setdefault(f"{row['backend']} unavailable: {row['reason']}", len(notes) + 1)
        return [*varied, row["backend"], f"unavailable [{note}]", "", "", ""]
    risk = f">{row['oom.max_decodes']} decodes" if row["oom.at_risk"] else "no"
    return [*varied, row["backend"], gib(row["reserved_bytes"]), f"{row['kv_cache_tokens']:,}",
            f"{row['max_concurrency']:.2f}x", risk]


CAPTION = ("reserved: this release's profile-run reservation for the indexer's logits; OOM: the concurrent decodes "
           "above which this release runs out of memory outside CUDA graphs")
TABLE_ROWS = 1000  # rows per table: a large sweep prints table after table, and memory stays flat


def table_parts(keys: list[str], rows, console):
    """Print the rows as tables of TABLE_ROWS rows, each followed by its notes, then the caption; yield after each
    part, so that the caller can pass its text on."""
    labels = [*keys, "backend", "reserved GiB", "KV tokens/rank", "max concurrency", "OOM"]
    rows = iter(rows)
    while chunk := list(itertools.islice(rows, TABLE_ROWS)):
        notes: dict[str, int] = {}
        print_table(console, labels, [table_cells(keys, row, notes) for row in chunk], left=(len(keys),))
        for note, number in notes.items():
            print_prose(console, f"[{number}] {note}")
        yield
    print_prose(console, CAPTION)
    yield


def render_table(keys: list[str], rows, console) -> None:
    for _ in table_parts(keys, rows, console):
        pass


def render_recommendation(candidates: list[Candidate], target_concurrency: int, min_kv_tokens: int,
                          data_parallel_size: int, console) -> None:
    print_prose(console,
        f"Targets, per rank (one vLLM engine; with data-parallel-size {data_parallel_size} the deployment holds "
        f"{data_parallel_size}x): max-num-seqs >= {target_concurrency} so that {target_concurrency} requests run at "
        f"once; a KV cache of >= {min_kv_tokens:,} tokens ({min_kv_tokens // target_concurrency:,} per request at "
        f"that concurrency); no decode-logits OOM on a vLLM without #62860 (so the answer holds with or without "
        f"it); max-num-seqs <= max-num-batched-tokens (vLLM's rule). Preferred: the largest max-num-seqs, then the "
        f"most spec tokens, then the most KV tokens.")
    header = ["backend", "spec tokens", "largest max-num-seqs", "KV tokens/rank", "max concurrency",
              "what fails one step up"]
    alike: dict[tuple, list[str]] = {}  # backends with the same numbers share a row
    for c in candidates:
        alike.setdefault((c.spec_tokens, c.max_num_seqs, c.kv_cache_tokens, c.max_concurrency, *c.stops),
                         []).append(c.backend)
    lines = []
    for (spec_tokens, seqs, tokens, concurrency, *stops), backends in alike.items():
        if seqs is None:
            lines.append([", ".join(backends), str(spec_tokens), "none", "", "",
                          f"already at {target_concurrency}: " + "; ".join(stops)])
        else:
            lines.append([", ".join(backends), str(spec_tokens), str(seqs), f"{tokens:,}", f"{concurrency:.2f}x",
                          f"at {seqs + 1}: " + "; ".join(stops)])
    print_table(console, header, lines, left=(0, 5), prose=(0, 5))
    best = candidates[0] if candidates and candidates[0].max_num_seqs is not None else None
    if best is None:
        print_prose(console, "No setting meets the targets: see why above.")
        return
    print_prose(console,
        f"Recommended: max-num-seqs {best.max_num_seqs}, speculative-config.num_speculative_tokens "
        f"{best.spec_tokens}, sparse-indexer-topk-backend {best.backend}: {best.kv_cache_tokens:,} KV tokens per "
        f"rank. One more sequence fails: {'; '.join(best.stops)}.")


def recommendation_json(candidates: list[Candidate], target_concurrency: int, min_kv_tokens: int) -> str:
    """The targets, every candidate (best first) and the pick (null when none meets the targets)."""
    rows = [{"backend": c.backend, "spec_tokens": c.spec_tokens, "max_num_seqs": c.max_num_seqs,
             "kv_cache_tokens": c.kv_cache_tokens, "max_concurrency": c.max_concurrency, "stops": c.stops}
            for c in candidates]
    best = rows[0] if rows and rows[0]["max_num_seqs"] is not None else None
    return json_text({"tool": TOOL, "targets": {"concurrency": target_concurrency, "kv_cache_tokens": min_kv_tokens},
                      "recommended": best, "candidates": rows})

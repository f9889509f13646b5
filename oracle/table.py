"""plan against vLLM's own start-up (oracle/harness.py), case by case: whether each starts, and where both do, the
KV cache and the defaults each resolves.

    .venv/bin/python oracle/table.py [--releases 0.33.0,0.30.0] [--recipes NAME,...] [--generated N] [--only-generated]
                                     [--json FILE] [-j 2] [--progress FILE] [--answers FILE]

Today's cases (every bundled recipe, development record and catalog probe on every release set up) and N generated
ones (oracle/cases.py generated: seeded, on 0.30.0-0.33.0). Needs oracle/setup.sh's venv and releases
($VLLM_ORACLE_PYTHON, $VLLM_ORACLE_RELEASES; default under ~/.cache/dsa-kvcalc-oracle). Each release runs in its own
process of that venv. Verdicts: equal, both refuse, different (what differs), only vLLM refuses, only plan refuses
(a keys.Refusal: plan says vLLM would refuse), plan does not derive it (another RecipeError: a setup plan does not
model, where vLLM starts), plan refuses for the weights (not checked on a CPU), oracle error, not run (why). Exit 1
on any different, only one refuses or oracle error.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cases  # noqa: E402

HOME = Path(os.environ.get("DSA_KVCALC_ORACLE_HOME", Path.home() / ".cache" / "dsa-kvcalc-oracle"))
PYTHON = Path(os.environ.get("VLLM_ORACLE_PYTHON", HOME / "venv" / "bin" / "python"))
RELEASES_DIR = Path(os.environ.get("VLLM_ORACLE_RELEASES", HOME / "releases"))
HARNESS = Path(__file__).resolve().parent / "harness.py"
# What plan resolves that vLLM's config holds too: compared wherever both start
DEFAULTS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "async_scheduling", "enable_prefix_caching",
            "cache_dtype", "gpu_memory_utilization", "model_runner_v2")
BAD = ("different", "only vLLM refuses", "only plan refuses", "oracle error")


def available_releases() -> list[str]:
    """The modelled releases set up here (an empty list when the oracle is not set up)."""
    if not PYTHON.exists():
        return []
    return [r for r in cases.RELEASES if (RELEASES_DIR / r / "vllm" / "__init__.py").exists()]


def run_release(release: str, oracle_cases: list[dict]) -> dict:
    """vLLM's answers for these cases from one release (one process)."""
    started = time.perf_counter()
    done = subprocess.run([str(PYTHON), str(HARNESS), str(RELEASES_DIR / release)], input=json.dumps(oracle_cases),
                          capture_output=True, text=True, timeout=6 * 3600,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode != 0:
        error = f"harness exited {done.returncode}: {done.stderr.strip()[-2000:]}"
        return {"release": release, "results": [{"name": c["name"], "error": error} for c in oracle_cases]}
    answer = json.loads(done.stdout)
    answer["seconds"] = round(time.perf_counter() - started, 1)
    return answer


def saved_answers(path: str | None) -> dict:
    """{(release, name): (the case asked, vLLM's result)} from an earlier run's --progress file."""
    if path is None or not Path(path).exists():
        return {}
    saved = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {(row["release"], row["name"]): (row.pop("case"), row) for row in saved if "case" in row}


def oracle_answers(points: list, jobs: int, saved: dict) -> dict:
    """{(release, name): vLLM's result} over every point that has a case: a saved answer to the same case, else
    asked; a release's cases split over `jobs` processes when there are fewer releases than jobs."""
    reused = {key: result for key, (case, result) in saved.items()
              if any((p.release, p.name) == key and p.case == case for p in points)}
    by_release: dict[str, list] = {}
    for p in points:
        if p.case is not None and (p.release, p.name) not in reused:
            by_release.setdefault(p.release, []).append(p.case)
    shares = [(release, batch[i::max(1, jobs // len(by_release))]) for release, batch in by_release.items()
              for i in range(max(1, jobs // len(by_release)))]
    with ThreadPoolExecutor(jobs) as pool:
        answers = list(pool.map(lambda share: run_release(*share), [s for s in shares if s[1]]))
    return reused | {(a["release"], result["name"]): result for a in answers for result in a["results"]}


def differences(plan: dict, vllm: dict) -> list[str]:
    """What plan and vLLM resolve differently where both start."""
    found = [f"{key} {plan['defaults'][key]} / {vllm['defaults'][key]}" for key in DEFAULTS
             if plan["defaults"][key] != vllm["defaults"][key]]
    for key in ("tokens", "block_bytes", "requested_bytes", "subtracts_graph_estimate"):
        if plan[key] != vllm[key]:
            found.append(f"{key} {plan[key]} / {vllm[key]}")
    return found


def verdict(p, answer: dict | None) -> tuple[str, str]:
    """(verdict, detail)."""
    if p.case is None:
        return "not run", p.skip
    if answer is None or "error" in answer:
        return "oracle error", (answer or {}).get("error", "no answer")[:300]
    plan_refuses = "refusal" in p.plan
    if p.plan.get("weights"):
        return "plan refuses for the weights", p.plan["refusal"]
    if not answer["starts"]:
        reason = f"{answer['refusal_at']}: {answer['refusal'][:240]}"
        return ("both refuse", f"vLLM {reason} | plan {p.plan['refusal']}") if plan_refuses else \
            ("only vLLM refuses", reason)
    if plan_refuses and not p.plan["vllm_refuses"]:
        return "plan does not derive it", p.plan["refusal"]
    if plan_refuses:
        return "only plan refuses", p.plan["refusal"]
    found = differences(p.plan, answer)
    return ("different", "; ".join(found)) if found else ("equal", "")


def rows(points: list, answers: dict) -> list[dict]:
    out = []
    for p in points:
        answer = answers.get((p.release, p.name))
        kind, detail = verdict(p, answer)
        row = {"release": p.release, "case": p.name, "verdict": kind, "detail": detail}
        if p.case is not None:
            row["args"] = p.case["args"] | {"gpu": p.case["gpu"], "model": p.case["model"]}
        if p.plan is not None and "tokens" in p.plan:
            row |= {"kv_bytes": p.plan["kv_bytes"], "plan_tokens": p.plan["tokens"],
                    "plan_block_bytes": p.plan["block_bytes"]}
        if answer is not None and answer.get("tokens") is not None:
            row |= {"vllm_tokens": answer["tokens"], "vllm_block_bytes": answer["block_bytes"],
                    "vllm_line": answer["line"], "vllm_defaults": answer["defaults"]}
        if answer is not None:
            row["seconds"] = answer.get("seconds")
            if "traceback" in answer:
                row["traceback"] = answer["traceback"]
        out.append(row)
    return out


def text(table: list[dict]) -> str:
    lines = [f"{'release':8} {'case':62} {'plan tokens':>12} {'vLLM tokens':>12}  verdict"]
    for r in table:
        lines.append(f"{r['release']:8} {r['case'][:62]:62} {r.get('plan_tokens', '-'):>12} "
                     f"{r.get('vllm_tokens', '-'):>12}  {r['verdict']}{': ' + r['detail'] if r['detail'] else ''}")
    counted = Counter(r["verdict"] for r in table)
    lines.append(", ".join(f"{n} {kind}" for kind, n in counted.most_common()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", help="comma-separated, for today's cases (default: every release set up)")
    parser.add_argument("--recipes", help="comma-separated case names of today's cases (default: all)")
    parser.add_argument("--generated", type=int, default=cases.GENERATED_COUNT, help="generated cases (0: none)")
    parser.add_argument("--only-generated", action="store_true", help="no case of today's")
    parser.add_argument("--json", help="write the rows as JSON here too")
    parser.add_argument("-j", type=int, default=2, help="processes at once")
    parser.add_argument("--progress", help="append each answer to this file as it comes (JSON lines)")
    parser.add_argument("--answers", help="an earlier --progress file: its answers to the same cases are reused")
    args = parser.parse_args()
    if args.progress:
        os.environ["ORACLE_PROGRESS"] = str(Path(args.progress).resolve())
    releases = args.releases.split(",") if args.releases else available_releases()
    if not releases:
        print(f"no vLLM release set up under {RELEASES_DIR} for {PYTHON}: run bash oracle/setup.sh", file=sys.stderr)
        return 2
    started = time.perf_counter()
    points = [] if args.only_generated else cases.points(releases, args.recipes.split(",") if args.recipes else None)
    points += [p for p in cases.generated_points(args.generated) if p.release in available_releases()]
    table = rows(points, oracle_answers(points, args.j, saved_answers(args.answers)))
    print(text(table))
    print(f"{len(points)} points in {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1, default=str))
    return 1 if any(r["verdict"] in BAD for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())

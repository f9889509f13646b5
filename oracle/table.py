"""release x recipe: plan's KV tokens against vLLM's own planner's, for every bundled recipe and development record
on every modelled release that has the model.

    .venv/bin/python oracle/table.py [--releases 0.33.0,0.30.0] [--recipes NAME,...] [--json FILE] [-j 2]

Needs oracle/setup.sh's venv and releases ($VLLM_ORACLE_PYTHON, $VLLM_ORACLE_RELEASES; default under
~/.cache/dsa-kvcalc-oracle). Each release runs in its own process of that venv (oracle/harness.py). Exit 1 when any
point differs or fails.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cases  # noqa: E402

HOME = Path(os.environ.get("DSA_KVCALC_ORACLE_HOME", Path.home() / ".cache" / "dsa-kvcalc-oracle"))
PYTHON = Path(os.environ.get("VLLM_ORACLE_PYTHON", HOME / "venv" / "bin" / "python"))
RELEASES_DIR = Path(os.environ.get("VLLM_ORACLE_RELEASES", HOME / "releases"))
HARNESS = Path(__file__).resolve().parent / "harness.py"


def available_releases() -> list[str]:
    """The modelled releases set up here (an empty list when the oracle is not set up)."""
    if not PYTHON.exists():
        return []
    return [r for r in cases.RELEASES if (RELEASES_DIR / r / "vllm" / "__init__.py").exists()]


def run_release(release: str, oracle_cases: list[dict]) -> dict:
    """vLLM's answers for these cases from one release (one process)."""
    started = time.perf_counter()
    done = subprocess.run([str(PYTHON), str(HARNESS), str(RELEASES_DIR / release)], input=json.dumps(oracle_cases),
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode != 0:
        error = f"harness exited {done.returncode}: {done.stderr.strip()[-2000:]}"
        return {"release": release, "results": [{"name": c["name"], "error": error} for c in oracle_cases]}
    answer = json.loads(done.stdout)
    answer["seconds"] = round(time.perf_counter() - started, 1)
    return answer


def oracle_answers(points: list, jobs: int) -> dict:
    """{(release, name): vLLM's result} over every point that has a case."""
    by_release: dict[str, list] = {}
    for p in points:
        if p.case is not None:
            by_release.setdefault(p.release, []).append(p.case)
    with ThreadPoolExecutor(jobs) as pool:
        answers = list(pool.map(lambda r: run_release(r, by_release[r]), by_release))
    return {(a["release"], result["name"]): result for a in answers for result in a["results"]}


# vLLM's check_enough_kv_cache_memory (vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:151-180): one request of
# max_model_len does not fit, and the engine does not start (older releases spell it "models's")
VLLM_REFUSES = "To serve at least one request with the model"


def verdict(p, answer: dict | None) -> str:
    if p.case is None:
        return p.skip
    if answer is not None and "unsupported" in answer:
        if p.plan["refusal"]:
            return "both refuse: " + answer["unsupported"]
        return "vLLM would not start: " + answer["unsupported"]
    if answer is not None and VLLM_REFUSES in answer.get("error", ""):
        return f"both refuse: {VLLM_REFUSES}" if p.plan["refuses"] else "DIFFERENT: only vLLM refuses"
    if answer is None or "error" in answer:
        return "oracle error: " + (answer or {}).get("error", "no answer")[:300]
    if p.plan["refuses"] or p.plan["refusal"]:
        return "DIFFERENT: only plan refuses"
    return "equal" if answer["tokens"] == p.plan["tokens"] else "DIFFERENT"


def rows(points: list, answers: dict) -> list[dict]:
    out = []
    for p in points:
        answer = answers.get((p.release, p.name))
        row = {"release": p.release, "recipe": p.name, "verdict": verdict(p, answer)}
        if p.plan is not None:
            row |= {"kv_bytes": p.plan["kv_bytes"], "plan_tokens": p.plan["tokens"],
                    "plan_block_bytes": p.plan["block_bytes"], "plan_blocks_per_request": p.plan["blocks_per_request"],
                    "plan_groups": p.plan["groups"], "plan_backend": p.plan["backend"]}
        if answer is not None and "tokens" in answer:
            row |= {"vllm_tokens": answer["tokens"], "vllm_block_bytes": answer["block_bytes"],
                    "vllm_blocks_per_request": answer["blocks_per_request"], "vllm_groups": len(answer["groups"]),
                    "vllm_backend": answer["info"].get("backend") or answer["info"].get("attention"),
                    "vllm_cache_dtype": answer["info"].get("cache_dtype"), "vllm_line": answer["line"]}
        out.append(row)
    return out


def text(table: list[dict]) -> str:
    head = (f"{'release':8} {'recipe':58} {'plan tokens':>12} {'vLLM tokens':>12} {'plan B/block':>12} "
            f"{'vLLM B/block':>12} {'pages p/v':>13}  verdict")
    lines = [head]
    for r in table:
        if "vllm_tokens" not in r:
            lines.append(f"{r['release']:8} {r['recipe'][:58]:58} {r.get('plan_tokens', '-'):>12} {'-':>12} "
                         f"{r.get('plan_block_bytes', '-'):>12} {'-':>12} {'':>13}  {r['verdict']}")
            continue
        pages = f"{r['plan_blocks_per_request']}/{r['vllm_blocks_per_request']}"
        lines.append(f"{r['release']:8} {r['recipe'][:58]:58} {r['plan_tokens']:>12,} {r['vllm_tokens']:>12,} "
                     f"{r['plan_block_bytes']:>12,} {r['vllm_block_bytes']:>12,} {pages:>13}  {r['verdict']}")
    counted = [r["verdict"] for r in table]
    lines.append(f"{counted.count('equal')} equal, {sum(v.startswith('both refuse') for v in counted)} that both "
                 f"refuse, {sum(v.startswith('DIFFERENT') for v in counted)} different, "
                 f"{sum(v.startswith('vLLM would not start') for v in counted)} that vLLM would not start, "
                 f"{sum(v.startswith('oracle error') for v in counted)} oracle errors, "
                 f"{sum(v.startswith(('no model code', 'plan refuses')) for v in counted)} not run (no model code in "
                 f"the release, or plan refuses the recipe)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", help="comma-separated (default: every release set up)")
    parser.add_argument("--recipes", help="comma-separated recipe or record names (default: all)")
    parser.add_argument("--json", help="write the rows as JSON here too")
    parser.add_argument("-j", type=int, default=2, help="releases at once")
    args = parser.parse_args()
    releases = args.releases.split(",") if args.releases else available_releases()
    if not releases:
        print(f"no vLLM release set up under {RELEASES_DIR} for {PYTHON}: run bash oracle/setup.sh", file=sys.stderr)
        return 2
    started = time.perf_counter()
    points = cases.points(releases, args.recipes.split(",") if args.recipes else None)
    table = rows(points, oracle_answers(points, args.j))
    print(text(table))
    print(f"{len(releases)} releases in {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0 if not any(r["verdict"].startswith(("DIFFERENT", "oracle error")) for r in table) else 1


if __name__ == "__main__":
    sys.exit(main())

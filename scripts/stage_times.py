"""Wall time of every stage of a DAG run, from Snakemake's own logs (.snakemake/log/*.snakemake.log).

    python scripts/stage_times.py .snakemake/log/2026-12-05T*.log --out results/tiny/stage_times.json

A job's wall time runs from the timestamp above its `rule NAME:` block to the one above its
`Finished jobid: N` line. Per rule it prints the jobs, their summed and longest wall time, and per log
the run's elapsed time; with `-c2` two jobs overlap, so the sums add up to more than the elapsed time.
Jobs that never finished (a killed run) are counted apart.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from datetime import datetime

from orl.io import atomic_write_json

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def parse_log(path: str) -> dict:
    """The jobs of one Snakemake log: {jobid: (rule, started, finished or None)} and the log's span."""
    started: dict[str, tuple[str, datetime]] = {}
    finished: dict[str, datetime] = {}
    stamp = first = last = None
    rule = None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if match := STAMP.match(line):
                stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y")
                first, last = first or stamp, stamp
            elif match := RULE.match(line):
                rule = match.group(1)
            elif (match := JOBID.match(line)) and rule is not None and stamp is not None:
                started.setdefault(match.group(1), (rule, stamp))
                rule = None
            elif (match := FINISHED.match(line)) and stamp is not None:
                finished[match.group(1)] = stamp
    jobs = {job: (rule, start, finished.get(job)) for job, (rule, start) in started.items()}
    return {"jobs": jobs, "elapsed_s": (last - first).total_seconds() if first else 0.0}


def stage_times(paths: list[str]) -> dict:
    per_rule: dict[str, list[float]] = defaultdict(list)
    unfinished: dict[str, int] = defaultdict(int)
    runs = []
    for path in paths:
        log = parse_log(path)
        runs.append({"log": path, "elapsed_s": log["elapsed_s"], "jobs": len(log["jobs"])})
        for rule, start, end in log["jobs"].values():
            if end is None:
                unfinished[rule] += 1
            else:
                per_rule[rule].append((end - start).total_seconds())
    rules = {
        rule: {
            "jobs": len(times),
            "total_s": sum(times),
            "max_s": max(times),
            "mean_s": sum(times) / len(times),
        }
        for rule, times in sorted(per_rule.items(), key=lambda item: -sum(item[1]))
    }
    return {"runs": runs, "rules": rules, "unfinished": dict(unfinished)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", help="Snakemake log files (.snakemake/log/*.snakemake.log)")
    p.add_argument("--out", help="JSON file to write the summary to")
    args = p.parse_args(argv)
    summary = stage_times(args.logs)
    print(f"{'rule':<24}{'jobs':>6}{'total s':>10}{'mean s':>9}{'max s':>9}")
    for rule, row in summary["rules"].items():
        print(f"{rule:<24}{row['jobs']:>6}{row['total_s']:>10.0f}{row['mean_s']:>9.1f}{row['max_s']:>9.0f}")
    for run in summary["runs"]:
        print(f"{run['log']}: {run['jobs']} jobs in {run['elapsed_s']:.0f} s")
    if summary["unfinished"]:
        print(f"unfinished (run stopped): {summary['unfinished']}", file=sys.stderr)
    if args.out:
        atomic_write_json(args.out, summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

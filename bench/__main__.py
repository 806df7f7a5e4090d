"""Run every benchmark with one command: ``python -m bench [--quick] [--only NAME ...]``.

Writes ``results.json`` and ``results.md`` after each benchmark finishes (one table per
area: what, measured, reference measured in the same run, aim) to ``--out``
(``bench/results`` for a full run, ``bench/results-quick`` for ``--quick``), and with
``--update-readme`` rewrites the README's generated performance tables. ``--only`` re-runs
some benchmarks and keeps the other modules' figures from the previous full run in
``--out``. ``--large`` gives the analytics benchmarks (idle, idle_policy, quota_bandwidth,
report) the 7-day, 10,000-GPU history, built through the same ingest path and maintenance as the
default one (bench/history.py; hours on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.figure import ModuleResult
from bench.machine import describe_machine
from bench.output import markdown, read_results, update_readme, write_results
from bench.runner import BENCHMARKS, run_all, select

REPO = Path(__file__).resolve().parents[1]


def merge(previous: list[ModuleResult], fresh: list[ModuleResult]) -> list[ModuleResult]:
    """Registry order; a fresh result replaces the previous one of the same module."""
    by_name = {m.name: m for m in previous} | {m.name: m for m in fresh}
    return [by_name[b.name] for b in BENCHMARKS if b.name in by_name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not figures")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    ap.add_argument("--out", type=Path, help="where results.json and results.md go")
    ap.add_argument("--update-readme", action="store_true", help="rewrite README's tables")
    ap.add_argument("--readme", type=Path, default=REPO / "README.md", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument(
        "--large",
        action="store_true",
        help="7 days of 10,000 GPUs for the analytics benchmarks (GPUSCOPE_BENCH_HISTORY=large)",
    )
    args = ap.parse_args(argv)
    if args.list:
        for b in BENCHMARKS:
            print(f"{b.name:18s} {b.area}")
        return 0
    if args.update_readme and args.quick:
        print("bench: --update-readme needs full sizes; drop --quick", file=sys.stderr)
        return 2
    if args.large and args.quick:
        print("bench: --large and --quick contradict each other", file=sys.stderr)
        return 2
    if args.large:
        os.environ["GPUSCOPE_BENCH_HISTORY"] = "large"
    try:
        chosen = select(args.only)
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    out = args.out or REPO / "bench" / ("results-quick" if args.quick else "results")
    machine = describe_machine()
    previous = out / "results.json"
    kept: list[ModuleResult] = []
    if args.only and previous.is_file():
        _, old, old_quick = read_results(previous.read_text())
        if old_quick == args.quick:
            kept = old

    def save(so_far: list[ModuleResult]) -> None:
        # after every benchmark: an interrupted run keeps the figures it already has
        write_results(out, machine, merge(kept, so_far), args.quick)

    results = merge(kept, run_all(chosen, args.quick, on_result=save))
    json_path, md_path = write_results(out, machine, results, args.quick)
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    if args.update_readme:
        try:
            changed = update_readme(args.readme, markdown(machine, results, args.quick))
        except (OSError, ValueError) as exc:
            print(f"bench: cannot update {args.readme}: {exc}", file=sys.stderr)
            return 2
        print(f"{args.readme}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
    return 1 if any(r.status == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

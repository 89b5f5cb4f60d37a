"""The command line: ``python -m bench.reliability [options]`` from the
repository's root (``--help`` lists the options). The bench's own child
processes run it as ``python -m bench.reliability --role NAME ARGS...``."""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from bench._common import positive_int

from . import BENCH_DIR, REPO_DIR, harness, report
from .kinds import KIND_ALIASES, KINDS, TRIAL_TASKS, role_wal_writer

DEFAULT_JSON = os.path.join(BENCH_DIR, "results", "reliability.json")
DEFAULT_MD = os.path.join(REPO_DIR, "docs", "reliability.md")

# The children of the bench that are not test-suite scripts: name -> fn(*argv).
ROLES = {
    "trials": lambda job: harness.role_trials(job, TRIAL_TASKS),
    "wal-writer": role_wal_writer,
}


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability",
        description="Run fault-injection and bad-input trials against sobolev-index; write a JSON "
                    "of the outcomes and the docs page generated from it.")
    parser.add_argument("--quick", action="store_true",
                        help="a few trials of each kind (a smoke test, under a minute)")
    parser.add_argument("--trials", type=positive_int, default=None,
                        help=f"scale of the random trials (default {harness.DEFAULT_TRIALS}, "
                             f"{harness.QUICK_TRIALS} with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--out-json", default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    parser.add_argument("--out-md", default=DEFAULT_MD, help=f"default {DEFAULT_MD}")
    parser.add_argument("--only", action="append", default=[], metavar="KIND",
                        help="run only these kinds (comma-separated or repeated; see --list)")
    parser.add_argument("--list", action="store_true", help="list the kinds and exit")
    parser.add_argument("--from-json", metavar="PATH",
                        help="do not run anything: regenerate --out-md from this JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.trials is None:
        args.trials = harness.QUICK_TRIALS if args.quick else harness.DEFAULT_TRIALS
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--role"]:
        ROLES[argv[1]](*argv[2:])
        return 0
    args = parse_args(argv)
    if args.list:
        for name, fn in KINDS.items():
            print(f"{name:16s} {fn.__doc__.splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.from_json:
        with open(args.from_json) as handle:
            result = json.load(handle)
        report.write(args.out_md, report.render_markdown(result))
        return 0 if result["passed"] else 1
    wanted = [w.strip() for item in args.only for w in item.split(",") if w.strip()]
    selected = []
    for name in wanted:
        kind = KIND_ALIASES.get(name, name)
        if kind not in KINDS:
            print(f"unknown kind {name!r}; choose from {', '.join(KINDS)}", file=sys.stderr)
            return 2
        if kind not in selected:
            selected.append(kind)
    selected = selected or list(KINDS)

    import sobolev_index

    workdir = tempfile.mkdtemp(prefix="sobolev-reliability-")
    harness.WORKDIR[0] = workdir
    run = harness.Run(args, workdir)
    run.log(f"sobolev-index {sobolev_index.__version__} from {os.path.dirname(sobolev_index.__file__)}; "
            f"work directory {workdir}; kinds: {', '.join(selected)}")
    try:
        for name in selected:
            run.log(f"{name}: {KINDS[name].__doc__.splitlines()[0] if KINDS[name].__doc__ else ''}")
            KINDS[name](run)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - run.started
    result = report.result_json(run, args, argv, selected, wanted, seconds)
    report.write(args.out_json, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    report.write(args.out_md, report.render_markdown(result))
    failed = [row for row in result["rows"] if row["passed"] is False]
    run.log(f"{result['trials']:,} trials in {seconds:.0f} s; wrote {args.out_json} and {args.out_md}")
    if failed:
        print(f"UNEXPECTED OUTCOMES in {len(failed)} row(s):", file=sys.stderr)
        for row in failed:
            print(f"  {row['id']}: {row['unexpected']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

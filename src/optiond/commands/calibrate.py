"""``optiond calibrate``: measure where the GPU beats the CPU on this machine and store it.

The result (JSON, :mod:`optiond.kernels.binomial.plan`) lives in the user's cache directory; the
engine reads it to choose the CPU, the GPU batch kernel or the GPU pipeline per request.
"""

from __future__ import annotations

import argparse
import json
import sys


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..kernels import gpu
    from ..kernels.binomial import calibrate, plan

    path = args.path or plan.calibration_path()
    if args.show:
        cal = plan.load_calibration(path)
        cal.pop("measurements", None)
        print(json.dumps(cal, indent=2, sort_keys=True))
        return 0
    if not gpu.available():
        print("optiond calibrate: no usable GPU (CuPy and a CUDA device are needed); "
              "every request is priced on the CPU, nothing to calibrate", file=sys.stderr)
        return 1

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        cal = calibrate.calibrate(quick=args.quick, save=not args.dry_run, path=path, progress=progress)
    except gpu.GPUError as e:
        print(f"optiond calibrate: GPU error: {e}", file=sys.stderr)
        return 1
    cal.pop("measurements", None)
    print(json.dumps(cal, indent=2, sort_keys=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure the CPU/GPU crossovers of the binomial pricer",
                       description="Time the CPU and the GPU binomial pricers on this machine and store where each "
                                   "wins (JSON in the user cache directory, or --path). The engine uses it to "
                                   "choose the CPU, the GPU batch kernel or the GPU pipeline per request.")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (about 10 s)")
    p.add_argument("--dry-run", action="store_true", help="measure and print, do not store")
    p.add_argument("--show", action="store_true", help="print the calibration in force and exit")
    p.add_argument("--path", help="calibration file (default: the user cache directory)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_calibrate)

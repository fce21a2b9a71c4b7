"""``optiond warmup``: compile every pricing kernel into numba's on-disk cache, once.

Run by ``make venv`` / ``make demo`` and the installers, so that the first chain, the first
worksheet function and a new daemon load the kernels instead of compiling them. The list is :data:`optiond.kernels.warmup.TARGETS`,
the daemon's warm-up list too. A progress bar on a terminal, then one line per target (kernel
signatures compiled now, loaded from the cache, seconds) and the total; a second run reports
everything cached. Exit status 1 when a target failed (the others still warm), 2 for an unknown
``--only`` name.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "compile every pricing kernel into the on-disk cache (once, at install)"


def cmd_warmup(args: argparse.Namespace) -> int:
    from ..kernels import warmup

    if args.list:
        for t in warmup.TARGETS:
            print(f"{t.name:<24} {t.what}")
        return 0
    try:
        targets = warmup.select(None if not args.only else [w for o in args.only for w in o.split(",")])
    except ValueError as e:
        print(f"optiond warmup: {e}", file=sys.stderr)
        return 2
    warmup.silence_announcement()  # this command reports for itself
    from tqdm import tqdm

    bar = tqdm(total=len(targets), desc="compiling kernels", unit="target", file=sys.stderr, disable=None,
               bar_format="{desc}: {n}/{total} {bar} {elapsed}")

    def start(t) -> None:
        bar.set_description_str(f"compiling {t.name}")

    def done(t, o) -> None:
        bar.update(1)

    outcomes = warmup.warm(targets, on_target=done, on_start=start)
    bar.close()
    total = sum(o.seconds for o in outcomes)
    compiled = sum(o.compiled for o in outcomes)
    cached = sum(o.cached for o in outcomes)
    failed = [o for o in outcomes if o.error]
    if args.json:
        print(json.dumps({"targets": [o.__dict__ for o in outcomes], "compiled": compiled, "cached": cached,
                          "seconds": round(total, 3), "cache_dirs": warmup.cache_dirs()}, indent=1))
    else:
        for o in outcomes:
            state = (f"failed: {o.error}" if o.error else
                     f"compiled {o.compiled}, cached {o.cached}" if o.compiled or o.cached else "nothing to do")
            print(f"  {o.name:<24} {state} ({o.seconds:.1f} s)")
        verdict = ("everything was cached already" if compiled == 0 and not failed else
                   f"compiled {compiled} kernel signatures, {cached} were cached")
        n = len(outcomes)
        print(f"optiond warmup: {n} target{'' if n == 1 else 's'} in {total:.1f} s; {verdict}")
        for d in warmup.cache_dirs()[:1]:
            print(f"  cache: {d}" + (" (and beside the other kernel folders)" if len(warmup.cache_dirs()) > 1 else ""))
    for o in failed:
        print(f"optiond warmup: {o.name} failed: {o.error}", file=sys.stderr)
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("warmup", help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", metavar="NAME[,NAME]",
                   help="warm these targets only (a name of --list, or its part before a dash: spectral is its "
                        "three accuracies); repeatable")
    p.add_argument("--list", action="store_true", help="list the targets and exit")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_warmup)

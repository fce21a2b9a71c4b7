"""``optiond objects``: the named market objects the daemon keeps (:mod:`optiond.daemon.objects`).

* ``optiond objects publish FILE.json --name SPY``: keep a fitted surface (``optiond chain
  --surface FILE.json``'s output) in the daemon as the next version of ``SPY``; prints its
  handle (``SPY#0003``), which the Excel functions ``SURFACE_VOL`` and ``SURFACE_PRICE`` read
  (the same document as the live version keeps its handle);
* ``optiond objects list``: the live objects, every kind (curves, dividend schedules, Heston sets,
  surfaces: a one-line summary each; ``--json`` for a machine);
* ``optiond objects drop NAME``: forget one.

Every subcommand needs a running daemon (``optiond serve``); without one it exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import options

#: what the CLI says of an object whose file the daemon could not write (``persisted`` False)
NOT_WRITTEN = "is kept in memory only: the daemon could not write it to disk (it is lost when the daemon stops)"


def _client(args: argparse.Namespace):
    from ..daemon.client import Client

    return Client(args.connection_file, timeout=args.timeout, retries=0)


def cmd_publish(args: argparse.Namespace) -> int:
    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = (f"not UTF-8 text ({e.reason} at byte {e.start})" if isinstance(e, UnicodeDecodeError)
                  else e.strerror or str(e))
        print(f"optiond objects publish: cannot read {args.file}: {reason}", file=sys.stderr)
        return 2
    with _client(args) as client:
        reply = client.put_surface(args.name, text)
    s = reply["summary"]
    print(f"{reply['handle']}: surface of {s['underlying']} ({s['expiries']} expiries, T {s['T_first']:.4f} to "
          f"{s['T_last']:.4f} years{'' if s['spots'] else '; no spots: European prices only'})")
    if reply.get("persisted") is False:
        print(f"warning: {reply['handle']} {NOT_WRITTEN}", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        objects = client.objects()
    if args.json:
        print(json.dumps(objects, indent=1))
        return 0
    if not objects:
        print("no objects in the daemon")
        return 0
    print(f"{'handle':<24} {'kind':<9} {'bytes':>9}  {'created':<25}  summary")
    for o in objects:
        s = o.get("summary") or {}
        note = f" [{NOT_WRITTEN}]" if o.get("persisted") is False else ""
        print(f"{o['handle']:<24} {o['kind']:<9} {o['bytes']:>9}  {o['created']:<25}  {s.get('text', '')}{note}")
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    with _client(args) as client:
        reply = client.drop_object(args.name)
    print(f"dropped {reply['dropped']}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``optiond objects`` (publish, list, drop) to the CLI."""
    p = sub.add_parser("objects", help="named market objects kept in the daemon (fitted surfaces)",
                       description="The named, versioned market objects the daemon keeps: zero curves, cash-dividend "
                                   "schedules, Heston sets (made by the Excel functions OPTIOND_CURVE, OPTIOND_DIVIDENDS, "
                                   "OPTIOND_HESTON) and fitted volatility surfaces, which the Excel functions read by "
                                   "name or handle (NAME#0003). The daemon keeps them in the user's data directory "
                                   "across restarts (optiond serve --objects-dir, --no-persist).")
    p.set_defaults(func=lambda a: p.print_help() or 2)
    commands = p.add_subparsers(dest="objects_command", metavar="SUBCOMMAND")

    def common(c: argparse.ArgumentParser) -> None:
        c.add_argument("--connection-file", help="the daemon's connection file (default: the per-user one, or "
                                                 "$OPTIOND_CONNECTION_FILE)")
        c.add_argument("--timeout", type=options.positive, default=10.0, help="seconds to wait for the daemon (default 10)")

    c = commands.add_parser("publish", help="keep a surface JSON (optiond chain --surface) in the daemon under a name",
                            description="Keep a fitted surface (schema optiond.surface, as optiond chain --surface "
                                        "writes it) in the daemon as the next version of NAME, and print its handle; "
                                        "the same document as the live version keeps that version's handle.")
    c.add_argument("file", help="the surface JSON")
    c.add_argument("--name", required=True, help="the name to keep it under, e.g. SPY (1 to 64 of A-Z a-z 0-9 _ . : / -)")
    common(c)
    c.set_defaults(func=cmd_publish)
    c = commands.add_parser("list", help="the daemon's live objects")
    c.add_argument("--json", action="store_true", help="print them as JSON")
    common(c)
    c.set_defaults(func=cmd_list)
    c = commands.add_parser("drop", help="forget an object")
    c.add_argument("name", help="its name (or its live handle)")
    common(c)
    c.set_defaults(func=cmd_drop)

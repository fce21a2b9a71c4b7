"""Sub-command modules of the optiond CLI (each exposes register(subparsers))."""

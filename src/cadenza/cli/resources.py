"""``cadenza resources ...``: the resource pools' commands (SPEC §8, §14).

A minimal sub-app of the health branch, so that ``resources probe`` can be registered and
tested; the pools branch's module (list, show, enable, disable) replaces it at the merge.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Resource pools: routes, units, credentials.", no_args_is_help=True)

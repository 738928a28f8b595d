"""What the ``staged`` commands print: text never cut when piped, tables also as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table


def make_console() -> Console:
    """A terminal gets rich's usual layout; a pipe or file gets every character: rich would
    otherwise lay tables out for 80 columns and cut cells with "…"."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=100_000, soft_wrap=True)


console = make_console()


# The longest --wait of a command (seconds): a week. A larger or non-finite one (inf, nan) is
# refused by name: inf waited forever and nan made `staged mt refresh` return at once.
MAX_WAIT_SECONDS = 7 * 24 * 3600


class Output(str, Enum):
    text = "text"
    json = "json"


OutputOption = Annotated[Output, typer.Option(
    "--output", "-o", help="text, or json (one JSON document on stdout, for scripts)")]


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout (plain, no colours or wrapping)."""
    typer.echo(json.dumps(value, indent=2, default=str))


def print_rows(
    rows: Sequence[Mapping[str, Any]], output: Output, empty: str, title: str | None = None
) -> None:
    """``rows`` (same keys each) as a table, ``empty`` when there are none, or as a JSON list."""
    if output is Output.json:
        print_json(list(map(dict, rows)))
        return
    if not rows:
        console.print(empty, markup=False)
        return
    table = Table(title=title)
    for key in rows[0]:
        # A narrow terminal folds a long value onto more lines; "…" would cut run ids and
        # timestamps to prefixes that look alike.
        table.add_column(key, overflow="fold")
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row.values()))
    console.print(table)


def print_facts(facts: Mapping[str, Any], output: Output) -> None:
    """Key/value facts: a two-column table without header, or a JSON object."""
    if output is Output.json:
        print_json(dict(facts))
        return
    table = Table(show_header=False)
    for key, value in facts.items():
        table.add_row(key, value if isinstance(value, str) else json.dumps(value, default=str))
    console.print(table)


def one_line(message: str) -> str:
    """``message`` with its lines joined: a multi-line server error stays one ``error:`` line."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())

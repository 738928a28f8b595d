"""Validation and quoting of table identifiers that come from users, forms and files; their numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_NAME_LENGTH = 128


class InvalidIdentifierError(ValueError):
    """An identifier that cannot be used safely as a database, table or column name."""


def validate_name(name: object, kind: str = "name") -> str:
    """Return ``name`` lower-cased (as the Hive Metastore stores it) or raise naming the value."""
    if not isinstance(name, str) or not name:
        raise InvalidIdentifierError(f"invalid {kind} {name!r}: must be a non-empty string")
    if _CONTROL.search(name):
        raise InvalidIdentifierError(f"invalid {kind} {name!r}: contains a control character")
    # fullmatch: ``$`` would also match before a trailing newline ('p6\n').
    if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise InvalidIdentifierError(
            f"invalid {kind} {name!r}: use letters, digits and underscores, "
            f"not starting with a digit, at most {MAX_NAME_LENGTH} characters"
        )
    return name.lower()


# Java's int: the largest LIMIT Spark takes (`staged show --limit`) and many Spark settings' bound.
JAVA_INT_MAX = 2**31 - 1


def is_whole_number(text: str, max_digits: int = 18) -> bool:
    """Whether ``text`` is ASCII digits only, at most ``max_digits`` of them (a Java long).

    ``str.isdigit`` and ``int`` also take fullwidth or Arabic-Indic digits, and isdigit a
    superscript two, which int() then refuses; int() refuses more than 4300 digits.
    """
    return text.isascii() and text.isdigit() and len(text) <= max_digits


def quote_name(name: str) -> str:
    """Quote a validated name for Spark SQL."""
    return f"`{validate_name(name)}`"


@dataclass(frozen=True, order=True)
class TableIdentifier:
    """A validated ``database.table`` name."""

    database: str
    table: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "database", validate_name(self.database, "database name"))
        object.__setattr__(self, "table", validate_name(self.table, "table name"))

    @classmethod
    def parse(cls, text: object, default_database: str = "default") -> TableIdentifier:
        """Parse ``table`` or ``database.table``; anything else raises naming the value.

        Surrounding spaces are dropped; other whitespace (a newline, a tab) is an error, so a
        name the journal keys targets by has exactly one spelling.
        """
        if not isinstance(text, str) or not text.strip(" "):
            raise InvalidIdentifierError(f"invalid table name {text!r}: must be a non-empty string")
        parts = text.strip(" ").split(".")
        if len(parts) == 1:
            return cls(default_database, parts[0])
        if len(parts) == 2:
            try:
                return cls(parts[0], parts[1])
            except InvalidIdentifierError as err:
                raise InvalidIdentifierError(f"invalid table name {text!r}: {err}") from None
        raise InvalidIdentifierError(
            f"invalid table name {text!r}: expected 'table' or 'database.table'"
        )

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def quoted(self) -> str:
        return f"{quote_name(self.database)}.{quote_name(self.table)}"

    def __str__(self) -> str:
        return self.name

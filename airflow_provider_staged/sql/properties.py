"""Session properties of the SQL client: ``SET`` / ``RESET`` with defaults < init file < session.

Keys under ``table.``, ``sql-client.``, ``execution.`` and ``workflow-scheduler.`` belong to the
client (Flink's names); every other key is Spark conf and is passed to the Spark session by the caller.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

from airflow_provider_staged.staging.identifiers import is_whole_number

ATOMICITY = "table.ctas.atomicity-enabled"
RESULT_MODE = "sql-client.execution.result-mode"
MAX_ROWS = "sql-client.execution.max-table-result.rows"
RESULT_MODES = ("tableau", "table", "changelog")
RUNTIME_MODE = "execution.runtime-mode"  # Flink's name
RUNTIME_MODES = ("batch", "streaming")
MAX_FILES = "sql-client.execution.streaming.max-files-per-trigger"
WORKFLOW_PREFIX = "workflow-scheduler."
CLIENT_PREFIXES = ("table.", "sql-client.", "execution.", WORKFLOW_PREFIX)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PropertyError(ValueError):
    """A bad key or value; nothing was changed."""


class Source(enum.Enum):
    """Where a value comes from, lowest precedence first."""

    DEFAULT = "default"
    CONFIG = "config"
    INIT = "init file"
    SESSION = "session"


def _bool(value: str) -> str:
    # Imported here: the settings module brings the journal, which a session that sets no
    # boolean property never needs (start-up of `staged sql -e`).
    from airflow_provider_staged.staging.settings import parse_bool

    try:
        return str(parse_bool(value, ATOMICITY)).lower()
    except ValueError as err:
        raise PropertyError(str(err)) from None


def _one_of(key: str, choices: Sequence[str]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value.strip().lower() not in choices:
            raise PropertyError(f"invalid {key} {value!r}: expected one of {', '.join(choices)}")
        return value.strip().lower()

    return check


def _whole_number(key: str, minimum: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not is_whole_number(value.strip()) or int(value) < minimum:
            raise PropertyError(f"invalid {key} {value!r}: expected a whole number >= {minimum}")
        return str(int(value))

    return check


@dataclass(frozen=True)
class ClientOption:
    default: str
    check: Callable[[str], str]
    description: str


CLIENT_OPTIONS: dict[str, ClientOption] = {
    ATOMICITY: ClientOption("true", _bool, "CTAS/RTAS through the staged tables (false: Spark's plain path)"),
    RESULT_MODE: ClientOption("tableau", _one_of(RESULT_MODE, RESULT_MODES),
                              "tableau | table (a pager) | changelog (+I rows)"),
    MAX_ROWS: ClientOption("1000", _whole_number(MAX_ROWS, 1),
                           "rows a query result prints at most; keys a streaming changelog remembers"),
    RUNTIME_MODE: ClientOption("batch", _one_of(RUNTIME_MODE, RUNTIME_MODES),
                               "batch | streaming (queries over tables run as streams, print a changelog)"),
    MAX_FILES: ClientOption("0", _whole_number(MAX_FILES, 0),
                            "new files of a source a streaming micro-batch reads at most (0: all)"),
}


def is_client_key(key: str) -> bool:
    return key.startswith(CLIENT_PREFIXES)


def check_key(key: str) -> str:
    key = key.strip()
    if not key or _CONTROL.search(key) or " " in key:
        raise PropertyError(f"invalid property key {key!r}: a non-empty name without spaces")
    if is_client_key(key) and key not in CLIENT_OPTIONS and not key.startswith(WORKFLOW_PREFIX):
        known = ", ".join(sorted(CLIENT_OPTIONS))
        raise PropertyError(f"unknown client property {key!r}: known {known}, workflow-scheduler.*; "
                            "any other key is Spark conf")
    return key


@dataclass(frozen=True)
class PropertyRow:
    key: str
    value: str
    source: Source


class SessionProperties:
    """Layered values: ``layer`` is where ``SET``/``RESET`` write (INIT while ``-i`` runs)."""

    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        self._defaults = {key: option.default for key, option in CLIENT_OPTIONS.items()}
        self._defaults.update(defaults or {})
        self._layers: dict[Source, dict[str, str]] = {Source.CONFIG: {}, Source.INIT: {}, Source.SESSION: {}}
        self.layer = Source.SESSION

    def checked(self, key: str, value: str) -> tuple[str, str]:
        """``(key, value)`` normalized, or :class:`PropertyError` naming the bad one."""
        key = check_key(key)
        if _CONTROL.search(value.replace("\t", " ")):
            raise PropertyError(f"invalid value of {key!r}: contains a control character")
        option = CLIENT_OPTIONS.get(key)
        return key, option.check(value) if option else value

    def put(self, key: str, value: str, layer: Source | None = None) -> None:
        """Store a value :meth:`checked` returned, in ``layer`` (default: the current one)."""
        self._layers[layer or self.layer][key] = value

    def remove(self, key: str) -> None:
        """Forget the current layer's value of ``key`` (a lower layer's value shows again)."""
        self._layers[self.layer].pop(check_key(key), None)

    def clear(self) -> list[str]:
        """Forget every value of the current layer; return their keys."""
        keys = list(self._layers[self.layer])
        self._layers[self.layer].clear()
        return keys

    def get(self, key: str) -> str | None:
        row = self._row(key)
        return row.value if row else None

    def _row(self, key: str) -> PropertyRow | None:
        for source in (Source.SESSION, Source.INIT, Source.CONFIG):
            if key in self._layers[source]:
                return PropertyRow(key, self._layers[source][key], source)
        if key in self._defaults:
            return PropertyRow(key, self._defaults[key], Source.DEFAULT)
        return None

    def rows(self) -> list[PropertyRow]:
        """Every known key with its effective value and source, sorted by key."""
        keys = set(self._defaults).union(*self._layers.values())
        return [row for key in sorted(keys) if (row := self._row(key)) is not None]

    def spark_values(self) -> dict[str, str]:
        """The effective value of every Spark key that has one."""
        return {row.key: row.value for row in self.rows() if not is_client_key(row.key)}

    def client_values(self, prefix: str) -> dict[str, str]:
        return {row.key: row.value for row in self.rows() if row.key.startswith(prefix)}

    @property
    def atomic(self) -> bool:
        return self.get(ATOMICITY) == "true"

    @property
    def result_mode(self) -> str:
        return self.get(RESULT_MODE) or "tableau"

    @property
    def max_rows(self) -> int:
        return int(self.get(MAX_ROWS) or CLIENT_OPTIONS[MAX_ROWS].default)

    @property
    def streaming(self) -> bool:
        return self.get(RUNTIME_MODE) == "streaming"

    @property
    def max_files_per_trigger(self) -> int:
        return int(self.get(MAX_FILES) or CLIENT_OPTIONS[MAX_FILES].default)


@dataclass(frozen=True)
class SetProperty:
    key: str
    value: str


@dataclass(frozen=True)
class ShowProperties:
    key: str | None = None  # None: every property


@dataclass(frozen=True)
class ResetProperty:
    key: str | None = None  # None: every property of the current layer


PropertyCommand = SetProperty | ShowProperties | ResetProperty
# ``SET VAR x = 1`` (session variables) and ``SET TIME ZONE`` are Spark statements.
_SPARK_SET_WORDS = {"VAR", "VARIABLE", "TIME", "-"}


def parse_property_command(text: str, tokens: Sequence[Token]) -> PropertyCommand | None:
    """``SET``/``RESET`` in Flink's form (``SET 'k' = 'v'``) or Spark's (``SET k=v``); None otherwise."""
    if not tokens or tokens[0].text.upper() not in ("SET", "RESET"):
        return None
    is_set = tokens[0].text.upper() == "SET"
    if len(tokens) == 1:
        return ShowProperties() if is_set else ResetProperty()
    if tokens[1].text.upper() in _SPARK_SET_WORDS or tokens[1].token_type == TokenType.DASH:
        return None
    equals = next((token for token in tokens[1:] if token.token_type == TokenType.EQ), None)
    key_end = equals.start if equals is not None else len(text)
    key = _unquoted(text, [t for t in tokens[1:] if t.end < key_end])
    if not is_set:
        if equals is not None:
            raise PropertyError(f"RESET takes a key only: RESET 'key', not {text!r}")
        return ResetProperty(key)
    if equals is None:
        return ShowProperties(key)
    value = _unquoted(text, [t for t in tokens if t.start > equals.end])
    return SetProperty(key, value)


def _unquoted(text: str, tokens: Sequence[Token]) -> str:
    """One quoted token's value (``'k'`` → ``k``), else the raw text the tokens span."""
    if not tokens:
        raise PropertyError(f"expected SET 'key' = 'value' or RESET 'key', not {text!r}")
    if len(tokens) == 1 and tokens[0].token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return tokens[0].text
    return text[tokens[0].start:tokens[-1].end + 1].strip()

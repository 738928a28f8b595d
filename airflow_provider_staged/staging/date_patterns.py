"""Java/Flink date patterns (``yyyy-MM-dd``) as strftime formats: partition values that are
dates, read by partition TTL in the core and by materialized tables' partition formatters."""

from __future__ import annotations

import re
from functools import lru_cache

# Java/Flink date-pattern letters we accept and their strftime equivalents. Anything else
# (e.g. 'E', 'a', single letters, quoted literals) is rejected rather than guessed.
JAVA_TOKENS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_JAVA_LITERALS = "-/:_. "
_JAVA_PATTERN = re.compile("|".join([*JAVA_TOKENS, f"[{re.escape(_JAVA_LITERALS)}]"]))


class PartitionError(ValueError):
    """A schedule time or partition value that cannot be used for a refresh."""


@lru_cache(maxsize=64)  # a handful of distinct patterns across hundreds of definitions
def java_to_strftime(pattern: str) -> str:
    """Translate a date formatter such as ``yyyy-MM-dd`` into ``%Y-%m-%d``."""
    parts: list[str] = []
    pos = 0
    while pos < len(pattern):
        match = _JAVA_PATTERN.match(pattern, pos)
        if match is None:
            raise PartitionError(
                f"unsupported date-formatter {pattern!r} at {pattern[pos:]!r}: use "
                f"{', '.join(JAVA_TOKENS)} and the separators {_JAVA_LITERALS!r}"
            )
        parts.append(JAVA_TOKENS.get(match.group(), match.group()))
        pos = match.end()
    if not any(token in parts for token in JAVA_TOKENS.values()):
        raise PartitionError(f"unsupported date-formatter {pattern!r}: it has no date field")
    return "".join(parts)

"""Refreshes down a pipeline of materialized tables, partition by partition (pure: no Airflow).

A refresh that commits tells the tables downstream *which* partition it committed: the table's
asset event carries it as Airflow's partition key (Airflow 3.3's partition-aware assets), and a
``FRESHNESS = DOWNSTREAM`` table's DAG is scheduled on its upstream tables' events with an
identity mapping, so it refreshes that partition and no other, once every table it reads has
committed it (a diamond's bottom waits for both sides).

The key is the committed partition spec as Hive names the partition (``ds=2024-01-03``,
``ds=2024-01-03/hr=01``, values escaped as in a partition directory, so ``/`` and ``=`` only
separate), or :data:`WHOLE_TABLE_KEY` for a whole-table refresh. Which refreshes tell: a periodic
one, one that an upstream commit started (so a chain goes on to its end), and a one-time refresh
asked to (``refreshDownstream``, ``staged mt refresh --downstream``); any other one-time refresh
leaves its event without a key, and Airflow starts no partition-aware DAG on such an event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from airflow_provider_staged.materialized.params import IS_PERIODIC, REFRESH_DOWNSTREAM, STATIC_PARTITIONS
from airflow_provider_staged.staging.partition_paths import escape_path_name

# A refresh of the whole table (an unpartitioned table, or a one-time refresh without partitions).
# No partition spec can be it: a spec's key always has a '=' (and '*' is escaped in values).
WHOLE_TABLE_KEY = "*"
# Airflow keeps a partition key in a 250-character column (and refuses a longer one).
MAX_KEY_LENGTH = 250
__all__ = ["REFRESH_DOWNSTREAM", "WHOLE_TABLE_KEY", "conf_for_key", "downstream_spec", "event_keys",
           "key_spec", "next_input_check", "partition_key"]
# A periodic refresh waiting for its inputs' partition: while more than IN_PROCESS_SECONDS of the
# wait are left, the task is deferred (it leaves its worker slot) and checks again every
# DEFER_SECONDS; the last stretch is polled in its process every POLL_SECONDS. Never a short
# deferral: when the timer fires before the executor has reported the deferring process's exit,
# Airflow 3.3 fails the task ("finished with state success, but ... queued"; seen with 3 s).
POLL_SECONDS = 5.0
DEFER_SECONDS = 30.0
IN_PROCESS_SECONDS = 60.0


def partition_key(partition_by: Sequence[str], spec: Mapping[str, str]) -> str:
    """The key of a commit of ``spec`` (columns in the table's order; empty: the whole table)."""
    pairs = [(column, spec[column]) for column in partition_by if column in spec]
    if not pairs:
        return WHOLE_TABLE_KEY
    return "/".join(f"{escape_path_name(column)}={escape_path_name(value)}" for column, value in pairs)


def key_spec(key: str) -> dict[str, str]:
    """The partition spec a key names (``{}``: the whole table). Inverse of :func:`partition_key`."""
    if key == WHOLE_TABLE_KEY:
        return {}
    spec = {}
    for part in key.split("/"):
        column, sep, value = part.partition("=")
        if not sep or not column:
            raise ValueError(f"partition key {key!r} is not col=value[/col=value...]")
        spec[unquote(column)] = unquote(value)
    return spec


def downstream_spec(key: str, partition_by: Sequence[str]) -> dict[str, str]:
    """What a table partitioned by ``partition_by`` refreshes after an input committed ``key``.

    The same spec when each of its columns is one of the table's partition columns (a column of
    the same name is taken to carry the same value down the pipeline, as ``ds`` does); otherwise
    the whole table, since a partition of the input may feed any of its rows.
    """
    spec = key_spec(key)
    if spec and set(spec) <= set(partition_by):
        return spec
    return {}


def event_keys(
    partition_by: Sequence[str],
    spec: Mapping[str, str],
    *,
    periodic: bool,
    refresh_downstream: bool,
    triggered_by_inputs: bool,
) -> list[str]:
    """The partition keys to put on the table's asset event after a commit of ``spec``: one,
    or none when this refresh does not propagate (a one-time refresh not asked to) or its key is
    longer than Airflow keeps."""
    if not (periodic or refresh_downstream or triggered_by_inputs):
        return []
    key = partition_key(partition_by, spec)
    return [key] if len(key) <= MAX_KEY_LENGTH else []


def conf_for_key(params: Mapping[str, Any], key: str, partition_by: Sequence[str]) -> dict[str, Any]:
    """The refresh call of a run that an input's commit of ``key`` started: a one-time refresh of
    :func:`downstream_spec`, the run's other params (options, config) kept."""
    conf = {name: value for name, value in params.items() if name not in partition_by}
    conf[IS_PERIODIC] = False
    conf[STATIC_PARTITIONS] = downstream_spec(key, partition_by)
    return conf


def next_input_check(remaining: float) -> tuple[bool, float]:
    """``(deferred, seconds)``: how a refresh whose inputs have not committed its partition waits
    for the next check, with ``remaining`` seconds of its wait left (> 0)."""
    if remaining > IN_PROCESS_SECONDS:
        return True, DEFER_SECONDS
    return False, min(POLL_SECONDS, remaining)


def not_committed(table: str, spec: Mapping[str, str], upstream: Sequence[str], waited: float,
                  skip: bool) -> str:
    """Why a periodic refresh of ``spec`` did not run: its inputs did not commit it in time."""
    what = ",".join(f"{column}={value}" for column, value in spec.items())
    then = ("period skipped" if skip else
            "not refreshed ('upstream.missing-partition' = 'skip' skips such a period)")
    return (f"{table}: the periodic refresh of {what} waited {waited:g}s for the materialized tables it "
            f"reads, and {', '.join(upstream)} has not committed {what}: {then}")


def missed_keys(events: Mapping[str, Sequence[tuple[str, datetime]]], since: datetime) -> list[str]:
    """The partition keys a ``FRESHNESS = DOWNSTREAM`` table suspended at ``since`` missed.

    ``events`` holds each input asset's keyed events (key, time). Airflow queues no paused DAG on
    an asset event, so a key an input committed at or after ``since`` never reached the table;
    it is refreshed on RESUME once every input has committed it (a diamond's bottom still waits
    for both sides), as Airflow would have run it.
    """
    if not events:
        return []
    recent = {key for found in events.values() for key, when in found if when >= since}
    everywhere = set.intersection(*({key for key, _ in found} for found in events.values()))
    return sorted(recent & everywhere)

"""Resolved settings of a staged-table catalog (pure: built from a connection's fields or defaults)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_staged.staging.journal import AttemptJournal
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.journal_postgres import (
    DEFAULT_SCHEMA,
    PostgresJournal,
    is_postgres_url,
    redacted_url,
)
from airflow_provider_staged.staging.versions import RetentionPolicy

DEFAULT_ATTEMPT_TTL_SECONDS = 3600.0
_BOOL_TEXT = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
KNOWN_EXTRAS = {
    "warehouse",
    "journal",
    "journal_schema",
    "journal_dir",
    "atomic",
    "keep_versions",
    "max_version_age_hours",
    "version_grace_minutes",
    "attempt_ttl_minutes",
    "quarantine_hours",
    "spark_conf",
    "aws_conn_id",
}


def parse_bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.strip().lower()]
    raise ValueError(f"invalid {name} {value!r}: expected true or false")


def _optional_number(extras: dict[str, Any], key: str) -> float | None:
    value = extras.get(key)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"invalid connection extra {key}={value!r}: expected a number") from None


def _journal_location(extras: dict[str, Any], home: Path) -> tuple[str, str | None]:
    """(``journal_dir``, the shared journal's URL or None) from the ``journal`` and
    ``journal_dir`` extras: ``journal`` is a ``postgresql://`` URL or the file journal's directory
    (``journal_dir``, its older name, says the same); without either, ``<home>/journal``."""
    journal = str(extras.get("journal") or "")
    directory = str(extras.get("journal_dir") or "")
    if not journal:
        return directory or str(home / "journal"), None
    if is_postgres_url(journal):
        # The file journal's directory stays this host's scratch (a sink build's staging, secrets).
        return directory or str(home / "journal"), journal
    if urlsplit(journal).scheme not in ("", "file"):
        raise ValueError(
            f"invalid connection extra journal={redacted_url(journal)!r}: expected a postgresql:// URL "
            "or a local directory"
        )
    path = urlsplit(journal).path if journal.startswith("file:") else journal
    if directory and directory != path:
        raise ValueError(
            f"connection extras journal={journal!r} and journal_dir={directory!r} name two file "
            "journals: give one"
        )
    return path, None


@dataclass(frozen=True)
class StagedSettings:
    """Where the metastore, warehouse and journal are, and the lifecycle options.

    The journal is the shared PostgreSQL one at ``journal_url`` when set, else the file journal
    in ``journal_dir`` (one machine only; docs/DESIGN.md, "The shared journal").
    """

    metastore_uri: str
    warehouse: str
    journal_dir: str
    atomic: bool = True
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    attempt_ttl_seconds: float = DEFAULT_ATTEMPT_TTL_SECONDS
    spark_conf: dict[str, str] = field(default_factory=dict)
    # An Airflow ``aws`` connection with the S3 warehouse's endpoint and keys (None: environment).
    aws_conn_id: str | None = None
    journal_url: str | None = field(default=None, repr=False)
    journal_schema: str = DEFAULT_SCHEMA

    @cached_property
    def journal(self) -> AttemptJournal:
        if self.journal_url:
            return PostgresJournal(self.journal_url, self.journal_schema)
        return FileJournal(self.journal_dir)

    @classmethod
    def from_fields(
        cls, host: str, port: int | None, extras: dict[str, Any] | str | None, home: Path
    ) -> StagedSettings:
        """Build settings from a connection's host, port and extra JSON; unknown extras fail."""
        if isinstance(extras, str):
            extras = json.loads(extras) if extras.strip() else {}
        # A field left blank in the connection form is stored as null or "": the default.
        extras = {key: value for key, value in (extras or {}).items() if value not in (None, "")}
        unknown = sorted(set(extras) - KNOWN_EXTRAS)
        if unknown:
            raise ValueError(f"unknown staged connection extra(s) {unknown}: known {sorted(KNOWN_EXTRAS)}")
        if not host or not port or not all(name.strip() for name in host.split(",")):
            raise ValueError(f"staged connection needs the metastore host(s) and port, got {host!r}:{port!r}")
        keep = _optional_number(extras, "keep_versions")
        age_hours = _optional_number(extras, "max_version_age_hours")
        grace_minutes = _optional_number(extras, "version_grace_minutes")
        ttl_minutes = _optional_number(extras, "attempt_ttl_minutes")
        quarantine_hours = _optional_number(extras, "quarantine_hours")
        spark_conf = extras.get("spark_conf") or {}
        if not isinstance(spark_conf, dict):
            raise ValueError(f"invalid connection extra spark_conf={spark_conf!r}: expected an object")
        journal_dir, journal_url = _journal_location(extras, home)
        journal_schema = str(extras.get("journal_schema") or DEFAULT_SCHEMA)
        if extras.get("journal_schema") and not journal_url:
            raise ValueError("connection extra journal_schema needs a postgresql:// journal")
        if journal_url:
            PostgresJournal(journal_url, journal_schema)  # a bad URL or schema fails here, before any work
        defaults = RetentionPolicy()
        return cls(
            # Several hosts (``h1,h2``), as the Hive provider's connection takes them: one metastore
            # behind several servers on the port, tried in order (failover).
            metastore_uri=",".join(f"thrift://{name.strip()}:{int(port)}" for name in host.split(",")),
            warehouse=str(extras.get("warehouse") or home / "warehouse"),
            journal_dir=journal_dir,
            journal_url=journal_url,
            journal_schema=journal_schema,
            atomic=parse_bool(extras.get("atomic", True), "connection extra atomic"),
            retention=RetentionPolicy(
                keep_versions=int(keep) if keep is not None else defaults.keep_versions,
                max_age_seconds=age_hours * 3600 if age_hours is not None else defaults.max_age_seconds,
                grace_seconds=grace_minutes * 60 if grace_minutes is not None else defaults.grace_seconds,
                quarantine_seconds=(
                    quarantine_hours * 3600 if quarantine_hours is not None else defaults.quarantine_seconds
                ),
            ),
            attempt_ttl_seconds=ttl_minutes * 60 if ttl_minutes is not None else DEFAULT_ATTEMPT_TTL_SECONDS,
            spark_conf={str(k): str(v) for k, v in spark_conf.items()},
            aws_conn_id=str(extras["aws_conn_id"]) if extras.get("aws_conn_id") else None,
        )

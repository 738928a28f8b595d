"""What every engine is: where the staged write job runs, and how its secrets reach it."""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings


class Engine(ABC):
    """Where the Spark job runs; ``cancel`` may be called from a signal handler."""

    def __init__(self, settings: StagedSettings, spark_conf: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.spark_conf = {**settings.spark_conf, **(spark_conf or {})}

    @abstractmethod
    def run(self, sql: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        """Run ``sql`` into ``spec``; return the manifest (the committable)."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the running job (on_kill)."""

    def close(self) -> None:  # noqa: B027 (most engines hold nothing to release)
        """Release what the engine holds on a server (a remote session)."""


@contextlib.contextmanager
def job_env(env: dict[str, str]) -> Iterator[None]:
    """``env`` (the job's secrets) in this process's environment for the job's duration: the
    job's writers run here (embedded) or build their remote plan here (connect)."""
    previous = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

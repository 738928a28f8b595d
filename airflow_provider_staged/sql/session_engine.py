"""The engine of the SQL client's atomic CTAS: the staged write job on the client's own session.

A module of its own so that a session that runs no CTAS (e.g. ``-e "SELECT 1"``) does not
import the engines, the settings and the journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_staged.engine import spark_job
from airflow_provider_staged.engine.base import Engine

if TYPE_CHECKING:
    from airflow_provider_staged.staging.settings import StagedSettings


class SessionEngine(Engine):
    """The staged write job on the client's own Spark session (classic or Connect).

    The staging, the journal and the commit stay in the client process (the one commit path);
    only the query and the Parquet write run in Spark.
    """

    def __init__(self, settings: StagedSettings, spark: Any) -> None:
        super().__init__(settings)
        self.spark = spark

    def run(self, sql: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
        if env:  # a kind with secrets for the driver (JDBC): not a target of the SQL client
            raise ValueError(f"staged write to {spec.get('location')!r} needs driver secrets; "
                             "use the operator for it")
        return spark_job.run_staged_write(self.spark, sql, spec)

    def cancel(self) -> None:
        self.spark.interruptAll()

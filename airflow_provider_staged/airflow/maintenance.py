"""The ``staged_maintenance`` DAG, generated next to the refresh DAGs.

Three tasks in order, each logging what it did: ``reconcile`` (finish or roll back attempts of
ended tasks, expire abandoned ones), ``expire_partitions`` (partition TTL) and
``sweep_versions`` (retention of superseded versions and of expired partitions' files). Every
step takes the guards of the commit path (``staging.maintenance``), so the DAG runs safely
while refreshes commit. Its schedule is the shortest ``partition.expiration-check-interval``
of the materialized-table definitions with a TTL (Paimon's default, 1 h, without any).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_provider_staged.airflow.assets import DEFAULT_CONN_ID
from airflow_provider_staged.lineage.datasets import Lineage, expiry_lineage
from airflow_provider_staged.lineage.openlineage import LineageReporting
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB
from airflow_provider_staged.staging.partition_ttl import (
    DEFAULT_CHECK_INTERVAL_SECONDS,
    EXPIRATION_TIME,
    TtlError,
    check_interval,
)

log = logging.getLogger(__name__)

DAG_ID = "staged_maintenance"


def check_interval_of(definitions_dir: str | Path | None) -> timedelta:
    """The shortest check interval among the definitions with a TTL.

    Only files that mention the TTL option are parsed: this runs on every DAG parse.
    """
    from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition

    seconds = []
    for path in sorted(Path(definitions_dir).glob(DEFINITION_GLOB)) if definitions_dir else []:
        text = path.read_text(encoding="utf-8", errors="replace")
        if f"'{EXPIRATION_TIME}'" not in text:
            continue
        try:
            found = check_interval(parse_definition(text, path).options)
        except (DefinitionError, TtlError):
            continue  # a broken definition shows up as its own broken DAG
        if found is not None:
            seconds.append(found)
    return timedelta(seconds=min(seconds, default=DEFAULT_CHECK_INTERVAL_SECONDS))


class MaintenanceStepOperator(LineageReporting, PythonOperator):
    """One maintenance step; the expiry reports DROP of the partitions it dropped (OpenLineage)."""

    lineage: Lineage | None = None

    def lineage_report(self, succeeded: bool) -> Lineage | None:
        return self.lineage


def _step(step: str, conn_id: str, **context: Any) -> list[str]:
    """Run one maintenance step on ``conn_id``'s catalog; log and return what it did."""
    # Imported when the task runs: parsing the DAG file must stay cheap.
    from airflow_provider_staged.airflow.callbacks import airflow_task_state
    from airflow_provider_staged.airflow.hooks.staged_table import StagedTableHook
    from airflow_provider_staged.staging.expiry import SweepReport, sweep_expiry
    from airflow_provider_staged.staging.maintenance import (
        MaintenanceReport,
        VersionSweep,
        sweep_all_versions,
    )
    from airflow_provider_staged.staging.reconcile import reconcile

    settings = StagedTableHook(conn_id).get_settings()
    report = MaintenanceReport([], SweepReport(), VersionSweep())
    if step == "reconcile":
        report.reconciled = reconcile(settings, airflow_task_state)
    elif step == "expire_partitions":
        report.expiry = sweep_expiry(settings, conn_id=conn_id)
        if isinstance(context.get("task"), MaintenanceStepOperator):
            context["task"].lineage = expiry_lineage(
                settings.metastore_uri, {p.target: list(p.expired) for p in report.expiry.plans if p.expired}
            )
    else:
        report.versions = sweep_all_versions(settings)
    lines = [line for line in report.lines() if step == "expire_partitions" or not line.startswith("expiry:")]
    for line in lines or ["nothing to do"]:
        log.info("%s: %s", step, line)
    if report.failed:
        raise RuntimeError(f"{step} could not finish everything (see the log); the next run retries")
    return lines


def build_maintenance_dag(
    globals_dict: MutableMapping[str, Any],
    definitions_dir: str | Path | None = None,
    conn_id: str = DEFAULT_CONN_ID,
    schedule: timedelta | None = None,
) -> DAG:
    """Build ``staged_maintenance`` into ``globals_dict``; ``schedule`` overrides the check interval."""
    interval = schedule or check_interval_of(definitions_dir)
    dag = DAG(
        DAG_ID,
        schedule=interval,
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["staged", "maintenance"],
        description=f"Reconcile, partition expiry and version sweeps of {conn_id}, every {interval}",
    )
    previous = None
    for step in ("reconcile", "expire_partitions", "sweep_versions"):
        task = MaintenanceStepOperator(task_id=step, python_callable=_step, op_args=[step, conn_id], dag=dag)
        if previous is not None:
            previous >> task
        previous = task
    globals_dict[DAG_ID] = dag
    return dag

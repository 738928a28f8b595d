"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

The connection form is declared here (``conn-fields``, ``ui-field-behaviour``), not by hook
methods: Airflow 3.2+ reads it without importing the hook (``get_ui_field_behaviour`` is
deprecated and called only when wtforms is installed).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_staged import __version__

HOOK_CLASS = "airflow_provider_staged.airflow.hooks.staged_table.StagedTableHook"


def _field(label: str, types: str, description: str, **schema: Any) -> dict[str, Any]:
    """One typed field of the connection form, stored under its name in the connection's extra."""
    return {"label": label, "description": description, "schema": {"type": [types, "null"], **schema}}


# The connection's extras (staging/settings.py KNOWN_EXTRAS); blank means the default named.
CONN_FIELDS = {
    "warehouse": _field(
        "Warehouse",
        "string",
        "Where tables and their versions are written (file:/..., s3a://...); default "
        "$STAGED_HOME/warehouse. Must be reachable from the Airflow workers and Spark.",
    ),
    "journal": _field(
        "Shared journal",
        "string",
        "A postgresql:// URL of the attempt journal that every worker, the DAG processor, the CLI and "
        "the page share (put the password in ~/.pgpass); blank: the journal directory below.",
    ),
    "journal_schema": _field(
        "Journal schema",
        "string",
        "The PostgreSQL schema of the shared journal's tables; default staged_journal.",
    ),
    "journal_dir": _field(
        "Journal directory",
        "string",
        "Local directory of the attempt journal, shared by every worker; default $STAGED_HOME/journal.",
    ),
    "atomic": _field(
        "Atomic builds",
        "boolean",
        "Build tables atomically (staged, committed on success); off: plain create-then-insert.",
        default=True,
    ),
    "keep_versions": _field(
        "Versions kept",
        "integer",
        "Superseded versions kept per table besides the current one; default 2.",
        minimum=0,
    ),
    "max_version_age_hours": _field(
        "Maximum version age (hours)",
        "number",
        "Superseded versions older than this are deleted; default 168 (7 days).",
        minimum=0,
    ),
    "version_grace_minutes": _field(
        "Version grace (minutes)",
        "number",
        "No superseded version is deleted sooner than this, so running readers finish; default 60.",
        minimum=0,
    ),
    "attempt_ttl_minutes": _field(
        "Attempt TTL (minutes)",
        "number",
        "An attempt whose heartbeat stopped this long ago is expired by staged reconcile; default 60.",
        minimum=0,
    ),
    "quarantine_hours": _field(
        "Quarantine (hours)",
        "number",
        "A version that failed its audits stays unpublished for inspection this long, then is "
        "discarded; default 168 (7 days).",
        minimum=0,
    ),
    "spark_conf": _field(
        "Spark configuration",
        "object",
        'Spark properties for every build on this catalog, e.g. {"spark.executor.memory": "4g"}.',
    ),
    "aws_conn_id": _field(
        "AWS connection id",
        "string",
        "An aws connection with the keys, endpoint_url and region_name of an s3a:// warehouse; "
        "default: the AWS_* environment variables.",
    ),
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-staged",
        "name": "Staged tables",
        "description": "Atomic Spark table builds (staged CTAS/RTAS) and materialized tables.",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": HOOK_CLASS,
                "hook-name": "Staged tables (Hive Metastore)",
                "connection-type": "staged_hive",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password"],
                    "relabeling": {"host": "Metastore host", "port": "Metastore Thrift port"},
                    "placeholders": {"host": "metastore.example.com", "port": "9083"},
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
        "operators": [
            {
                "integration-name": "Staged tables",
                "python-modules": [
                    "airflow_provider_staged.airflow.operators.staged_table",
                    "airflow_provider_staged.airflow.operators.materialized_refresh",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Staged tables",
                "python-modules": ["airflow_provider_staged.airflow.hooks.staged_table"],
            }
        ],
        # A table's asset URI (hive://<metastore host>:<port>/<db>/<table>): Airflow normalizes it
        # with the handler, the OpenLineage provider names its dataset with the converter.
        "asset-uris": [
            {
                "schemes": ["hive"],
                "handler": "airflow_provider_staged.airflow.assets.sanitize_uri",
                "to_openlineage_converter": (
                    "airflow_provider_staged.airflow.assets.convert_asset_to_openlineage"
                ),
            }
        ],
        "integrations": [
            {
                "integration-name": "Staged tables",
                "external-doc-url": "https://github.com/airflow-provider-staged",
                "tags": ["software"],
            }
        ],
        "config": {
            "staged": {
                "description": "Staged (atomic) table builds and materialized tables.",
                "options": {
                    "atomicity_enabled": {
                        "description": (
                            "Default for operators that do not set atomic=: build tables atomically "
                            "(staged, committed on success). False uses the plain create-then-insert "
                            "path (the analogue of Flink's table.ctas.atomicity-enabled)."
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "True",
                    },
                    "refresh_engine": {
                        "description": (
                            "Where a materialized table's refresh runs its Spark when its definition "
                            "sets no 'engine' option: embedded (in the task; local[*], or "
                            "STAGED_SPARK_MASTER) or connect (Spark Connect, see spark_connect_conn_id)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "connect",
                        "default": "embedded",
                    },
                    "spark_connect_conn_id": {
                        "description": (
                            "The spark_connect connection of refreshes with engine connect; empty: "
                            "STAGED_GATEWAY_URL, else the local gateway (`staged gateway start`)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "spark_connect_default",
                        "default": "",
                    },
                },
            }
        },
    }

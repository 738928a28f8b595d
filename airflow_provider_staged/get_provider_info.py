"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_staged import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-staged",
        "name": "Staged tables",
        "description": "Atomic Spark table builds (staged CTAS/RTAS) and materialized tables.",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_staged.airflow.hooks.staged_table.StagedTableHook",
                "connection-type": "staged_hive",
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
                "description": "Staged (atomic) table builds.",
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
                    }
                },
            }
        },
    }

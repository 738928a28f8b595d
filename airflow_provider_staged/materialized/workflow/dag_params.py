"""Airflow ``Param`` objects for the refresh params (the Trigger DAG form)."""

from __future__ import annotations

from airflow.sdk import Param

from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.params import param_schemas


def build_params(definition: MaterializedTableDefinition) -> dict[str, Param]:
    params = {}
    for name, schema in param_schemas(definition).items():
        schema = dict(schema)
        params[name] = Param(schema.pop("default"), description=schema.pop("description"), **schema)
    return params

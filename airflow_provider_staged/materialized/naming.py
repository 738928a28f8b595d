"""Names shared by the DAG factory and its clients: definition files, DAG ids and the tag.

Pure (no Airflow import): the client side (``staged mt``, the workflow scheduler) needs these
names without loading the factory's DAG-building imports.
"""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_staged.identifiers import TableIdentifier

DAG_ID_PREFIX = "mt__"
BROKEN_DAG_ID_PREFIX = "mt__broken__"
DEFINITION_GLOB = "*.sql"
TAG = "materialized-table"


def dag_id_for(identifier: TableIdentifier) -> str:
    return f"{DAG_ID_PREFIX}{identifier.database}__{identifier.table}"


def broken_dag_id(path: Path) -> str:
    return BROKEN_DAG_ID_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)

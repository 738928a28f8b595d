"""Ask Airflow to re-parse the DAG file that builds a table, right after its definition changed.

A deployment with many definitions parses its factory files rarely (a long
``[dag_processor] min_file_process_interval``, see :mod:`.shards`); a create, change or drop
then asks for the parse of the one file concerned (``PUT /api/v2/parseDagFile/{file_token}``,
the DAG processor takes such requests first). Airflow only signs a token for a file that has a
DAG, so a new table borrows the token of a table of its shard, found from the definitions
folder. Where no token can be had (the first table of an empty shard), the regular parse
brings the DAG.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from airflow_client.client import ApiClient
from airflow_client.client.api.dag_api import DAGApi
from airflow_client.client.api.dag_parsing_api import DAGParsingApi
from airflow_client.client.exceptions import ApiException

from airflow_provider_staged.materialized.definition import DefinitionError, read_identifier
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB, TAG, dag_id_for
from airflow_provider_staged.materialized.workflow.shards import Shard, shard_index
from airflow_provider_staged.staging.identifiers import TableIdentifier

log = logging.getLogger(__name__)

# Tables of the shard whose DAG is looked up for a token: a few, as a table just dropped or
# not parsed yet has none.
_NEIGHBOURS_TRIED = 5


class ParseRequests:
    """Asks for the parse of ``tables``' files now and again every ``every`` seconds while a
    caller waits for Airflow to show a change.

    Again, because one parse is not always enough: Airflow stores a changed DAG at most every
    ``[core] min_serialized_dag_update_interval`` (30 s by default), so a parse soon after the
    file's last change is dropped; and it marks a DAG stale (its table dropped) only from a parse
    ``[dag_processor] stale_dag_threshold`` (50 s) after the DAG's own last parse. A deployment
    that re-parses rarely would show such a change only at its next regular parse.
    """

    def __init__(self, client: ApiClient, tables: Iterable[TableIdentifier], definitions_dir: Path,
                 every: float = 10.0) -> None:
        self.client, self.tables, self.definitions_dir = client, list(tables), definitions_dir
        self.every = every
        self._last: float | None = None

    def when_due(self) -> None:
        if self._last is None or time.monotonic() - self._last >= self.every:
            request_parse(self.client, self.tables, self.definitions_dir)
            self._last = time.monotonic()


def request_parse(client: ApiClient, tables: Iterable[TableIdentifier], definitions_dir: Path) -> None:
    """Ask for a parse of the file of each of ``tables`` (each file once); a refusal is logged,
    not raised: the caller's wait for the DAG then reports what it saw."""
    tokens = {token for table in tables if (token := _file_token(client, table, definitions_dir))}
    parsing = DAGParsingApi(client)
    for token in tokens:
        try:
            parsing.reparse_dag_file(token)
        except ApiException as err:
            log.warning("Airflow refused to re-parse a DAG file now (HTTP %s); its next regular "
                        "parse brings the change", err.status)


def _file_token(client: ApiClient, table: TableIdentifier, definitions_dir: Path) -> str | None:
    api = DAGApi(client)
    own = _token_of(api, dag_id_for(table))
    if own is not None:
        return own
    try:
        sample = api.get_dags(tags=[TAG], limit=1).dags
    except ApiException:
        return None
    if not sample:
        return None
    shard = Shard.of_dag_file(sample[0].fileloc)
    if shard.count == 1:  # one file builds every table
        return sample[0].file_token
    target = Shard(shard_index(table.name, shard.count), shard.count)
    neighbours = itertools.islice(_tables_of(target, definitions_dir, table), _NEIGHBOURS_TRIED)
    return next((token for other in neighbours if (token := _token_of(api, dag_id_for(other)))), None)


def _tables_of(shard: Shard, definitions_dir: Path, other_than: TableIdentifier) -> Iterable[TableIdentifier]:
    for path in sorted(definitions_dir.glob(DEFINITION_GLOB)):
        try:
            table = read_identifier(path)
        except DefinitionError:
            continue
        if table != other_than and shard.holds(table, path):
            yield table


def _token_of(api: DAGApi, dag_id: str) -> str | None:
    try:
        dag = api.get_dag(dag_id)
    except ApiException:
        return None
    return None if dag.is_stale else dag.file_token

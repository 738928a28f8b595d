"""The Airflow Asset that stands for a table, named as its OpenLineage dataset is named.

A Hive table's asset URI is ``hive://<metastore host>:<port>/<database>/<table>``: the dataset's
namespace (``hive://<host>:<port>``, OpenLineage's naming spec) and its name ``<database>.<table>``
with ``/`` for ``.``, as Airflow's Postgres provider joins ``postgres://`` assets. The provider
registers the ``hive`` scheme (``asset-uris`` of ``get_provider_info``): :func:`sanitize_uri`
normalizes such a URI wherever an Asset is made, and :func:`convert_asset_to_openlineage` turns the
asset back into the dataset for Airflow's OpenLineage provider.

Kept light (the CLI imports :data:`DEFAULT_CONN_ID`): Airflow and the rest are imported on use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_staged.staging.identifiers import TableIdentifier

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow.sdk import Asset

# The staged_hive connection used when none is named (kept here: this module imports nothing heavy).
DEFAULT_CONN_ID = "staged_default"


def table_asset_uri(metastore_uri: str, identifier: TableIdentifier) -> str:
    """``hive://<metastore host>:<port>/<database>/<table>`` of the table in that metastore."""
    from airflow_provider_staged.lineage.datasets import hive_namespace

    return f"{hive_namespace(metastore_uri)}/{identifier.database}/{identifier.table}"


def table_asset(identifier: TableIdentifier, metastore_uri: str) -> Asset:
    """The table's asset: the one the staged operators and the refresh tasks emit events for.

    Named by its URI, as Airflow names an asset given only one: a name is unique in Airflow,
    and ``<database>.<table>`` alone would make the same table name in two metastores (or one
    metastore reached at another address: a failover URI, a proxy) one name with two URIs,
    which Airflow refuses as an inactive asset when the task runs.
    """
    from airflow.sdk import Asset

    return Asset(uri=table_asset_uri(metastore_uri, identifier))


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normalizer of ``hive://`` asset URIs: a host, port 9083 when none is given,
    host and names lower-cased (as the metastore stores them), exactly ``/<database>/<table>``."""
    from airflow_provider_staged.lineage.datasets import HIVE_DEFAULT_PORT, HIVE_SCHEME

    if not uri.hostname:
        raise ValueError(f"asset URI {uri.geturl()!r}: hive:// needs the metastore host")
    parts = uri.path.split("/")
    if len(parts) != 3:  # the leading slash, the database and the table
        raise ValueError(f"asset URI {uri.geturl()!r}: expected hive://<host>:<port>/<database>/<table>")
    identifier = TableIdentifier(parts[1], parts[2])  # raises naming a bad name
    return uri._replace(
        scheme=HIVE_SCHEME,
        netloc=f"{uri.hostname}:{uri.port or HIVE_DEFAULT_PORT}",
        path=f"/{identifier.database}/{identifier.table}",
    )


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """The OpenLineage dataset of a (normalized) ``hive://`` asset: ``hive://<host>:<port>`` +
    ``<database>.<table>``."""
    from urllib.parse import urlsplit

    from airflow.providers.common.compat.openlineage.facet import Dataset

    parts = urlsplit(asset.uri)
    return Dataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path.strip("/").replace("/", "."))

"""OpenLineage for staged tasks: a :class:`.lineage.Lineage` as the provider's ``OperatorLineage``.

Airflow's OpenLineage provider (the optional extra ``[openlineage]``) calls an operator's
``get_openlineage_facets_on_complete`` / ``_on_failure`` in the task process after the task
ended; :class:`LineageReporting` implements them from ``lineage_report()``. Without the
provider nobody calls them, and :func:`operator_lineage` returns None if they are called anyway.

The START event (``get_openlineage_facets_on_start``, before ``execute``) names what the task
is about to read and write (``lineage_plan()``); COMPLETE and FAIL say what it did.

Facets: inputs by name; the output with ``schema``, ``lifecycleStateChange`` (CREATE, OVERWRITE,
DROP), ``columnLineage`` (DIRECT transformations), ``version`` (the committed attempt's id),
``symlinks`` (the table as ``TABLE`` and, for a Hive table, the committed version's directory
as ``LOCATION``: the name openlineage-spark gives it) and the output facets
``outputStatistics`` (rows, bytes, files from the manifest) and ``subset`` (the partitions
written or dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_provider_staged.lineage.datasets import Lineage, OutputLineage

log = logging.getLogger(__name__)


def operator_lineage(lineage: Lineage | None) -> Any | None:
    """The provider's ``OperatorLineage`` for ``lineage``; None without the provider or lineage."""
    if lineage is None:
        return None
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.generated.base import InputDataset
    except ImportError:
        return None
    return OperatorLineage(
        inputs=[InputDataset(namespace=d.namespace, name=d.name) for d in lineage.inputs],
        outputs=[_output(output) for output in lineage.outputs],
    )


def _output(output: OutputLineage) -> Any:
    from openlineage.client.generated.base import OutputDataset
    from openlineage.client.generated.base_subset_dataset import (
        OutputSubsetOutputDatasetFacet,
        Partition,
        PartitionSubsetCondition,
    )
    from openlineage.client.generated.column_lineage_dataset import (
        ColumnLineageDatasetFacet,
        Fields,
        InputField,
        Transformation,
    )
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.lifecycle_state_change_dataset import (
        LifecycleStateChange,
        LifecycleStateChangeDatasetFacet,
    )
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    facets: dict[str, Any] = {}
    if output.schema:
        facets["schema"] = SchemaDatasetFacet(
            fields=[SchemaDatasetFacetFields(name=name, type=kind) for name, kind in output.schema]
        )
    if output.lifecycle is not None:
        facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
            lifecycleStateChange=LifecycleStateChange(output.lifecycle)
        )
    if output.version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=output.version)
    if output.location is not None:
        facets["symlinks"] = SymlinksDatasetFacet(
            identifiers=[
                Identifier(namespace=output.dataset.namespace, name=output.dataset.name, type="TABLE"),
                Identifier(namespace=output.location.namespace, name=output.location.name, type="LOCATION"),
            ]
        )
    if output.columns:
        facets["columnLineage"] = ColumnLineageDatasetFacet(
            fields={
                column: Fields(
                    inputFields=[
                        InputField(
                            namespace=o.dataset.namespace,
                            name=o.dataset.name,
                            field=o.column,
                            transformations=[Transformation(type="DIRECT", subtype=o.subtype)],
                        )
                        for o in origins
                    ]
                )
                for column, origins in output.columns.items()
            }
        )
    if output.assertions:
        facets["dataQualityAssertions"] = DataQualityAssertionsDatasetFacet(
            assertions=[
                Assertion(
                    assertion=item["kind"],
                    success=bool(item["passed"]) and not item.get("failing"),
                    # fail blocks the publish; drop and warn do not
                    severity="error" if item["mode"] == "fail" else "warn",
                    name=item["name"],
                    actual=_actual(item),
                )
                for item in output.assertions
            ]
        )
    output_facets: dict[str, Any] = {}
    if output.rows is not None or output.bytes is not None:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
            rowCount=output.rows, size=output.bytes, fileCount=output.files
        )
    if output.partitions:
        output_facets["subset"] = OutputSubsetOutputDatasetFacet(
            outputCondition=PartitionSubsetCondition(
                partitions=[
                    Partition(dimensions=dict(p), identifier="/".join(f"{k}={v}" for k, v in p.items()))
                    for p in output.partitions
                ]
            )
        )
    return OutputDataset(
        namespace=output.dataset.namespace,
        name=output.dataset.name,
        facets=facets,
        outputFacets=output_facets,
    )


def _actual(result: Mapping[str, Any]) -> str | None:
    """What an audit found: its failing rows (or parts), else a table audit's measured value."""
    found = result.get("failing")
    if found is None:
        found = result.get("value")
    return None if found is None else str(found)


class LineageReporting:
    """Mixin for an operator: OpenLineage facets from ``lineage_report()`` (override it).

    The maintenance DAG's operators can mix it in too and return e.g. ``Lineage(outputs=
    (lineage.dropped(dataset, partitions),))`` for an expiry.
    """

    def lineage_plan(self) -> Lineage | None:
        """What this task is about to read and write; called before ``execute``."""
        return None

    def lineage_report(self, succeeded: bool) -> Lineage | None:
        """What this task read and wrote; called after the task ended."""
        return None

    def get_openlineage_facets_on_start(self) -> Any | None:
        return operator_lineage(self.lineage_plan())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any | None:
        return operator_lineage(self.lineage_report(succeeded=True))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any | None:
        return operator_lineage(self.lineage_report(succeeded=False))

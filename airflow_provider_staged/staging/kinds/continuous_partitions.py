"""A one-time partition overwrite of a CONTINUOUS table beside its stream (``hive_partitions_continuous``).

The overwrite is a :class:`HivePartitionStagedTable` (one ``alter_partitions`` switches every
partition it touches) whose input is the source files the stream had committed up to micro-batch
``after_batch`` (:func:`airflow_provider_staged.materialized.continuous_run.snapshot_query`).
The stream goes on meanwhile: each later micro-batch publishes a new version of the partitions it
touches, holding its own files, named ``<query id>-b<batch id>-…`` (``hive_append`` on
catalog partitions), beside links to the files already there. The switch runs under the table
lock every sink commit takes; before it, it links the files of the stream's micro-batches after
``after_batch`` from each switched partition's current location into the new one. So the new
partition holds exactly the rows of every source file the stream has committed, once: those up to
``after_batch`` from the overwrite, the later ones carried over, and the stream's next
micro-batches start from the new location. The journal records ``query_id`` and ``after_batch``,
so reconcile redoes exactly this switch (a file already linked is kept).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_sink import link_files, streamed_batch
from airflow_provider_staged.storage.files import normalize_location

if TYPE_CHECKING:
    from hmsclient.genthrift.hive_metastore import ttypes

    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
    from airflow_provider_staged.staging.journal import AttemptRecord
    from airflow_provider_staged.staging.manifest import Manifest
    from airflow_provider_staged.staging.settings import StagedSettings


class ContinuousPartitionStagedTable(HivePartitionStagedTable):
    """Replace the partitions of ``partition_spec`` with what the stream ``query_id`` committed up
    to ``after_batch`` (-1: nothing yet), keeping its later micro-batches (module docstring)."""

    kind = "hive_partitions_continuous"
    prepares_switch = False  # its switch first links the stream's later files, under the lock

    def __init__(self, *args: Any, query_id: str = "", after_batch: int = -1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.query_id = query_id
        self.after_batch = after_batch

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> ContinuousPartitionStagedTable:
        staged = super().from_record(record, settings)
        assert isinstance(staged, ContinuousPartitionStagedTable)
        staged.query_id = record.catalog["query_id"]
        staged.after_batch = int(record.catalog["after_batch"])
        return staged

    def catalog_ref(self) -> dict[str, Any]:
        return {**super().catalog_ref(), "query_id": self.query_id, "after_batch": self.after_batch}

    def swap(
        self, txn: MetastoreClient, current: ttypes.Table, record: AttemptRecord, manifest: Manifest
    ) -> list[str]:
        # Under the table lock: no micro-batch commits between the links and the switch.
        for partition in self._inside_spec(txn, current):
            old = normalize_location(partition.sd.location)
            new = self._location(record, tuple(partition.values))
            if old != new:  # else a retried switch: the partition is already there
                link_files(old, new, self._later)
        return super().swap(txn, current, record, manifest)

    def _later(self, name: str) -> bool:
        """Whether file ``name`` holds rows of one of the stream's micro-batches after ``after_batch``."""
        batch = streamed_batch(name, self.query_id)
        return batch is not None and batch > self.after_batch

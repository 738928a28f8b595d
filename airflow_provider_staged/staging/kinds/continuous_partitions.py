"""A one-time partition overwrite of a CONTINUOUS table beside its stream (``hive_partitions_continuous``).

The overwrite is a :class:`HivePartitionStagedTable` (one ``alter_partitions`` switches every
partition it touches) whose input is the source files the stream had committed up to micro-batch
``after_batch`` (see :func:`airflow_provider_staged.materialized.continuous_run.one_time_refresh`).
The stream goes on meanwhile: each later micro-batch puts its rows for a partition into that
partition's registered location as ``batch-<query id>-b<batch id>-…/`` (``hive_append``). The
switch runs under the table lock every sink commit takes; before it, it copies the stream's
batch directories after ``after_batch`` from each switched partition's old location into the
new one. So the new partition holds exactly the rows of every source file the stream has
committed, once: those up to ``after_batch`` from the overwrite, the later ones copied, and the
stream's next micro-batches land in the new location. The journal records ``query_id`` and
``after_batch``, so reconcile redoes exactly this switch (a copy is renamed into place whole, and
skipped when there).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from airflow_provider_staged.staging.kinds.hive_sink import BATCH_DIR_PREFIX
from airflow_provider_staged.storage import delete_dir, exists, list_dir, normalize_location

if TYPE_CHECKING:
    from hmsclient.genthrift.hive_metastore import ttypes

    from airflow_provider_staged.metastore.client import MetastoreClient
    from airflow_provider_staged.settings import StagedSettings
    from airflow_provider_staged.staging.journal import AttemptRecord
    from airflow_provider_staged.staging.manifest import Manifest


def streamed_batch(directory: str, query_id: str) -> int | None:
    """The micro-batch of ``query_id`` a sink batch directory holds (None: not one of its)."""
    found = re.fullmatch(rf"{re.escape(BATCH_DIR_PREFIX + query_id)}-b(\d+)-.+", directory)
    return int(found.group(1)) if found else None


def _copy_dir(source: str, target: str) -> None:
    """Copy ``source`` to ``target`` whole: into a hidden sibling first, then one rename."""
    from pyarrow import fs as pafs

    parent, _, name = target.rpartition("/")
    temporary = f"{parent}/_copying-{name}"
    delete_dir(temporary)  # a copy cut short by a crash
    pafs.copy_files(source, temporary)
    filesystem, temporary_path = pafs.FileSystem.from_uri(temporary)
    filesystem.move(temporary_path, pafs.FileSystem.from_uri(target)[1])


class ContinuousPartitionStagedTable(HivePartitionStagedTable):
    """Replace the partitions of ``partition_spec`` with what the stream ``query_id`` committed up
    to ``after_batch`` (-1: nothing yet), keeping its later micro-batches (module docstring)."""

    kind = "hive_partitions_continuous"

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
        # Under the table lock: no micro-batch commits between the copy and the switch.
        for partition in self._inside_spec(txn, current):
            self._carry_over(normalize_location(partition.sd.location),
                             self._location(record, tuple(partition.values)))
        return super().swap(txn, current, record, manifest)

    def _carry_over(self, old: str, new: str) -> None:
        """Copy the stream's micro-batches after ``after_batch`` from ``old`` into ``new``."""
        if old == new:
            return  # a retried switch: the partition is already there
        for entry in list_dir(old):
            batch = streamed_batch(entry.name, self.query_id)
            target = f"{new}/{entry.name}"
            if entry.is_dir and batch is not None and batch > self.after_batch and not exists(target):
                _copy_dir(entry.location, target)

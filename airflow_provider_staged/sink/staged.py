"""A sink as the target of a staged build (kind ``sink``): begin → written → commit → housekeep.

The build's Spark job runs the sink's writers only (``runtime.stage_batch``): the committables
are pickled into the attempt's directory and journaled as written; the commit runs the sink's
committers; abort lets the sink's global committer delete what was staged. ``is_published`` asks
the global committer (``filter_recovered_committables``), so a sink that keeps the idempotency
contract is recognised as committed after a crash. The journal keeps the pickled sink (needed to
rebuild the attempt): a sink must keep credentials out of its pickle (``PostgresSink`` does; see
``Sink.shipping``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.sink.api import Sink, run_commit
from airflow_provider_staged.sink.runtime import abort_staged, stage_batch
from airflow_provider_staged.sink.tasks import decode_sink, encode_sink, load_committables
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.attempts import JournaledStagedTable, run_attempt
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptRecord, TaskRef
from airflow_provider_staged.staging.manifest import Manifest
from airflow_provider_staged.storage.files import delete_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_provider_staged.staging.settings import StagedSettings

log = logging.getLogger(__name__)

COMMITTABLES_FILE = "committables.pickle"


class SinkStagedTable(JournaledStagedTable):
    """One staged build written through ``sink``."""

    kind = "sink"

    def __init__(
        self,
        sink: Sink[Any, Any],
        journal: AttemptJournal,
        local_dir: str,
        mode: str = "append",
        task: TaskRef | None = None,
        attempt_id: str | None = None,
    ) -> None:
        """``local_dir``: this host's state directory (``StagedSettings.journal_dir``), where the
        build stages its committables."""
        super().__init__(sink.name, StagingPurpose.CREATE_OR_REPLACE_TABLE_AS, journal, task, attempt_id)
        self.sink = sink
        self.local_dir = local_dir
        self.mode = mode

    @classmethod
    def from_record(cls, record: AttemptRecord, settings: StagedSettings) -> SinkStagedTable:
        return cls(
            decode_sink(record.catalog["sink"]), settings.journal, settings.journal_dir,
            record.catalog["mode"], record.task, record.attempt_id,
        )

    def check_target(self) -> None:
        """Nothing to check: the sink decides what its writes do to the target."""

    def target_exists(self) -> bool:
        return True

    def staging_location(self) -> str:
        return os.path.join(self.local_dir, "sink-staging", self.attempt_id)

    def write_spec(self) -> dict[str, Any]:
        return {"format": "sink", "location": self.location, "mode": self.mode}

    def catalog_ref(self) -> dict[str, Any]:
        return {"sink": encode_sink(self.sink), "mode": self.mode}

    @contextlib.contextmanager
    def catalog_transaction(self, exclusive: bool = True) -> Iterator[None]:
        yield None  # the sink's committers hold their own locks and transactions

    def load_current(self, txn: Any) -> None:
        return None

    def _committables(self, record: AttemptRecord) -> list[Any] | None:
        path = os.path.join(record.location, COMMITTABLES_FILE)
        return load_committables(path) if os.path.exists(path) else None

    def create_target(self, txn: Any, record: AttemptRecord, manifest: Manifest) -> None:
        """Run the sink's committers (whatever the target's state: the sink handles it)."""
        run_commit(self.sink, self._committables(record) or [])
        global_committer = self.sink.create_global_committer()
        if global_committer is not None:
            global_committer.end_of_input()

    def swap(self, txn: Any, current: Any, record: AttemptRecord, manifest: Manifest) -> None:
        self.create_target(txn, record, manifest)

    def is_published(self, record: AttemptRecord) -> bool:
        committables = self._committables(record)
        global_committer = self.sink.create_global_committer()
        if not committables or global_committer is None:
            return False
        return not global_committer.filter_recovered_committables([global_committer.combine(committables)])

    def discard(self, record: AttemptRecord) -> None:
        # Also a write whose driver died mid-write: its writers' staging goes too.
        abort_staged(self.sink, os.path.join(record.location, COMMITTABLES_FILE))
        delete_dir(record.location)

    def after_commit(self, record: AttemptRecord) -> None:
        delete_dir(record.location)


def build_with_sink(
    spark: SparkSession,
    sql: str,
    sink: Sink[Any, Any],
    settings: StagedSettings,
    mode: str = "append",
    task: TaskRef | None = None,
) -> Manifest | None:
    """A staged build of ``sql`` into ``sink``: the one commit path, aborted on any failure."""
    staged = SinkStagedTable(sink, settings.journal, settings.journal_dir, mode, task)

    def write(spec: dict[str, Any]) -> Manifest:
        committables = stage_batch(spark.sql(sql), sink, os.path.join(spec["location"], COMMITTABLES_FILE),
                                   spec["mode"])
        log.info("staged build into %s: %d committable(s) staged", sink.name, len(committables))
        return Manifest(location=spec["location"], format="sink")

    return run_attempt(staged, write, settings.attempt_ttl_seconds)

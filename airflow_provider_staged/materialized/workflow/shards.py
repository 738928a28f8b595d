"""Shards of the definitions folder: several DAG files, each building the DAGs of some tables.

Airflow parses a DAG file as a whole, and a parse of one file over 10,000 definitions takes
~27 s (the DAG objects alone ~22 s). Split over N files, one parse takes 1/N of it, and with a
long ``[dag_processor] min_file_process_interval`` nothing is re-parsed while no definition
changes; a change asks Airflow to re-parse its own shard's file at once (REST ``parseDagFile``).

A table's shard is a stable hash of its name, not of its file's: two files of one table fall in
one shard, which sees both and refuses them (the duplicate check stays whole). The shard count
is in each shard file's name, so a client that sees one DAG's file knows every table's shard.
Pure: no Airflow import.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_staged.materialized.catalog_status import write_text_atomically
from airflow_provider_staged.staging.identifiers import TableIdentifier

MAX_SHARDS = 256
UNSHARDED_FILE = "materialized_tables.py"
_SHARD_FILE = re.compile(r"materialized_tables_shard_(\d+)_of_(\d+)\.py")

SHARD_FILE_TEXT = '''\
"""Refresh DAGs of shard {number} of {count} of the materialized tables (airflow DAG): the tables
whose name hashes to this shard (``staged mt shards`` wrote this file; see
``airflow_provider_staged/materialized/workflow/shards.py``)."""

from pathlib import Path

from airflow_provider_staged.discovery.embedded import definitions_folder
from airflow_provider_staged.materialized.workflow.dag_factory import build_dags
from airflow_provider_staged.materialized.workflow.shards import Shard

build_dags(definitions_folder(Path(__file__).parent), globals(), shard=Shard.of_dag_file(__file__))
'''


class ShardError(ValueError):
    """A shard count or shard file name that cannot be used."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ShardError(f"invalid shard count {self.count}: between 1 and {MAX_SHARDS}")
        if not 0 <= self.index < self.count:
            raise ShardError(f"invalid shard {self.index} of {self.count}")

    @property
    def file_name(self) -> str:
        """``materialized_tables_shard_03_of_16.py``: numbered from 1, as people count."""
        width = len(str(self.count))
        return f"materialized_tables_shard_{self.index + 1:0{width}d}_of_{self.count}.py"

    def holds(self, table: TableIdentifier | None, path: Path) -> bool:
        """Whether the definition of ``table`` in ``path`` is this shard's; a file whose table
        name cannot be read (a broken definition) goes by its file name."""
        key = table.name if table is not None else path.name
        return shard_index(key, self.count) == self.index

    @classmethod
    def of_dag_file(cls, path: str | Path) -> Shard:
        """The shard a DAG file builds: the whole folder for ``materialized_tables.py`` (or any
        other name), else the one its name says."""
        match = _SHARD_FILE.fullmatch(Path(path).name)
        if match is None:
            return cls(0, 1)
        number, count = int(match[1]), int(match[2])
        return cls(number - 1, count)

    @classmethod
    def all_of(cls, count: int) -> list[Shard]:
        if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= MAX_SHARDS:
            raise ShardError(f"invalid shard count {count!r}: between 2 and {MAX_SHARDS} "
                             f"(one file, {UNSHARDED_FILE}, needs no shards)")
        return [cls(index, count) for index in range(count)]

    def file_text(self) -> str:
        return SHARD_FILE_TEXT.format(number=self.index + 1, count=self.count)


def shard_index(name: str, count: int) -> int:
    """Stable across processes and hosts (unlike ``hash``): CRC-32 of the lower-case name."""
    return zlib.crc32(name.lower().encode()) % count


def install_shard_files(dags_folder: Path, count: int) -> list[Path]:
    """Write the ``count`` shard files into ``dags_folder``, replacing shard files of another
    count; refused while the one-file factory is there (it would build every table again)."""
    shards = Shard.all_of(count)
    if not dags_folder.is_dir():
        raise ShardError(f"DAGs folder {dags_folder} does not exist")
    if (dags_folder / UNSHARDED_FILE).exists():
        raise ShardError(f"{dags_folder / UNSHARDED_FILE} builds every table: remove it first, or "
                         "each table would have a DAG from it and one from its shard")
    files = [dags_folder / shard.file_name for shard in shards]
    for old in dags_folder.glob("materialized_tables_shard_*.py"):
        if _SHARD_FILE.fullmatch(old.name) and old not in files:
            old.unlink()
    for shard, path in zip(shards, files, strict=True):
        write_text_atomically(path, shard.file_text())
    return files

"""The dependency graph of a definitions folder's materialized tables (pure: no Airflow, no Spark).

A table depends on a materialized table its query reads. The inputs come from the query as the
lineage finds them (:func:`~airflow_provider_staged.lineage.datasets.read_tables`), in database
``default``, where the refreshes read a definition. Edges run upstream -> downstream, the way the
data flows. Two kinds of input are never a dependency:

- a table of another catalog (``cat.db.t``): materialized tables live in Spark's session catalog
  (the metastore), so no definition here writes it and nothing here can order its refreshes;
- the table itself: its query reads the table's previous version, which its own refresh replaces.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_staged.lineage.datasets import DEFAULT_DATABASE, read_tables
from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    MaterializedTableDefinition,
    load_definition,
)
from airflow_provider_staged.materialized.naming import DEFINITION_GLOB
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier


class GraphError(ValueError):
    """An operation the graph refuses (a cycle, a DROP of a table others read); one line."""


@dataclass(frozen=True)
class Node:
    """One materialized table: where it is defined and every table its query reads."""

    identifier: TableIdentifier
    # More than one file: the table is defined twice, and the DAG factory builds neither.
    paths: tuple[Path, ...]
    # ``(catalog, db.table)`` of every table the query reads; catalog None: the session catalog.
    reads: tuple[tuple[str | None, str], ...]
    freshness: str = ""  # as the DDL writes it: ``INTERVAL '1' DAY`` or ``DOWNSTREAM``

    @classmethod
    def of(cls, definition: MaterializedTableDefinition) -> Node:
        reads = read_tables(definition.query, DEFAULT_DATABASE)
        return cls(definition.identifier, (Path(definition.source_path),), reads, definition.freshness_text)

    @property
    def inputs(self) -> tuple[str, ...]:
        """``db.table`` of the session catalog, ``cat.db.table`` of another."""
        return tuple(name if catalog is None else f"{catalog}.{name}" for catalog, name in self.reads)


def chain(tables: Iterable[TableIdentifier]) -> str:
    """``a.x -> b.y -> a.x``: tables in the order the data flows."""
    return " -> ".join(table.name for table in tables)


class TableGraph:
    """Materialized tables, what each reads, and which of them read which."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[TableIdentifier, Node] = {}
        for node in nodes:
            known = self.nodes.get(node.identifier)
            if known is not None:  # a table defined twice reads what either file reads
                node = Node(node.identifier, known.paths + node.paths,
                            tuple(dict.fromkeys(known.reads + node.reads)), known.freshness)
            self.nodes[node.identifier] = node
        self._upstream = {table: materialized_inputs(node, self.nodes) for table, node in self.nodes.items()}
        self._downstream: dict[TableIdentifier, list[TableIdentifier]] = {table: [] for table in self.nodes}
        for table in sorted(self.nodes, key=_key):
            for upstream in self._upstream[table]:
                self._downstream[upstream].append(table)

    @classmethod
    def from_definitions(cls, definitions: Iterable[MaterializedTableDefinition]) -> TableGraph:
        return cls(Node.of(definition) for definition in definitions)

    @classmethod
    def from_folder(cls, directory: Path) -> TableGraph:
        """The graph of every readable definition in ``directory`` (a broken file has no DAG: left out)."""
        definitions = []
        for path in sorted(directory.glob(DEFINITION_GLOB)):
            try:
                definitions.append(load_definition(path))
            except DefinitionError:
                continue
        return cls.from_definitions(definitions)

    def with_definition(self, definition: MaterializedTableDefinition) -> TableGraph:
        """The graph once ``definition`` replaces (or adds) its table's."""
        kept = (node for table, node in self.nodes.items() if table != definition.identifier)
        return TableGraph([*kept, Node.of(definition)])

    def tables(self) -> list[TableIdentifier]:
        return sorted(self.nodes, key=_key)

    def upstream(self, table: TableIdentifier) -> tuple[TableIdentifier, ...]:
        """The materialized tables ``table`` reads."""
        return self._upstream.get(table, ())

    def described_inputs(self, table: TableIdentifier) -> tuple[str, ...]:
        """What ``table`` reads, each said of what kind it is when that is not an ordinary table."""
        node = self.nodes.get(table)
        upstream = {t.name for t in self.upstream(table)}
        described = []
        for catalog, name in node.reads if node is not None else ():
            if catalog is not None:
                described.append(f"{catalog}.{name} (catalog {catalog}: not a dependency)")
            elif name in upstream:
                described.append(f"{name} (materialized)")
            elif name == table.name:
                described.append(f"{name} (itself: its previous version)")
            else:
                described.append(name)
        return tuple(described)

    def downstream(self, table: TableIdentifier) -> tuple[TableIdentifier, ...]:
        """The materialized tables that read ``table`` (its direct dependents)."""
        return tuple(self._downstream.get(table, ()))

    def edges(self) -> list[tuple[TableIdentifier, TableIdentifier]]:
        """``(upstream, downstream)`` pairs, sorted."""
        return [(up, down) for up in self.tables() for down in self._downstream[up]]

    def duplicates(self) -> dict[TableIdentifier, tuple[Path, ...]]:
        """Tables defined by several files."""
        return {table: node.paths for table, node in self.nodes.items() if len(node.paths) > 1}

    def dependents(self, table: TableIdentifier) -> list[TableIdentifier]:
        """Everything downstream of ``table`` (not itself), downstream-first: each table before
        every table it reads, so dropping or suspending in this order never leaves a table
        refreshing from one already gone."""
        order: list[TableIdentifier] = []
        seen = {table}
        # Depth-first, post-order, with a stack of iterators: a chain may be longer than Python's
        # recursion limit.
        stack = [(table, iter(self._downstream.get(table, ())))]
        while stack:
            current, pending = stack[-1]
            nxt = next((t for t in pending if t not in seen), None)
            if nxt is None:
                stack.pop()
                if current != table:
                    order.append(current)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(self._downstream[nxt])))
        return order

    def cycle_through(self, table: TableIdentifier) -> list[TableIdentifier] | None:
        """A shortest cycle from ``table`` back to it (``[t, ..., t]``, data-flow order), if any."""
        paths = {table: [table]}
        frontier = [table]
        while frontier:
            nxt = []
            for current in frontier:
                for down in self._downstream.get(current, ()):
                    if down == table:
                        return [*paths[current], table]
                    if down not in paths:
                        paths[down] = [*paths[current], down]
                        nxt.append(down)
            frontier = nxt
        return None

    def cycles(self) -> list[list[TableIdentifier]]:
        """Cycles among the tables (definitions put in the folder by hand can make one; CREATE
        refuses to), each from its first table; a table is on at most one of those listed."""
        found: list[list[TableIdentifier]] = []
        covered: set[TableIdentifier] = set()
        for table in sorted(self._on_or_between_cycles(), key=_key):
            if table in covered:
                continue
            cycle = self.cycle_through(table)
            if cycle is not None:
                found.append(cycle)
                covered.update(cycle)
        return found

    def _on_or_between_cycles(self) -> set[TableIdentifier]:
        """The tables left once every table no cycle leads to, then every table that leads to no
        cycle, is peeled off (Kahn's algorithm, both ways): linear, so a search for the cycles
        themselves starts only from the few tables that may be on one."""
        remaining = set(self.nodes)
        for into, out_of in ((self._upstream, self._downstream), (self._downstream, self._upstream)):
            degree = {table: sum(1 for other in into[table] if other in remaining) for table in remaining}
            ready = [table for table, count in degree.items() if count == 0]
            while ready:
                current = ready.pop()
                remaining.discard(current)
                for nxt in out_of[current]:
                    if nxt in remaining:
                        degree[nxt] -= 1
                        if degree[nxt] == 0:
                            ready.append(nxt)
        return remaining

    def refuse_cycle(self, definition: MaterializedTableDefinition) -> None:
        """Refuse ``definition`` when, with it, its table would (transitively) read itself."""
        cycle = self.with_definition(definition).cycle_through(definition.identifier)
        if cycle is not None:
            raise GraphError(f"{definition.identifier} refused: its query would close a cycle of "
                             f"materialized tables: {chain(cycle)}")

    def refuse_drop(self, table: TableIdentifier) -> None:
        """Refuse to drop ``table`` while materialized tables read it."""
        dependents = self.dependents(table)
        if dependents:
            raise GraphError(f"{table} not dropped: materialized tables read it: "
                             f"{', '.join(t.name for t in dependents)} (DROP MATERIALIZED TABLE {table} "
                             "CASCADE drops them first)")


def materialized_inputs(node: Node, tables: Collection[TableIdentifier]) -> tuple[TableIdentifier, ...]:
    """The tables of ``tables`` (materialized) that ``node``'s query reads: its dependencies."""
    found = []
    for catalog, name in node.reads:
        try:
            table = TableIdentifier.parse(name)
        except InvalidIdentifierError:  # a name no materialized table can have
            continue
        if catalog is None and table in tables and table != node.identifier:
            found.append(table)
    return tuple(sorted(found, key=_key))


def followed_inputs(
    definition: MaterializedTableDefinition, tables: Collection[TableIdentifier]
) -> tuple[TableIdentifier, ...]:
    """The materialized tables (of ``tables``) whose commits a ``FRESHNESS = DOWNSTREAM``
    definition refreshes after; a :class:`GraphError` naming what it reads when there is none
    (another catalog's table commits nothing this product sees)."""
    node = Node.of(definition)
    upstream = materialized_inputs(node, tables)
    if upstream:
        return upstream
    other = next((f"{catalog}.{name}" for catalog, name in node.reads if catalog is not None), None)
    why = (f"{other} is a table of catalog {other.split('.')[0]}, whose commits nothing here follows"
           if other else "it reads no materialized table of its definitions folder")
    raise GraphError(f"{definition.identifier}: FRESHNESS = DOWNSTREAM refreshes after the materialized "
                     f"tables it reads commit, but {why}: give it a FRESHNESS interval")


def unrefreshed(upstream: TableIdentifier, definition: MaterializedTableDefinition) -> str:
    """Why ``definition`` cannot be created yet: it reads ``upstream``, a materialized table that
    is not in the catalog yet, and what to do."""
    return (f"the query reads materialized table {upstream}, which has not been refreshed yet (its table "
            f"exists from its first refresh on): refresh it first (ALTER MATERIALIZED TABLE {upstream} "
            f"REFRESH [PARTITION (...)]), then create {definition.identifier}")


def _key(table: TableIdentifier) -> str:
    return table.name

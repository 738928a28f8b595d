"""The materialized tables' dependency graph (materialized/graph.py): no Airflow, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_staged.materialized.definition import MaterializedTableDefinition, parse_definition
from airflow_provider_staged.materialized.graph import GraphError, TableGraph, chain
from airflow_provider_staged.staging.identifiers import TableIdentifier


def definition(table: str, query: str) -> MaterializedTableDefinition:
    text = f"CREATE MATERIALIZED TABLE {table}\nFRESHNESS = INTERVAL '1' HOUR\nAS {query}\n"
    return parse_definition(text, f"{table}.sql")


def graph(**queries: str) -> TableGraph:
    """``a_x="SELECT ..."``: table ``a.x`` with that query."""
    return TableGraph.from_definitions(definition(name.replace("_", "."), q) for name, q in queries.items())


def t(name: str) -> TableIdentifier:
    return TableIdentifier.parse(name)


def names(tables: list[TableIdentifier] | tuple[TableIdentifier, ...]) -> list[str]:
    return [table.name for table in tables]


def test_a_chain_orders_downstream_first() -> None:
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM m.a", m_c="SELECT x FROM m.b WHERE x > 1")
    assert [(u.name, d.name) for u, d in g.edges()] == [("m.a", "m.b"), ("m.b", "m.c")]
    assert names(g.upstream(t("m.b"))) == ["m.a"]
    assert names(g.downstream(t("m.a"))) == ["m.b"]
    assert names(g.dependents(t("m.a"))) == ["m.c", "m.b"]
    assert g.nodes[t("m.a")].inputs == ("raw.src",)  # an ordinary table: an input, no edge
    assert g.cycles() == []


def test_a_diamond_lists_each_dependent_once_after_what_reads_it() -> None:
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM m.a", m_c="SELECT * FROM m.a",
              m_d="SELECT * FROM m.b JOIN m.c USING (k)")
    order = names(g.dependents(t("m.a")))
    assert sorted(order) == ["m.b", "m.c", "m.d"]
    assert order[0] == "m.d"  # before both of the tables it reads
    assert names(g.upstream(t("m.d"))) == ["m.b", "m.c"]


def test_inputs_are_read_in_database_default_and_ctes_are_not_tables() -> None:
    g = graph(default_a="SELECT 1 AS k", m_b="WITH a AS (SELECT * FROM m.x) SELECT * FROM a JOIN a2",
              m_c="SELECT * FROM a")
    assert g.nodes[t("m.b")].inputs == ("m.x", "default.a2")
    assert names(g.upstream(t("m.c"))) == ["default.a"]


def test_a_cycle_is_refused_at_create_and_named() -> None:
    g = graph(m_a="SELECT * FROM m.c", m_b="SELECT * FROM m.a")
    with pytest.raises(GraphError, match=r"^m\.c refused: .*cycle.*: m\.c -> m\.a -> m\.b -> m\.c$"):
        g.refuse_cycle(definition("m.c", "SELECT * FROM m.b"))
    g.refuse_cycle(definition("m.c", "SELECT * FROM raw.src"))  # no cycle: accepted


def test_a_changed_definition_replaces_the_old_one_in_the_check() -> None:
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM m.a")
    with pytest.raises(GraphError, match=r"m\.a -> m\.b -> m\.a"):
        g.refuse_cycle(definition("m.a", "SELECT * FROM m.b"))


def test_cycles_in_the_folder_are_found_and_named() -> None:
    g = graph(m_a="SELECT * FROM m.b", m_b="SELECT * FROM m.a", m_c="SELECT * FROM m.a")
    assert [chain(cycle) for cycle in g.cycles()] == ["m.a -> m.b -> m.a"]


def test_a_query_reading_its_own_table_is_no_cycle() -> None:
    g = graph(m_a="SELECT * FROM m.a UNION ALL SELECT * FROM raw.src")
    assert g.edges() == [] and g.cycles() == []
    assert g.nodes[t("m.a")].inputs == ("m.a", "raw.src")


def test_another_catalogs_table_is_an_input_never_a_dependency() -> None:
    # other.m.a is not the materialized m.a of the metastore; spark_catalog.m.a is.
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM other.m.a",
              m_c="SELECT * FROM spark_catalog.m.a")
    assert g.nodes[t("m.b")].inputs == ("other.m.a",)
    assert g.upstream(t("m.b")) == ()
    assert names(g.dependents(t("m.a"))) == ["m.c"]
    g.refuse_cycle(definition("m.a", "SELECT * FROM other.m.b"))  # not m.b: no cycle


def test_drop_with_dependents_is_refused_naming_them() -> None:
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM m.a", m_c="SELECT * FROM m.b")
    refused = r"^m\.a not dropped: materialized tables read it: m\.c, m\.b \(.*CASCADE"
    with pytest.raises(GraphError, match=refused):
        g.refuse_drop(t("m.a"))
    g.refuse_drop(t("m.c"))


def test_two_definitions_of_one_table_are_reported_and_read_what_either_reads(tmp_path: Path) -> None:
    (tmp_path / "one.sql").write_text("CREATE MATERIALIZED TABLE m.a AS SELECT * FROM m.b")
    (tmp_path / "two.sql").write_text("CREATE MATERIALIZED TABLE m.a AS SELECT * FROM m.c")
    (tmp_path / "b.sql").write_text("CREATE MATERIALIZED TABLE m.b AS SELECT * FROM raw.src")
    (tmp_path / "c.sql").write_text("CREATE MATERIALIZED TABLE m.c AS SELECT * FROM raw.src")
    (tmp_path / "broken.sql").write_text("CREATE MATERIALIZED TABLE m.d AS")
    g = TableGraph.from_folder(tmp_path)
    assert {k.name: [p.name for p in v] for k, v in g.duplicates().items()} == {"m.a": ["one.sql", "two.sql"]}
    assert names(g.upstream(t("m.a"))) == ["m.b", "m.c"]
    assert names(g.tables()) == ["m.a", "m.b", "m.c"]  # the broken file is left out


def test_a_long_chain_needs_no_recursion() -> None:
    g = TableGraph.from_definitions(
        definition(f"m.t{i}", f"SELECT * FROM m.t{i - 1}" if i else "SELECT 1 AS k") for i in range(1500))
    assert len(g.dependents(t("m.t0"))) == 1499
    assert g.dependents(t("m.t0"))[0] == t("m.t1499")
    assert g.cycles() == []


def test_two_cycles_joined_by_a_table_are_both_named() -> None:
    g = graph(m_a="SELECT * FROM m.b", m_b="SELECT * FROM m.a", m_c="SELECT * FROM m.b JOIN m.e",
              m_d="SELECT * FROM m.c", m_e="SELECT * FROM m.d", m_f="SELECT * FROM m.e")
    assert [chain(cycle) for cycle in g.cycles()] == ["m.a -> m.b -> m.a", "m.c -> m.d -> m.e -> m.c"]


def test_described_inputs_say_what_each_is() -> None:
    g = graph(m_a="SELECT * FROM raw.src", m_b="SELECT * FROM m.a JOIN other.m.a JOIN m.b JOIN dim USING (k)")
    assert g.described_inputs(t("m.b")) == (
        "m.a (materialized)", "other.m.a (catalog other: not a dependency)",
        "m.b (itself: its previous version)", "default.dim")
    assert g.described_inputs(t("m.zz")) == ()

"""One SQL client session: runs statements on a Spark session (in-process or Spark Connect).

What each statement becomes:

- ``SET`` / ``RESET``: session properties (:mod:`.properties`); Spark keys also go to Spark.
- materialized-table statements: the workflow scheduler through ``MaterializedTables``.
- CTAS / RTAS (:mod:`.ctas`): the staged tables' one journaled commit path (atomic), unless
  ``table.ctas.atomicity-enabled`` is false.
- statement sets (:mod:`.statement_set`): their INSERTs as one commit group, all or nothing.
- anything else: ``spark.sql`` as it is.

A failing statement raises :class:`StatementError` (one line, with its line and column).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot.tokens import TokenType

from airflow_provider_staged.engine.spark_job import query_frame
from airflow_provider_staged.materialized.definition import (
    CREATE,
    DefinitionError,
    MaterializedTableDefinition,
)
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.naming import dag_id_for
from airflow_provider_staged.materialized.output_schema import refresh_query
from airflow_provider_staged.materialized.query_change import Column, schema_columns
from airflow_provider_staged.sql import materialized_statements as mts
from airflow_provider_staged.sql.ctas import CtasError, CtasPlan, is_ctas, plan_ctas
from airflow_provider_staged.sql.output import ResultSet, plain_row
from airflow_provider_staged.sql.properties import (
    WORKFLOW_PREFIX,
    PropertyCommand,
    ResetProperty,
    SessionProperties,
    SetProperty,
    ShowProperties,
    is_client_key,
    parse_property_command,
)
from airflow_provider_staged.sql.splitting import SplitError, Statement, position, tokenize
from airflow_provider_staged.sql.statement_set import (
    StatementSet,
    StatementSetError,
    parse_statement_set,
    plan_insert,
)

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
    from airflow_provider_staged.sql.statement_set_run import InsertFailed
    from airflow_provider_staged.staging.identifiers import TableIdentifier
    from airflow_provider_staged.staging.settings import StagedSettings

# Where Spark's messages locate an error inside the statement ("line 1, pos 7", "line 1 pos 7").
_SPARK_POSITION = re.compile(r"\bline (\d+),? pos(?:ition)? (\d+)")
# A query (SELECT or WITH ... SELECT): what streaming mode runs as a stream.
_QUERY_STARTS = (TokenType.SELECT, TokenType.WITH)
TablesOpener = Callable[[Mapping[str, str]], AbstractContextManager["MaterializedTables"]]


class StatementError(Exception):
    """A statement failed; ``line``/``column`` are positions in the whole input (1-based)."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class SqlSession:
    """Executes statements; ``settings`` and ``open_tables`` are called only when needed."""

    def __init__(
        self,
        spark: Any,
        properties: SessionProperties,
        settings: Callable[[], StagedSettings],
        open_tables: TablesOpener,
        interactive: bool = False,
    ) -> None:
        self.spark = spark
        self.properties = properties
        self.interactive = interactive  # a streaming query runs until Ctrl-C, not until caught up
        self._settings_factory = settings
        self._settings: StagedSettings | None = None
        self._open_tables = open_tables
        for key, value in properties.spark_values().items():
            spark.conf.set(key, value)

    @property
    def settings(self) -> StagedSettings:
        if self._settings is None:
            self._settings = self._settings_factory()
        return self._settings

    def execute(self, statement: Statement) -> ResultSet:
        """Run one statement; any failure becomes a :class:`StatementError` at its position."""
        try:
            result = self._execute(statement)
        except StatementError:
            raise
        except Exception as err:
            raise _statement_error(statement, err) from err
        if result.changes is not None:
            return replace(result, changes=_located(statement, result.changes))
        return result

    def _execute(self, statement: Statement) -> ResultSet:
        tokens = tokenize(statement.text)
        statement_set = parse_statement_set(statement.text, tokens)
        if statement_set is not None:
            return self._statement_set(statement, statement_set)
        command = parse_property_command(statement.text, tokens)
        if command is not None:
            return self._property(command)
        materialized = mts.parse_materialized_statement(statement.text)
        if materialized is not None:
            mts.check_values(materialized)  # before Airflow or the catalog is reached
            return self._materialized(materialized)
        if len(tokens) > 2 and tokens[0].token_type == TokenType.DROP and tokens[1].text.upper() == "TABLE":
            self._refuse_drop_of_materialized(statement.text, tokens)
        if is_ctas(tokens) and self.properties.atomic:
            plan = plan_ctas(statement.text, tokens, self.spark.catalog.currentDatabase())
            return self._atomic_ctas(plan)
        if self.properties.streaming and tokens and tokens[0].token_type in _QUERY_STARTS:
            database = self.spark.catalog.currentDatabase()
            from airflow_provider_staged.lineage.datasets import source_tables

            if source_tables(statement.text, database):  # a query of no table is bounded: a batch
                from airflow_provider_staged.sql.streaming import stream_changes

                return stream_changes(self.spark, statement.text, database, self.properties,
                                      self.settings.metastore_uri, self.interactive)
        # A query goes to a gateway as its SQL relation, without spark.sql's own round trip.
        return self._collect(query_frame(self.spark, statement.text))

    def _collect(self, frame: Any) -> ResultSet:
        limit = self.properties.max_rows
        rows = frame.limit(limit + 1).collect()
        # The names come with the rows; asking the frame is one more round trip over Connect.
        columns = list(rows[0].__fields__) if rows else list(frame.columns)
        if not columns:
            return ResultSet.info("Execute statement succeeded.")
        return ResultSet(columns, [plain_row(row) for row in rows[:limit]], truncated=len(rows) > limit)

    # -- SET / RESET ----------------------------------------------------------------------

    def _property(self, command: PropertyCommand) -> ResultSet:
        if isinstance(command, ShowProperties):
            rows = self.properties.rows()
            if command.key is not None:
                value = self.properties.get(command.key)
                if value is None and not is_client_key(command.key):
                    value = self.spark.conf.get(command.key, None)
                return ResultSet(["key", "value"], [(command.key, value)])
            return ResultSet(["key", "value", "source"], [(r.key, r.value, r.source.value) for r in rows])
        if isinstance(command, SetProperty):
            key, value = self.properties.checked(command.key, command.value)
            if not is_client_key(key):
                self.spark.conf.set(key, value)  # Spark refuses first (e.g. a static key): nothing changes
            self.properties.put(key, value)
            return ResultSet.info(f"Session property has been set: {key} = {value}")
        assert isinstance(command, ResetProperty)
        keys = [command.key] if command.key is not None else self.properties.clear()
        if command.key is not None:
            self.properties.remove(command.key)
        for key in keys:
            self._sync_spark(key)
        return ResultSet.info(f"Session property has been reset: {command.key}" if command.key
                              else "All session properties have been reset.")

    def _sync_spark(self, key: str) -> None:
        """Spark gets the value that shows again after a RESET (or loses the key)."""
        if is_client_key(key):
            return
        value = self.properties.get(key)
        if value is None:
            self.spark.conf.unset(key)
        else:
            self.spark.conf.set(key, value)

    def _refuse_drop_of_materialized(self, text: str, tokens: list[Any]) -> None:
        """``DROP TABLE`` of a materialized table dropped its data and left its refresh workflow,
        whose next refresh wrote the table again. Flink refuses it
        (MaterializedTableStatementITCase.testDropMaterializedTableIn{Full,Continuous}Mode, with a
        misleading "Table with identifier ... does not exist."); here the error names the table and
        DROP MATERIALIZED TABLE. A materialized table is one whose parameters hold its status or
        definition, as ``MaterializedTables.check_name_free`` decides."""
        import sqlglot
        from sqlglot import exp

        from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
        from airflow_provider_staged.materialized.catalog_status import DEFINITION_KEY, REFRESH_STATUS_KEY
        from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier

        try:
            drop = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.SqlglotError:
            return  # Spark reports its own syntax error
        table = drop.find(exp.Table) if isinstance(drop, exp.Drop) else None
        if table is None or (table.catalog and table.catalog.lower() != "spark_catalog"):
            return
        try:
            identifier = TableIdentifier(table.db or self.spark.catalog.currentDatabase(), table.name)
        except InvalidIdentifierError:
            return
        with MetastoreClient(self.settings.metastore_uri) as client:
            found = client.get_table(identifier.database, identifier.table)
        parameters = (found.parameters or {}) if found is not None else {}
        if REFRESH_STATUS_KEY in parameters or DEFINITION_KEY in parameters:
            name = next(t for t in tokens[2:] if t.text.upper() not in ("IF", "EXISTS"))
            line, column = position(text, name.start)
            raise mts.MaterializedStatementError(line, column, (
                f"DROP TABLE: {identifier} is a materialized table: DROP MATERIALIZED TABLE {identifier} "
                "deletes its refresh workflow (its data stays, an ordinary table DROP TABLE then drops); "
                "DROP TABLE would leave the workflow refreshing it"))

    # -- atomic CTAS ----------------------------------------------------------------------

    def _atomic_ctas(self, plan: CtasPlan) -> ResultSet:
        from airflow_provider_staged.engine.execution import execute_staged
        from airflow_provider_staged.sql.session_engine import SessionEngine
        from airflow_provider_staged.staging.kinds.hive_partitions import staged_hive_table

        if plan.expectations:  # an unknown column at its EXPECT, before anything begins
            plan.check_columns([name for name, _ in self._query_columns(plan.query)])
        settings = self.settings
        staged = staged_hive_table(plan.target, plan.purpose, settings, None, plan.partition_by,
                                   plan.properties or None)
        staged.audits = plan.audit_suite()
        spec = {"partition_by": list(plan.partition_by), "options": plan.options}
        manifest = execute_staged(staged, SessionEngine(settings, self.spark), plan.query, spec,
                                  settings.attempt_ttl_seconds)
        if manifest is None:
            return ResultSet.info(f"Table {plan.target} exists: nothing done (IF NOT EXISTS).")
        # The commit changed the metastore behind Spark's back: drop its cached relation.
        self.spark.catalog.refreshTable(plan.target.quoted)
        columns = ["table", "version", "rows", "files", "atomic"]
        row: tuple[Any, ...] = (plan.target.name, staged.attempt_id, manifest.rows, len(manifest.files), True)
        if plan.expectations:
            from airflow_provider_staged.staging.audits import audit_summary

            record = staged.journal.get(staged.attempt_id)
            results = (record.audits or {}).get("results") if record is not None else None
            columns += ["dropped rows", "audits"]
            row += (manifest.dropped_rows, audit_summary(results))
        return ResultSet(columns, [row])

    # -- statement sets -------------------------------------------------------------------

    def _statement_set(self, statement: Statement, statement_set: StatementSet) -> ResultSet:
        """Every INSERT's result published or none (``statement_set_run``); errors at the INSERT."""
        from airflow_provider_staged.sql.statement_set_run import InsertFailed, run_statement_set

        database = self.spark.catalog.currentDatabase()
        inserts = []
        for member in statement_set.inserts:
            located = Statement(member.text, *_absolute(statement, member.line, member.column - 1))
            try:
                inserts.append((located, plan_insert(member.text, database)))
            except StatementSetError as err:
                raise _statement_error(located, err) from err
        try:
            rows, window = run_statement_set(self.spark, self.settings, inserts)
        except InsertFailed as failed:
            cause = failed.__cause__ if isinstance(failed.__cause__, Exception) else failed
            raise _insert_error(failed, cause) from cause
        # The window: how long a reader could see some targets new and others still old.
        window_ms = round(window * 1000, 1)
        return ResultSet(["table", "mode", "version", "rows", "files", "commit window ms"],
                         [(*row, window_ms) for row in rows])

    # -- materialized tables --------------------------------------------------------------

    def _materialized(self, statement: mts.MaterializedTableStatement) -> ResultSet:
        table = getattr(statement, "table", None)
        current = self.spark.catalog.currentDatabase()
        if table is not None and current != "default" and table.database == "default":
            explained = statement.create if isinstance(statement, mts.ExplainMaterializedTable) else statement
            raise _read_in_default(explained, table, current)
        if isinstance(statement, mts.ExplainMaterializedTable) and isinstance(
                statement.create, mts.CreateMaterializedTable):
            # the query's plan: no workflow is reached
            return self._explain(statement.create.definition, statement.mode, current)
        if isinstance(statement, mts.ShowMaterializedTables) and statement.database is None:
            # Flink's and Spark's SHOW ... TABLES without FROM: the current database's.
            statement = replace(statement, database=current)
        with self._open_tables(self.properties.client_values(WORKFLOW_PREFIX)) as tables:
            if isinstance(statement, mts.CreateMaterializedTable):
                return self._create(tables, statement, current)
            if isinstance(statement, mts.AlterMaterializedTableChange):
                return self._change(tables, statement, current)
            if isinstance(statement, mts.ExplainMaterializedTable):  # ALTER ... AS: the new query's plan
                assert isinstance(statement.create, mts.AlterMaterializedTableChange)
                definition = statement.create.apply(tables.definition(statement.table))
                with _located_in(statement.create, definition):
                    return self._explain(definition, statement.mode, current)
            return _MATERIALIZED[type(statement)](tables, statement)

    def _create(
        self, tables: MaterializedTables, statement: mts.CreateMaterializedTable, current: str
    ) -> ResultSet:
        """CREATE [OR ALTER], its query analysed in database ``default``, where the refreshes read
        the definition (its file has no USE); ``current`` is the session's database, restored after."""
        with self._in_default(current):
            return self._create_in_default(tables, statement)

    @contextmanager
    def _in_default(self, current: str) -> Iterator[None]:
        """Database ``default`` current (where a definition is read), then ``current`` again."""
        self.spark.catalog.setCurrentDatabase("default")
        try:
            yield
        finally:
            self.spark.catalog.setCurrentDatabase(current)

    def _create_in_default(
        self, tables: MaterializedTables, statement: mts.CreateMaterializedTable
    ) -> ResultSet:
        definition = statement.definition
        identifier = definition.identifier
        tables.check_graph(definition)  # a cycle is named before Spark finds a table of it missing
        self._refuse_unrefreshed_upstream(tables, definition)
        if statement.or_alter and tables.scheduler.definition_file(dag_id_for(identifier)) is not None:
            query = self._checked_query(definition)
            # The table's columns are the query's as the column list casts and orders them.
            handler = tables.alter(definition.text, self._table_columns, lambda _: self._query_columns(query))
            return ResultSet.info(f"Materialized table {identifier} altered: {handler.as_summary_string()} "
                                  "refreshes the new definition (the table keeps its data)")
        self._checked_query(definition)  # before the workflow, its definition file and status exist
        handler = tables.create(definition.text)
        return ResultSet.info(f"Materialized table {identifier} created: "
                              f"{handler.as_summary_string()} (ACTIVATED)")

    def _change(
        self, tables: MaterializedTables, statement: mts.AlterMaterializedTableChange, current: str
    ) -> ResultSet:
        """ALTER ... SET / RESET / AS: the changed definition (checked before Airflow is reached),
        executed as CREATE OR ALTER of it: the same checks of its query and columns, the same
        atomic rewrite of its file and re-scheduling. Errors point into this statement."""
        definition = statement.apply(tables.definition(statement.table))
        if statement.columns:
            with self._in_default(current):
                self._refuse_added_columns(statement, self._query_columns(self._checked_query(definition)))
        with _located_in(statement, definition):
            result = self._create(tables, mts.CreateMaterializedTable(definition, or_alter=True), current)
        if statement.freshness is not None and definition.refresh_mode is RefreshMode.CONTINUOUS:
            # A stream's trigger interval is fixed when it starts (continuous.trigger_interval).
            return ResultSet.info(f"{result.message}; a running stream keeps its pace until it restarts "
                                  f"(ALTER MATERIALIZED TABLE {statement.table} SUSPEND, then RESUME)")
        return result

    @staticmethod
    def _refuse_added_columns(statement: mts.AlterMaterializedTableChange, table: list[Column]) -> None:
        """Flink 2.x's rules for ``ADD`` of a physical column (SqlAlterMaterializedTableSchemaConverter):
        it must be one of the query's columns, and those are all the table's here (no computed or
        metadata columns), so it exists already; the messages say which, at the column."""
        names = {name.lower() for name, _ in table}
        for column in statement.columns:
            if column.lower() in names:
                message = f"Try to add a column `{column}` which already exists in the table."
            else:
                message = ("Invalid schema. All persisted (physical and metadata) columns in the schema part "
                           "need to be present in the query part. However, physical column "
                           f"`{column}` could not be found in the query. A new column comes from the query: "
                           f"ALTER MATERIALIZED TABLE {statement.table} AS <query with it at the end>")
            where = statement.positions[column]
            raise mts.MaterializedStatementError(*where, f"{statement.clause}: {message}")

    def _explain(self, definition: MaterializedTableDefinition, mode: str, current: str) -> ResultSet:
        """Spark's plan (EXPLAIN ``mode``) of the query the refreshes would run (the column list
        applied), analysed in ``default`` as CREATE does; the definition is checked against it as
        CREATE checks it."""
        with self._in_default(current):
            query = self._checked_query(definition)
            return self._collect(self.spark.sql(" ".join(filter(None, ("EXPLAIN", mode, query)))))

    def _table_columns(self, identifier: TableIdentifier) -> list[Column] | None:
        """The columns the catalog has for ``identifier`` (None: no such table yet)."""
        if not self.spark.catalog.tableExists(identifier.name):
            return None
        self.spark.catalog.refreshTable(identifier.quoted)  # a refresh in Airflow may have changed it
        return schema_columns(self.spark.table(identifier.quoted).schema.json())

    def _query_columns(self, query: str) -> list[Column]:
        """The output columns of ``query``: Spark analyses it, nothing runs."""
        return schema_columns(self.spark.sql(query).schema.json())

    def _checked_query(self, definition: MaterializedTableDefinition) -> str:
        """The query the refreshes run (the column list applied), once Spark's analysis of the
        definition's query fits the definition (Flink's checks, at the definition's positions)."""
        try:
            query = refresh_query(definition, self.spark)
        except DefinitionError as err:
            raise mts.MaterializedStatementError(err.line, err.column, err.message) from None
        except Exception as err:
            found = _spark_position(err)
            if found is None:
                raise
            # Spark counts from the query's start; the error points into the definition.
            raise mts.MaterializedStatementError(*_in_query(definition, *found), _first_line(err)) from err
        self._check_catalog_sources(definition)
        return query

    def _check_catalog_sources(self, definition: MaterializedTableDefinition) -> None:
        """Refuse a query that reads a temporary view of this session: the refreshes run in their
        own Spark session, where it does not exist, so CREATE succeeded and every refresh failed
        (Flink's docs list temporary tables and views in the query as unsupported). Spark resolves
        an unqualified name to a temporary view first; a name the lineage qualifies with a
        database of the catalog that holds no such table is one, and ``global_temp`` is Spark's
        database of application-wide temporary views."""
        from airflow_provider_staged.lineage.datasets import source_tables

        catalog = self.spark.catalog
        for name in source_tables(definition.query, "default"):
            database, table = name.split(".", 1)
            # A qualified name never resolves to a temporary view (and Spark 3.4 deprecates dbName).
            qualified = ".".join("`" + part.replace("`", "``") + "`" for part in (database, table))
            if database == "global_temp" or (
                    catalog.databaseExists(database) and not catalog.tableExists(qualified)):
                where = "global_temp." + table if database == "global_temp" else table
                line, column = _query_place(definition, where)
                raise mts.MaterializedStatementError(line, column, (
                    f"AS: the query reads {where}, a temporary view of this session: the refreshes run in "
                    "their own Spark session, where it does not exist; read a table or a view of the "
                    "catalog (CREATE VIEW) instead"))

    def _refuse_unrefreshed_upstream(
        self, tables: MaterializedTables, definition: MaterializedTableDefinition
    ) -> None:
        """A materialized table is in the catalog from its first refresh on: Spark's analysis of a
        query that reads one not refreshed yet said only that no such table exists. Said here,
        with what to do, at the name in the query."""
        from airflow_provider_staged.materialized.graph import unrefreshed

        missing = tables.unrefreshed_upstream(definition, lambda t: self.spark.catalog.tableExists(t.quoted))
        if missing:
            line, column = _query_place(definition, missing[0].name)
            raise mts.MaterializedStatementError(line, column, f"AS: {unrefreshed(missing[0], definition)}")


@contextmanager
def _located_in(statement: mts.AlterMaterializedTableChange, definition: MaterializedTableDefinition
                ) -> Iterator[None]:
    """Errors at places of ``definition`` (``statement`` applied) moved to the statement's."""
    try:
        yield
    except mts.MaterializedStatementError as err:
        where = statement.located(definition, err.line, err.column)
        raise mts.MaterializedStatementError(*where, err.message) from None


def _query_place(definition: MaterializedTableDefinition, name: str) -> tuple[int, int]:
    """Where the query reads ``name`` (after FROM or JOIN), else where the query starts."""
    written = r"\.".join(f"`?{re.escape(part)}`?" for part in name.split("."))
    pattern = rf"\b(?:FROM|JOIN)\s+({written})(?![\w.`])"
    found = re.search(pattern, definition.query, re.IGNORECASE)
    if found is None:
        return definition.position("AS", "query")
    before = definition.query[:found.start(1)]
    return _in_query(definition, before.count("\n") + 1, len(before) - before.rfind("\n") - 1)


def _read_in_default(
    statement: mts.MaterializedTableStatement, table: TableIdentifier, current: str
) -> mts.MaterializedStatementError:
    """The error for an unqualified materialized-table name after ``USE current``: the grammar
    reads it in ``default``, as a definition file is read, so after ``USE p`` DROP of ``t`` would
    act on ``default.t``, and CREATE would make ``default.name`` (past the check of ``p.name``)
    whose ``FROM src`` its refreshes read as ``default.src``. CREATE says it at its name."""
    if isinstance(statement, mts.CreateMaterializedTable):
        line, column = statement.definition.position(CREATE, "")
        return mts.MaterializedStatementError(line, column, (
            f"{table} not created: after USE {current}, a materialized table's definition is still read "
            f"in database default, as its file is; write {current}.{table.table} and qualify the "
            "query's tables, or USE default first"))
    return mts.MaterializedStatementError(1, 1, (
        f"{table}: after USE {current}, a materialized table's name is still read in database "
        f"default; write {current}.{table.table}, or USE default first"))


def _suspend(tables: MaterializedTables, statement: mts.SuspendMaterializedTable) -> ResultSet:
    done = tables.suspend(statement.table, cascade=statement.cascade)
    return ResultSet.info(f"Materialized table{_names(done)} suspended.")


def _resume(tables: MaterializedTables, statement: mts.ResumeMaterializedTable) -> ResultSet:
    from airflow_provider_staged.materialized.params import writer_options

    done = tables.resume(statement.table, writer_options(statement.options), cascade=statement.cascade)
    return ResultSet.info(f"Materialized table{_names(done)} resumed.")


def _names(tables: list[TableIdentifier]) -> str:
    """`` a.x`` or ``s a.x, b.y``: the tables an operation changed, after "Materialized table"."""
    return f"{'s' if len(tables) > 1 else ''} {', '.join(table.name for table in tables)}"


def _refresh(tables: MaterializedTables, statement: mts.RefreshMaterializedTable) -> ResultSet:
    from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger

    trigger = RefreshTrigger(is_periodic=False, schedule_time=None, dynamic_options={},
                             static_partitions=dict(statement.partition), execution_config={},
                             refresh_downstream=statement.cascade)
    run_id = tables.refresh(statement.table, trigger)
    row = (statement.table.name, dag_id_for(statement.table), run_id)
    return ResultSet(["table", "dag_id", "run_id"], [row])


def _drop(tables: MaterializedTables, statement: mts.DropMaterializedTable) -> ResultSet:
    if statement.if_exists and tables.scheduler.definition_file(dag_id_for(statement.table)) is None:
        # Flink refuses an ordinary table here (testDropMaterializedTableInContinuousMode). Here DROP
        # MATERIALIZED TABLE leaves the data as an ordinary table: a teardown script run again must
        # not fail on what its first run left, so the table is named and nothing is dropped.
        kind = tables.ordinary_kind(statement.table)
        if kind is not None:
            return ResultSet.info(f"No materialized table {statement.table} ({kind} {statement.table} of the "
                                  f"catalog is not one; DROP {kind.upper()} drops it): nothing dropped.")
        return ResultSet.info(f"No materialized table {statement.table}: nothing dropped.")
    done = tables.drop(statement.table, statement.cascade)
    whose = "their" if len(done) > 1 else "its"
    return ResultSet.info(f"Materialized table{_names(done)} dropped ({whose} data stays in the catalog).")


def _describe(tables: MaterializedTables, statement: mts.DescribeMaterializedTable) -> ResultSet:
    info = tables.describe(statement.table, runs=1)
    last = info.last_runs[0] if info.last_runs else None
    facts = [
        ("table", f"{info.identifier} ({'exists' if info.table_exists else 'not refreshed yet'})"),
        ("definition", str(info.definition_path)),
        ("freshness", info.freshness),
        ("lag", info.lag_text),
        ("schedule", info.schedule or "DAG not found in Airflow"),
        ("refresh status", info.status.status_text()),
        ("paused", str(info.paused)),
        ("refresh handler", info.handler_summary),
        ("last refresh", f"{last['run_id']}: {last['state']}" if last else "-"),
        ("partitions", ", ".join(info.partitions) or "-"),
        ("inputs", ", ".join(info.inputs) or "-"),
        ("dependents", ", ".join(table.name for table in info.dependents) or "-"),
        ("suspended inputs", "; ".join(info.suspended_inputs) or "-"),
        ("expectations", "; ".join(info.expectations) or "-"),
        ("query", info.definition),
    ]
    return ResultSet(["property", "value"], facts)


def _show(tables: MaterializedTables, statement: mts.ShowMaterializedTables) -> ResultSet:
    """Flink's ``SHOW MATERIALIZED TABLES [FROM db] [[NOT] LIKE 'pattern']``: names, sorted."""
    like = _like(statement.like) if statement.like is not None else None
    names = [
        (identifier.name, path.name) for identifier, path in tables.list()
        if (statement.database is None or identifier.database == statement.database.lower())
        and (like is None or bool(like.fullmatch(identifier.table)) != statement.not_like)
    ]
    return ResultSet(["materialized table", "definition"], names)


def _show_create(tables: MaterializedTables, statement: mts.ShowCreateMaterializedTable) -> ResultSet:
    """Flink's ``SHOW CREATE [OR ALTER] MATERIALIZED TABLE``: the DDL with the freshness and
    refresh mode the table runs with (defaults and derived mode included)."""
    from airflow_provider_staged.materialized.definition import render_definition

    definition = tables.definition(statement.table)
    text = render_definition(definition, definition.options, enriched=True)
    if statement.or_alter:
        text = text.replace("CREATE ", "CREATE OR ALTER ", 1)
    return ResultSet(["result"], [(text,)])


def _like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE (``%`` any run, ``_`` one character) as a case-insensitive regular expression."""
    parts = (".*" if char == "%" else "." if char == "_" else re.escape(char) for char in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


_MATERIALIZED: dict[type, Callable[[Any, Any], ResultSet]] = {
    mts.SuspendMaterializedTable: _suspend,
    mts.ResumeMaterializedTable: _resume,
    mts.RefreshMaterializedTable: _refresh,
    mts.DropMaterializedTable: _drop,
    mts.DescribeMaterializedTable: _describe,
    mts.ShowMaterializedTables: _show,
    mts.ShowCreateMaterializedTable: _show_create,
}


def _absolute(statement: Statement, line: int, offset: int) -> tuple[int, int]:
    """The input's line and column of 0-based ``offset`` on 1-based ``line`` of ``statement``."""
    return _shifted((statement.line, statement.column), line, offset)


def _in_query(definition: MaterializedTableDefinition, line: int, offset: int) -> tuple[int, int]:
    """The definition's line and column of 0-based ``offset`` on 1-based ``line`` of its query."""
    return _shifted(definition.position("AS", "query"), line, offset)


def _shifted(start: tuple[int, int], line: int, offset: int) -> tuple[int, int]:
    """Line and column of 0-based ``offset`` on 1-based ``line`` of a text that starts at ``start``."""
    if line <= 1:
        return start[0], start[1] + offset
    return start[0] + line - 1, offset + 1


def _statement_error(statement: Statement, err: Exception) -> StatementError:
    """``err`` as one line at the best position in the input."""
    if isinstance(err, (SplitError, mts.MaterializedStatementError, CtasError, StatementSetError)):
        line, column = _absolute(statement, err.line, err.column - 1)
        return StatementError(getattr(err, "message", str(err)), line, column)
    found = _spark_position(err)
    line, column = _absolute(statement, *found) if found else (statement.line, statement.column)
    return StatementError(_first_line(err), line, column)


def _insert_error(failed: InsertFailed, err: Exception) -> StatementError:
    """An INSERT's error where Spark locates it in the INSERT's query (``cast_query`` holds it
    from its line 2 on; line 1 is the cast: the query's start), else at the INSERT."""
    found = _spark_position(err)
    if found is None or failed.query_offset is None:
        return _statement_error(failed.member, err)
    line, column = position(failed.member.text, failed.query_offset)
    query = Statement("", *_absolute(failed.member, line, column - 1))
    at = _absolute(query, found[0] - 1, found[1]) if found[0] > 1 else (query.line, query.column)
    return StatementError(_first_line(err), *at)


def _spark_position(err: Exception) -> tuple[int, int] | None:
    """Spark's 1-based line and 0-based position in an error of the metastore, Spark or Airflow:
    Spark puts it after its hints ("SQLSTATE: 42P01; line 2 pos 7"), before any plan or JVM
    stack trace."""
    found = _SPARK_POSITION.search(str(err).split("JVM stacktrace", 1)[0])
    return (int(found.group(1)), int(found.group(2))) if found else None


def _located(statement: Statement, changes: Iterator[ResultSet]) -> Iterator[ResultSet]:
    """A streaming query's changes; a failure while it runs is a :class:`StatementError` too."""
    try:
        yield from changes
    except StatementError:
        raise
    except Exception as err:
        raise _statement_error(statement, err) from err


def _first_line(err: BaseException) -> str:
    for line in str(err).splitlines():
        if line.strip():
            return line.strip()
    return type(err).__name__

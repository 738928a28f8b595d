"""``staged sql``: the SQL client (FLIP-24) in embedded or gateway mode.

Thin over ``sql.session``: it builds the Spark session of the mode, runs ``-i``, ``-e``, ``-f``
or the interactive prompt, and prints results (``sql.output``). Errors are one line on stderr.
"""

from __future__ import annotations

import enum
import gc
import logging
import os
import pydoc
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from airflow_provider_staged.cli import context as cli_context
from airflow_provider_staged.cli.output import one_line
from airflow_provider_staged.discovery.embedded import (
    GatewayInfo,
    gateway_status,
    metastore_status,
    require_gateway,
    staged_home,
)
from airflow_provider_staged.sql.output import (
    RENDERERS,
    ResultSet,
    changelog_head,
    changelog_lines,
    render_tableau,
)
from airflow_provider_staged.sql.properties import (
    RESULT_MODE,
    SessionProperties,
    Source,
)
from airflow_provider_staged.sql.splitting import SplitError, Statement, is_complete, split_statements

if TYPE_CHECKING:
    from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
    from airflow_provider_staged.sql.session import SqlSession
    from airflow_provider_staged.staging.settings import StagedSettings

PROMPT_NAME = "staged"
HISTORY_FILE = "sql_history"
GATEWAY_ENV = "STAGED_GATEWAY_URL"
_EXIT_WORDS = {"quit", "exit", "quit;", "exit;"}
# Statements after which the completion's table names are read again.
_DDL_WORDS = ("CREATE", "DROP", "ALTER", "REPLACE", "USE")

HELP = """Run SQL on Spark + the Hive Metastore: interactively, or from -e / -f.

CREATE TABLE t AS SELECT (also IF NOT EXISTS, REPLACE TABLE, CREATE OR REPLACE TABLE; with \
USING parquet, PARTITIONED BY, COMMENT, OPTIONS, TBLPROPERTIES) builds the table atomically \
through the staged tables. Materialized-table statements (CREATE [OR ALTER] MATERIALIZED TABLE, \
ALTER MATERIALIZED TABLE t SUSPEND | RESUME | REFRESH [PARTITION (k = 'v')], DROP, DESCRIBE, \
SHOW MATERIALIZED TABLES) drive their refresh DAGs in Airflow; CREATE OR ALTER of an existing \
table keeps its data and may only append columns; EXPLAIN CREATE MATERIALIZED TABLE shows the \
plan of its query. Everything else is Spark SQL.

\b
Examples:
  staged sql                                  # interactive; end a statement with ;
  staged sql -e "SHOW TABLES; SELECT 1 AS x"
  staged sql -f build.sql -i session.sql      # stops at the first error: file:line:column
  staged sql -e "SELECT * FROM db.t" --output csv > t.csv
  staged sql --gateway sc://127.0.0.1:15002/ -e "SELECT 1"
  staged sql --conf spark.sql.shuffle.partitions=8 --conf table.ctas.atomicity-enabled=false

\b
Session properties (defaults < --conf < -i file < SET):
  SET;                                        list every property with its value and source
  SET 'sql-client.execution.result-mode' = 'tableau';   tableau | table | changelog
  SET 'sql-client.execution.max-table-result.rows' = '100';
  SET 'table.ctas.atomicity-enabled' = 'false';         Spark's plain CTAS path
  SET 'execution.runtime-mode' = 'streaming';           queries over tables run as streams and print
                                                        a changelog (-e/-f: the data there now;
                                                        interactive: live until Ctrl-C)
  SET 'spark.sql.shuffle.partitions' = '8';             any other key is Spark conf
  RESET 'spark.sql.shuffle.partitions';  RESET;
"""


class Mode(str, enum.Enum):
    embedded = "embedded"
    gateway = "gateway"


class ScriptOutput(str, enum.Enum):
    tableau = "tableau"
    csv = "csv"
    json = "json"


class Printer:
    """Prints results as the result mode (or ``--output``) says; messages never pollute csv/json."""

    def __init__(self, properties: SessionProperties, output: ScriptOutput | None, interactive: bool) -> None:
        self.properties = properties
        self.output = output
        self.interactive = interactive

    def __call__(self, result: ResultSet) -> None:
        if result.changes is not None:
            self._changes(result.changes)
            return
        if self.output in (ScriptOutput.csv, ScriptOutput.json):
            text = RENDERERS[self.output.value](result)
            if text:
                typer.echo(text)
            elif result.message:
                typer.echo(result.message, err=True)
            return
        mode = "tableau" if self.output is ScriptOutput.tableau else self.properties.result_mode
        if mode in ("tableau", "table"):  # the box folds to fit a terminal
            text = render_tableau(result, _terminal_width())
        else:
            text = RENDERERS[mode](result)
        if mode == "table" and self.interactive and text.count("\n") + 2 > shutil.get_terminal_size().lines:
            pydoc.pager(text)  # a scrollable view ($PAGER, else less)
        else:
            typer.echo(text)

    def _changes(self, changes: Iterator[ResultSet]) -> None:
        """A streaming query prints its changelog whatever the result mode or ``--output`` (an
        unbounded result has no final table): the header once it runs, each micro-batch's changes
        as it arrives, then how it ended (on stderr with csv/json)."""
        for batch in changes:
            if not batch.columns:
                typer.echo(batch.message, err=self.output in (ScriptOutput.csv, ScriptOutput.json))
            elif batch.kinds is None:
                typer.echo(changelog_head(batch.columns))
            elif batch.rows:
                typer.echo("\n".join(changelog_lines(batch)))


def _terminal_width() -> int | None:
    """The terminal's columns when stdout is one; piped, no limit: a script gets whole lines."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def report(message: str, where: str) -> None:
    typer.echo(f"error: {where}{one_line(message)}", err=True)


def run_text(
    session: SqlSession, text: str, source: str, printer: Callable[[ResultSet], None], keep_going: bool
) -> int:
    """Run every statement of ``text``; return how many failed (stop at the first unless ``keep_going``).

    The whole text is split first: a splitting error runs nothing.
    """
    try:
        statements = split_statements(text)
    except SplitError as err:
        report(str(err).split(": ", 1)[1], f"{source}:{err.line}:{err.column}: ")
        return 1
    failures = 0
    for statement in statements:
        if not run_statement(session, statement, source, printer):
            failures += 1
            if not keep_going:
                break
    return failures


def run_statement(
    session: SqlSession, statement: Statement, source: str, printer: Callable[[ResultSet], None]
) -> bool:
    from airflow_provider_staged.sql.session import StatementError

    try:
        printer(session.execute(statement))  # a streaming query runs while its changes print
    except StatementError as err:
        report(err.message, f"{source}:{err.line}:{err.column}: ")
        return False
    return True


def _quiet(result: ResultSet) -> None:
    for _ in result.changes or ():  # a streaming query runs to its end, unprinted
        pass


def run_init(session: SqlSession, text: str, source: str) -> int:
    """Run an init file quietly; its SETs land in the init-file layer (below the session's)."""
    session.properties.layer = Source.INIT
    try:
        return run_text(session, text, source, _quiet, keep_going=False)
    finally:
        session.properties.layer = Source.SESSION


# -- the mode's Spark session and settings ---------------------------------------------------


def resolve_settings(conn: str | None, start_local: bool) -> StagedSettings:
    """The staged catalog: ``--conn`` (an Airflow connection), ``STAGED_METASTORE_URI``, or the
    local metastore under $STAGED_HOME (started when ``start_local`` and none runs)."""
    if conn:
        return cli_context.connection_settings(conn)
    uri = os.environ.get(cli_context.ENV["metastore_uri"])
    if uri:
        return catalog_settings(uri, None)
    info = metastore_status()
    if info is None:
        if not start_local:
            raise ValueError(f"no metastore configured: pass --conn, set STAGED_METASTORE_URI, or run "
                             f"`staged services up` (none runs under {staged_home()})")
        from airflow_provider_staged.local.metastore import start_metastore

        typer.echo(f"starting the local metastore under {staged_home()} (`staged services down` stops it)",
                   err=True)
        info = start_metastore()
    return catalog_settings(info.uri, info.warehouse)


def catalog_settings(metastore_uri: str, warehouse: str | None) -> StagedSettings:
    """Settings of the metastore at ``thrift://host:port`` (journal under $STAGED_HOME)."""
    from airflow_provider_staged.catalogs.metastore.client import parse_metastore_uri
    from airflow_provider_staged.staging.settings import StagedSettings

    host, port = parse_metastore_uri(metastore_uri)  # a bad port is an error naming the URI, not no port
    host = f"[{host}]" if ":" in host else host  # an IPv6 address keeps its brackets in the URI
    extras = {"warehouse": warehouse} if warehouse else {}
    return StagedSettings.from_fields(host, port, extras, staged_home())


def quiet_spark_errors() -> None:
    """pyspark logs each failed query as a JSON line on stderr; the client reports it in one line."""
    try:
        from pyspark.logger import PySparkLogger
    except ModuleNotFoundError:  # pyspark 3.5 logs no query context
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def embedded_spark(settings: StagedSettings, master: str, spark_conf: Mapping[str, str]) -> Any:
    from airflow_provider_staged.engine.session import build_session, jvm_log

    jvm_log.setLevel(logging.CRITICAL)  # Spark's log lines are not the client's output
    spark = build_session(settings.metastore_uri, settings.warehouse, master, "staged-sql",
                          {**settings.spark_conf, **spark_conf})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def loading_modules() -> Iterator[None]:
    """The cyclic collector pauses while a large library loads and skips what it built afterwards.

    Importing pyspark's Connect client builds ~10^5 objects that live until the process ends
    (modules, classes, functions of pandas, numpy, pyarrow, grpc); the collector would walk them
    in its passes during the import (~0.1 s of CPU, measured) and in every full pass after it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def gateway_spark(url: str) -> Any:
    if not url.startswith("sc://"):
        raise ValueError(f"invalid gateway URL {url!r}: expected sc://host:port/[;token=...]")
    # Connect's own builder: pyspark's generic one would switch this whole process to Connect mode.
    with loading_modules():
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession.builder.remote(url).getOrCreate()


@contextmanager
def open_tables(options: Mapping[str, str]) -> Iterator[MaterializedTables]:
    """``MaterializedTables`` configured as ``staged mt`` is: environment, `staged up`'s Airflow,
    and the session's ``workflow-scheduler.*`` properties (FLIP-448 keys) on top."""
    given = {name: os.environ.get(variable) for name, variable in cli_context.ENV.items()}
    folder = given.pop("definitions_dir")
    setup = cli_context.scheduler_setup(options, definitions_dir=Path(folder) if folder else None, **given)
    with cli_context.open_tables(setup) as tables:
        yield tables


def make_session(
    spark: Any, properties: SessionProperties, settings: Callable[[], StagedSettings],
    interactive: bool = False,
) -> SqlSession:
    from airflow_provider_staged.sql.session import SqlSession

    return SqlSession(spark, properties, settings, open_tables, interactive)


def default_mode(url: str | None, conn: str | None, metastore_uri: str | None,
                 local_gateway: GatewayInfo | None) -> Mode:
    """``--mode`` when not given: ``gateway`` for a ``--gateway`` URL, and for the local catalog
    when the local stack's gateway runs on it (warm: no JVM starts here); else ``embedded``.

    ``--conn`` names another catalog; ``STAGED_METASTORE_URI`` too, unless it is the gateway's.
    """
    if url:
        return Mode.gateway
    if local_gateway is None or conn:
        return Mode.embedded
    return Mode.gateway if metastore_uri in (None, local_gateway.metastore_uri) else Mode.embedded


def prompt_text(database: str) -> str:
    """The interactive prompt: the current database, as Flink's ``Flink SQL>`` names the client."""
    return f"{PROMPT_NAME}:{database}> "


def current_database(spark: Any, known: str) -> str:
    """The session's current database; ``known`` when Spark cannot say (the prompt never fails)."""
    try:
        return str(spark.catalog.currentDatabase())
    except Exception:
        return known


def _gateway_settings(url: str | None, conn: str | None) -> Callable[[], StagedSettings]:
    """The catalog of gateway mode: the local gateway's own metastore, else as in embedded mode."""
    if url is None and conn is None:
        return _local_gateway_settings
    return lambda: resolve_settings(conn, start_local=False)


def _local_gateway_settings() -> StagedSettings:
    gateway = require_gateway()  # one read of its state: both values from the same gateway
    return catalog_settings(gateway.metastore_uri, gateway.warehouse)


# -- interactive ---------------------------------------------------------------------------------


def _keywords() -> list[str]:
    from sqlglot.dialects.spark import Spark

    words = {word for word in Spark.Tokenizer.KEYWORDS if word.isalpha()}
    words |= {"MATERIALIZED", "FRESHNESS", "REFRESH_MODE", "SUSPEND", "RESUME", "REFRESH", "SHOW", "TABLES"}
    return sorted(words)


def _catalog_names(spark: Any) -> list[str]:
    """Databases, and tables of the current database (bare and qualified), for completion."""
    try:
        database = spark.catalog.currentDatabase()
        tables = [row[1] for row in spark.sql("SHOW TABLES").collect()]
        databases = [row[0] for row in spark.sql("SHOW DATABASES").collect()]
    except Exception:  # completion is a convenience: never let it break the prompt
        return []
    return sorted({*databases, *tables, *(f"{database}.{table}" for table in tables)})


def interactive(session: SqlSession, printer: Printer, where: str) -> None:
    """Multi-line input ending at ``;``, persistent history, completion of keywords and tables;
    the prompt shows the current database. ``where``: the engine, for the greeting."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import WordCompleter
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    keywords = _keywords()
    words = list(keywords)

    def load_names() -> None:
        # Read while the user types: the catalog's names cost round trips the first prompt must
        # not wait for (completion offers keywords until they are in).
        words[:] = [*keywords, *_catalog_names(session.spark)]

    loader = threading.Thread(target=load_names, name="staged-sql-completion", daemon=True)
    loader.start()
    database = current_database(session.spark, "default")
    bindings = KeyBindings()

    @bindings.add("enter")
    def _enter(event: Any) -> None:
        buffer = event.current_buffer
        text = buffer.text.strip()
        if not text or text.lower() in _EXIT_WORDS or is_complete(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    home = staged_home()
    home.mkdir(parents=True, exist_ok=True)
    prompt = PromptSession(
        history=FileHistory(str(home / HISTORY_FILE)),
        completer=WordCompleter(lambda: words, ignore_case=True, WORD=True),
        multiline=True,
        key_bindings=bindings,
        prompt_continuation=lambda width, line_number, soft_wrap: "-> ".rjust(width),
    )
    typer.echo(f"staged SQL client {where}: end statements with ;  (help: `staged sql --help`, quit: exit; "
               "or Ctrl-D)")
    while True:
        try:
            text = prompt.prompt(prompt_text(database))
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        if text.strip().lower() in _EXIT_WORDS:
            break
        try:
            run_text(session, text, "input", printer, keep_going=False)
        except KeyboardInterrupt:  # Ctrl-C while a statement runs: stop it, keep the session
            session.spark.interruptAll()
            typer.echo("error: cancelled (Ctrl-C); a staged build in progress was aborted", err=True)
        database = current_database(session.spark, database)  # USE, or a script's USE, moves it
        if text.lstrip().upper().startswith(_DDL_WORDS):
            loader.join()
            words[:] = [*keywords, *_catalog_names(session.spark)]
    loader.join(timeout=5)  # not a query in flight while the session stops


# -- the command ------------------------------------------------------------------------------


def sql(
    execute: Annotated[str | None, typer.Option(
        "--execute", "-e", metavar="STATEMENTS", help="run these statements and exit")] = None,
    file: Annotated[Path | None, typer.Option(
        "--file", "-f", exists=True, dir_okay=False, help="run a script and exit (stops at the first error)")
    ] = None,
    init: Annotated[Path | None, typer.Option(
        "--init", "-i", exists=True, dir_okay=False, help="statements (e.g. SET) run first, quietly")] = None,
    continue_on_error: Annotated[bool, typer.Option(
        help="with -e/-f: run the remaining statements after a failure (exit code still 1)")] = False,
    mode: Annotated[Mode | None, typer.Option(
        help="embedded: Spark in this process; gateway: a Spark Connect server (--gateway, else the "
             "one `staged up` or `staged gateway start` runs) [default: gateway when --gateway is given or "
             "the local gateway runs on the catalog, else embedded]")] = None,
    gateway: Annotated[str | None, typer.Option(
        envvar=GATEWAY_ENV, metavar="sc://HOST:PORT/", help="Spark Connect URL (gateway mode)")] = None,
    conf: Annotated[list[str] | None, typer.Option(
        "--conf", metavar="KEY=VALUE", help="a session property's default (repeatable)")] = None,
    conn: Annotated[str | None, typer.Option(
        help="staged_hive connection id [default: the local metastore, or STAGED_METASTORE_URI]")] = None,
    master: Annotated[str, typer.Option(help="Spark master of embedded mode")] = "local[*]",
    output: Annotated[ScriptOutput | None, typer.Option(
        "--output", "-o", help="tableau, or csv / json: results only on stdout (for scripts)")] = None,
) -> None:
    if execute is not None and file is not None:
        raise typer.BadParameter("give -e or -f, not both")
    interactive_mode = execute is None and file is None
    defaults = {RESULT_MODE: "table"} if interactive_mode else {}
    properties = SessionProperties(defaults)
    if conf:
        for key, value in cli_context.parse_pairs(conf, "--conf").items():
            properties.put(*properties.checked(key, value), layer=Source.CONFIG)
    local_gateway = None if gateway or conn else gateway_status()
    metastore_uri = os.environ.get(cli_context.ENV["metastore_uri"])
    mode = mode or default_mode(gateway, conn, metastore_uri, local_gateway)
    quiet_spark_errors()
    if mode is Mode.gateway:
        settings_factory = _gateway_settings(gateway, conn)
        url = gateway or (local_gateway or require_gateway()).url
        where = f"on the gateway {url.split(';', 1)[0].rstrip('/')} (--mode embedded: Spark in this process)"
        spark = gateway_spark(url)
        session = make_session(spark, properties, settings_factory, interactive_mode)
    else:
        where = "with Spark in this process (embedded)"
        settings = resolve_settings(conn, start_local=True)
        spark = embedded_spark(settings, master, properties.spark_values())
        session = make_session(spark, properties, lambda: settings, interactive_mode)
    printer = Printer(properties, output, interactive_mode)
    try:
        if init is not None and run_init(session, init.read_text(encoding="utf-8"), str(init)):
            raise typer.Exit(1)
        if interactive_mode:
            interactive(session, printer, where)
            return
        text = execute if execute is not None else file.read_text(encoding="utf-8")  # type: ignore[union-attr]
        source = str(file) if file is not None else "-e"
        if run_text(session, text, source, printer, continue_on_error):
            raise typer.Exit(1)
    finally:
        if mode is Mode.gateway:
            # Release the server's session now: a Connect client still open at exit cleans up
            # through the server, retrying for minutes when the gateway has gone meanwhile.
            spark.stop()


# ``staged sql``, registered by ``staged`` (cli.py) when it is run or listed: a single command.
app = typer.Typer(add_completion=False)
app.command("sql", help=HELP)(sql)

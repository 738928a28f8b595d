"""DagBag parse time of the materialized-table factory against dag-factory and a plain loop.

For each size (default 1,000 and 10,000 tables), the same DAGs (five refresh Params, one
``refresh`` PythonOperator with the table as an Asset outlet, tags, doc_md,
``max_active_runs=1``, no catchup; a cron schedule, or for every fifth table, 20% in chains, a
schedule on the commits of the table before it) are built four ways, each parsed with a real
``DagBag``:

* ``ours``: ``dags/materialized_tables.py`` over one ``CREATE MATERIALIZED TABLE`` file per table
  (a chained one is ``FRESHNESS = DOWNSTREAM``: Airflow 3.3's ``PartitionedAssetTimetable``);
* ``ours, N shards``: the N files ``staged mt shards N`` writes, over the same definitions; the
  per-file figure is the slowest shard's;
* ``dag-factory``: dag-factory 1.1.0 ``load_yaml_dags`` over one YAML file per table;
* ``plain loop``: a hand-written loop over a list of tables read from a JSON file beside it,
  straight ``airflow.sdk`` (the floor; dag-factory and the loop schedule chained tables on a
  plain asset list). Not an inline list: Airflow stores a DAG file's source once per DAG it
  holds, and 10,000 DAGs of a 5 MB file ran the DAG processor out of 24 GB of memory.

Imports are warmed first, so the times are the parse itself. Then one DAG is built under a
parsing context (what a worker does) at the largest size. Last, for each variant at the largest
size, a real ``airflow dag-processor`` with ``min_file_process_interval`` = ``--interval``: its CPU
(the processor and the parse processes it reaped) idle for ``--steady-seconds``, then over one
re-parse of every file (brought forward by touching the files); its steady share of a core is
that cycle plus the idle rate over one interval. Run: ``python benchmarks/bench_dag_parse.py``
(``--sizes 100,500 --repeat 1 --steady-seconds 0`` for a quick run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
CONTEXT_ENV = "_AIRFLOW_PARSING_CONTEXT_DAG_ID"
# (freshness, cron): a mix of daily, hourly and 15-minute tables.
FRESHNESS = [("INTERVAL '1' DAY", "0 0 * * *"), ("INTERVAL '1' HOUR", "0 * * * *"),
             ("INTERVAL '15' MINUTE", "*/15 * * * *")]

DEFINITION = """\
-- table {i} of the benchmark
CREATE MATERIALIZED TABLE bench.t{i:05d}
COMMENT 'benchmark table {i}'
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'owner' = 'bench', 'tags' = 'bench')
FRESHNESS = {freshness}
REFRESH_MODE = FULL
AS SELECT ds, region, count(*) AS orders, sum(amount) AS revenue
FROM raw.orders_{i} WHERE amount > 0 GROUP BY ds, region;
"""
CHAINED = """\
-- table {i} of the benchmark: refreshed after table {up} commits
CREATE MATERIALIZED TABLE bench.t{i:05d}
COMMENT 'benchmark table {i}'
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'owner' = 'bench', 'tags' = 'bench')
FRESHNESS = DOWNSTREAM
AS SELECT ds, sum(orders) AS orders, sum(revenue) AS revenue FROM bench.t{up:05d} GROUP BY ds;
"""
SHARDS = 16

DAG_FACTORY_FILE = """\
# airflow DAG file: dag-factory over one YAML file per table
from dagfactory import load_yaml_dags

load_yaml_dags(globals_dict=globals(), dags_folder={folder!r})
"""

PLAIN_LOOP_FILE = """\
# airflow DAG file: the floor, a hand-written loop straight on airflow.sdk
import json
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset, CronTriggerTimetable, Param

TABLES, SCHEMAS = json.loads((Path(__file__).parent / "tables.json").read_text())


def refresh(**context):
    pass


for table, cron, upstream, comment, doc in TABLES:
    dag_id = "mt__bench__" + table
    dag = DAG(
        dag_id,
        schedule=([Asset(uri="hive://staged_default/bench/" + upstream)] if upstream
                  else CronTriggerTimetable(cron, timezone="UTC")),
        catchup=False,
        max_active_runs=1,
        params={
            name: Param(s["default"], description=s["description"],
                        **{k: v for k, v in s.items() if k not in ("default", "description")})
            for name, s in SCHEMAS.items()
        },
        tags=["materialized-table", "bench"],
        description=comment,
        doc_md=doc,
        default_args={"owner": "bench"},
    )
    PythonOperator(
        task_id="refresh",
        python_callable=refresh,
        outlets=[Asset(name="bench." + table, uri="hive://staged_default/bench/" + table)],
        dag=dag,
    )
    globals()[dag_id] = dag
"""


def setup_airflow_home() -> Path:
    """Airflow reads its config on import: give it a throw-away home first."""
    home = Path(tempfile.mkdtemp(prefix="bench-airflow-home-"))
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "ERROR"  # keep the table readable
    os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = "0"  # dag-factory needs > 30 s at 500
    os.environ.pop(CONTEXT_ENV, None)
    # The factory names the tables' assets after the connection's metastore (never contacted).
    os.environ["AIRFLOW_CONN_STAGED_DEFAULT"] = json.dumps(
        {"conn_type": "staged_hive", "host": "metastore.example", "port": 9083}
    )
    return home


def generate(root: Path, n: int) -> dict[str, Path]:
    """Write the four variants for ``n`` tables; returns variant -> DAG folder."""
    from airflow_provider_staged.materialized.definition import parse_definition
    from airflow_provider_staged.materialized.params import param_schemas
    from airflow_provider_staged.materialized.workflow.shards import install_shard_files

    ours, sharded, yamls, loop = root / "ours", root / "sharded", root / "dag_factory", root / "loop"
    (ours / "materialized").mkdir(parents=True)
    (yamls / "yaml").mkdir(parents=True)
    loop.mkdir()
    sharded.mkdir()
    shutil.copy(REPO / "dags" / "materialized_tables.py", ours / "materialized_tables.py")
    (yamls / "yaml_dags.py").write_text(DAG_FACTORY_FILE.format(folder=str(yamls / "yaml")))
    tables = []
    schemas = None
    for i in range(n):
        freshness, cron = FRESHNESS[i % len(FRESHNESS)]
        upstream = f"t{i - 1:05d}" if i % 5 == 4 else None
        text = (CHAINED.format(i=i, up=i - 1) if upstream else DEFINITION.format(i=i, freshness=freshness))
        (ours / "materialized" / f"t{i:05d}.sql").write_text(text)
        definition = parse_definition(text)
        schemas = param_schemas(definition)
        doc = f"# Materialized table `bench.t{i:05d}`\n\n```sql\n{text}```\n"
        tables.append((f"t{i:05d}", cron, upstream, f"benchmark table {i}", doc))
        (yamls / "yaml" / f"t{i:05d}.yml").write_text(
            _yaml_dag(f"mt__bench__t{i:05d}", cron, upstream, f"benchmark table {i}", doc, schemas, i)
        )
    (loop / "plain_loop.py").write_text(PLAIN_LOOP_FILE)
    (loop / "tables.json").write_text(json.dumps([tables, schemas]))
    # The shards read the same definitions, as on a deployment (STAGED_MT_DEFINITIONS_DIR).
    (sharded / "materialized").symlink_to(ours / "materialized")
    install_shard_files(sharded, SHARDS)
    return {"ours": ours, f"ours, {SHARDS} shards": sharded, "dag-factory": yamls, "plain loop": loop}


def _yaml_dag(dag_id: str, cron: str, upstream: str | None, comment: str, doc: str, schemas: dict,
              i: int) -> str:
    # JSON is YAML: it keeps quoting of the schema patterns exact.
    params = {
        name: {"__type__": "airflow.sdk.Param", **schema} for name, schema in schemas.items()
    }
    config = {
        dag_id: {
            "schedule": ([{"__type__": "airflow.sdk.Asset", "uri": f"hive://staged_default/bench/{upstream}"}]
                         if upstream else cron),
            "catchup": False,
            "max_active_runs": 1,
            "description": comment,
            "doc_md": doc,
            "tags": ["materialized-table", "bench"],
            "default_args": {"owner": "bench"},
            "params": params,
            "tasks": {
                "refresh": {
                    "operator": "airflow.providers.standard.operators.python.PythonOperator",
                    "python_callable": "benchmarks_refresh_stub.refresh",
                    "outlets": [{
                        "__type__": "airflow.sdk.Asset",
                        "name": f"bench.t{i:05d}",
                        "uri": f"hive://staged_default/bench/t{i:05d}",
                    }],
                }
            },
        }
    }
    return json.dumps(config, indent=1)


def parse_seconds(folder: Path, expected: int) -> tuple[float, float]:
    """(wall, CPU) seconds of a DagBag of each DAG file in ``folder``, as the DAG processor and
    workers parse it (not walking the definitions), the slowest file's; CPU time is steadier on a
    shared box. The files together must build ``expected`` DAGs."""
    from airflow.dag_processing.dagbag import DagBag

    slowest, built = (0.0, 0.0), 0
    for dag_file in sorted(folder.glob("*.py")):
        wall, cpu = time.perf_counter(), time.process_time()
        dagbag = DagBag(dag_folder=str(dag_file), bundle_path=folder)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if dagbag.import_errors or any(d.startswith("mt__broken__") for d in dagbag.dags):
            raise SystemExit(f"{dag_file}: errors {dagbag.import_errors}, DAGs {list(dagbag.dags)[:5]}")
        built += dagbag.size()
        slowest = max(slowest, (wall, cpu))
    if built != expected:
        raise SystemExit(f"{folder}: {built} DAGs, not {expected}")
    return slowest


def run(sizes: list[int], repeat: int, steady_seconds: float, interval: int,
        steady_variants: list[str] | None = None) -> str:
    sharded = f"ours, {SHARDS} shards"
    lines = [
        f"| tables | ours | {sharded} (slowest file) | dag-factory | plain loop | dag-factory / ours "
        f"| ours / plain loop | slowest shard / plain loop |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sys.path.append(str(REPO))  # for tests.fixtures, as _common does
    from tests.fixtures.dag_factory import use_dag_factory

    use_dag_factory()
    work = Path(tempfile.mkdtemp(prefix="bench-dag-parse-"))
    try:
        stub = work / "stub"
        stub.mkdir()
        (stub / "benchmarks_refresh_stub.py").write_text("def refresh(**context):\n    pass\n")
        sys.path.insert(0, str(stub))
        warm = generate(work / "warm", 3)
        for folder in warm.values():  # imports (Airflow, dag-factory, ours) out of the timings
            parse_seconds(folder, 3)
        folders = {}
        for n in sizes:
            folders[n] = generate(work / str(n), n)
            samples: dict[str, list[tuple[float, float]]] = {v: [] for v in folders[n]}
            for _ in range(repeat):  # interleaved, so load changes hit every variant alike
                for variant, folder in folders[n].items():
                    samples[variant].append(parse_seconds(folder, n))
            for kind, index in (("wall", 0), ("CPU", 1)):
                best = {v: min(sample[index] for sample in s) for v, s in samples.items()}
                ours, shard, factory, loop = (best[v] for v in ("ours", sharded, "dag-factory", "plain loop"))
                lines.append(
                    f"| {n} ({kind} s) | {ours:.2f} | {shard:.2f} | {factory:.2f} | {loop:.2f} "
                    f"| {factory / ours:.2f}x | {ours / loop:.2f}x | {shard / loop:.2f}x |"
                )
                print(lines[-1], flush=True)
        largest = max(sizes)
        lines += ["", *parsing_context_lines(folders[largest]["ours"], largest, repeat)]
        lines += ["", query_check_line(folders[largest]["ours"], largest)]
        if steady_seconds > 0:
            lines += ["", f"DAG processor at {largest} tables, min_file_process_interval {interval} s, "
                      "nothing changed (target <= 10% of one core):"]
            for variant, folder in folders[largest].items():
                if steady_variants and variant not in steady_variants:
                    continue
                found = steady_state_line(folder, largest, interval, steady_seconds, stub)
                lines.append(f"- {variant}: {found}")
                print(lines[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(lines)


def steady_state_line(dags: Path, n: int, interval: int, idle_seconds: float, stub: Path) -> str:
    """CPU of a real ``airflow dag-processor`` over the DAG files in ``dags`` once every DAG is
    stored: idle for ``idle_seconds`` (no file due), then one re-parse of every file, brought
    forward by touching the files (a file whose mtime changed is parsed as one whose interval is
    up). The share of one core over an ``interval`` is (cycle + idle rate * interval) / interval."""
    from tests.fixtures.dag_factory import DAG_FACTORY_DIR

    home = dags.parent / f"processor-home-{dags.name}"
    home.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
           "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(interval),
           "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "600",
           "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
           # dag-factory's DAG file imports it and its YAML names the stub's callable.
           "PYTHONPATH": os.pathsep.join([str(stub), str(DAG_FACTORY_DIR), os.environ.get("PYTHONPATH", "")])}
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    dag_files = sorted(dags.glob("*.py"))
    with open(home / "dag-processor.log", "wb") as log:
        processor = subprocess.Popen([*airflow, "dag-processor"], env=env, stdout=log, stderr=log)
    try:
        start = time.monotonic()
        _wait(lambda: _stored_dags(home) >= n, processor, home, "store every DAG")
        first = time.monotonic() - start
        process = psutil.Process(processor.pid)
        before, wall = _tree_cpu(process), time.monotonic()
        time.sleep(idle_seconds)
        idle = (_tree_cpu(process) - before) / (time.monotonic() - wall)
        touched = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
        before, wall = _tree_cpu(process), time.monotonic()
        for path in dag_files:
            path.touch()
        _wait(lambda: _files_parsed_since(home, touched) >= _files_with_dags(home), processor, home,
              "re-parse every file")
        cycle, cycle_wall = _tree_cpu(process) - before, time.monotonic() - wall
    finally:
        processor.terminate()
        try:
            processor.wait(60)
        except subprocess.TimeoutExpired:  # busy in a parse it does not interrupt on SIGTERM
            processor.kill()
            processor.wait(60)
    steady = (cycle + idle * interval) / interval
    return (f"{100 * steady:.1f}% of one core: idle {100 * idle:.2f}% (over {idle_seconds:.0f} s), one "
            f"re-parse of its {len(dag_files)} file(s) {cycle:.0f} s CPU ({cycle_wall:.0f} s wall); "
            f"storing all {n} DAGs first took {first:.0f} s")


def _files_with_dags(home: Path) -> int:
    try:
        with sqlite3.connect(home / "airflow.db", timeout=30) as db:
            return db.execute("SELECT count(DISTINCT fileloc) FROM dag WHERE NOT is_stale").fetchone()[0]
    except sqlite3.Error:
        return 1 << 30  # unknown yet: not done


def _wait(done: Callable[[], bool], processor: subprocess.Popen, home: Path, what: str) -> None:
    start = time.monotonic()
    while not done():
        if processor.poll() is not None or time.monotonic() - start > 1800:
            raise SystemExit(f"dag-processor did not {what}: see {home}/dag-processor.log")
        time.sleep(2)


def _files_parsed_since(home: Path, moment: str) -> int:
    """DAG files whose DAGs were all parsed after ``moment`` (Airflow's UTC text in SQLite)."""
    try:
        with sqlite3.connect(home / "airflow.db", timeout=30) as db:
            return db.execute("SELECT count(*) FROM (SELECT fileloc FROM dag WHERE NOT is_stale "
                              "GROUP BY fileloc HAVING min(last_parsed_time) > ?)", (moment,)).fetchone()[0]
    except sqlite3.Error:  # locked by a write: ask again
        return 0


def _stored_dags(home: Path) -> int:
    try:
        with sqlite3.connect(home / "airflow.db", timeout=30) as db:
            return db.execute("SELECT count(*) FROM dag WHERE NOT is_stale").fetchone()[0]
    except sqlite3.Error:  # not migrated or locked by a write: ask again
        return 0


def _tree_cpu(process: psutil.Process) -> float:
    """CPU seconds of the processor, of the parse processes it reaped, and of those running."""
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # ended meanwhile: its parent reaped it, counted above next time
            continue
        total += child_times.user + child_times.system
    return total


def parsing_context_lines(ours: Path, n: int, repeat: int) -> list[str]:
    """One DAG under a parsing context: named like its file, and not (a scan of identifiers)."""
    from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

    definitions = ours / "materialized"
    wanted = f"mt__bench__t{n // 2:05d}"
    os.environ[CONTEXT_ENV] = wanted
    try:
        samples = []
        for _ in range(max(repeat, 5)):
            start = time.perf_counter()
            dags = build_dags(definitions, {})
            samples.append(time.perf_counter() - start)
        assert list(dags) == [wanted], dags
        dagbag = min(parse_seconds(ours, 1)[0] for _ in range(max(repeat, 5)))
        # Files not named after their tables: the factory reads every file's table name.
        for path in definitions.glob("*.sql"):
            path.rename(path.with_name("x" + path.name))
        scan = min(parse_seconds(ours, 1)[0] for _ in range(max(repeat, 5)))
    finally:
        os.environ.pop(CONTEXT_ENV, None)
    return [
        f"Parsing context ({CONTEXT_ENV}={wanted}, {n} definitions), target <= 50 ms:",
        f"- build_dags: {min(samples) * 1000:.1f} ms (median "
        f"{statistics.median(samples) * 1000:.1f} ms)",
        f"- DagBag of the factory file: {dagbag * 1000:.1f} ms",
        f"- DagBag when no file is named after its table (reads all {n} table names): "
        f"{scan * 1000:.1f} ms",
    ]


def query_check_line(ours: Path, n: int) -> str:
    """What ``check_queries=True`` would add: sqlglot on every query, next to our own parser."""
    from airflow_provider_staged.materialized.definition import check_query, load_definition

    paths = sorted((ours / "materialized").glob("*.sql"))
    start = time.perf_counter()
    definitions = [load_definition(path) for path in paths]
    parse = time.perf_counter() - start
    start = time.perf_counter()
    for definition in definitions:
        check_query(definition)
    check = time.perf_counter() - start
    assert len(definitions) == n
    return (
        f"Reading and parsing {n} definition files: {parse * 1000:.0f} ms; checking their "
        f"queries with sqlglot (check_queries=True, off by default) would add "
        f"{check * 1000:.0f} ms (including importing sqlglot)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--steady-seconds", type=float, default=120,
                        help="idle window of the dag-processor's CPU (0: skip the dag-processor)")
    parser.add_argument("--interval", type=int, default=3600, help="min_file_process_interval, s")
    parser.add_argument("--steady-variants", default="",
                        help="comma-separated variants the DAG processor runs over (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N parses per cell")
    args = parser.parse_args()
    home = setup_airflow_home()
    try:
        sizes = [int(size) for size in args.sizes.split(",")]
        print(f"DagBag parse, best of {args.repeat} interleaved runs, {os.cpu_count()} CPUs, "
              "imports warm; wall and process CPU seconds")
        variants = [v.strip() for v in args.steady_variants.split(",") if v.strip()]
        table = run(sizes, args.repeat, args.steady_seconds, args.interval, variants)
        print(table)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

"""DagBag parse time of the materialized-table factory against dag-factory and a plain loop.

For 100, 500 and 1000 tables, the same DAGs (cron schedule, five refresh Params, one
``refresh`` PythonOperator with the table as an Asset outlet, tags, doc_md,
``max_active_runs=1``, no catchup) are built three ways, each by one DAG file parsed with a
real ``DagBag``:

* ``ours``: ``dags/materialized_tables.py`` over one ``CREATE MATERIALIZED TABLE`` file per table;
* ``dag-factory``: dag-factory 1.1.0 ``load_yaml_dags`` over one YAML file per table;
* ``plain loop``: a hand-written loop over an inline list, straight ``airflow.sdk`` (the floor).

Imports are warmed first, so the times are the parse itself. Then one DAG is built under a
parsing context (what a worker does) at the largest size. Run: ``python benchmarks/bench_dag_parse.py``
(``--sizes 100,500 --repeat 1`` for a quick run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTEXT_ENV = "_AIRFLOW_PARSING_CONTEXT_DAG_ID"
# (freshness, cron): a mix of daily, hourly and 15-minute tables.
FRESHNESS = [("INTERVAL '1' DAY", "0 0 * * *"), ("INTERVAL '1' HOUR", "0 * * * *"),
             ("INTERVAL '15' MINUTE", "*/15 * * * *")]

DEFINITION = """\
-- table {i} of the benchmark
CREATE MATERIALIZED TABLE bench.t{i:04d}
COMMENT 'benchmark table {i}'
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'owner' = 'bench', 'tags' = 'bench')
FRESHNESS = {freshness}
REFRESH_MODE = FULL
AS SELECT ds, region, count(*) AS orders, sum(amount) AS revenue
FROM raw.orders_{i} WHERE amount > 0 GROUP BY ds, region;
"""

DAG_FACTORY_FILE = """\
# airflow DAG file: dag-factory over one YAML file per table
from dagfactory import load_yaml_dags

load_yaml_dags(globals_dict=globals(), dags_folder={folder!r})
"""

PLAIN_LOOP_FILE = """\
# airflow DAG file: the floor, a hand-written loop straight on airflow.sdk
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset, CronTriggerTimetable, Param

TABLES = {tables!r}
SCHEMAS = {schemas!r}


def refresh(**context):
    pass


for table, cron, comment, doc in TABLES:
    dag_id = "mt__bench__" + table
    dag = DAG(
        dag_id,
        schedule=CronTriggerTimetable(cron, timezone="UTC"),
        catchup=False,
        max_active_runs=1,
        params={{
            name: Param(s["default"], description=s["description"],
                        **{{k: v for k, v in s.items() if k not in ("default", "description")}})
            for name, s in SCHEMAS.items()
        }},
        tags=["materialized-table", "bench"],
        description=comment,
        doc_md=doc,
        default_args={{"owner": "bench"}},
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
    """Write the three variants for ``n`` tables; returns variant -> DAG folder."""
    from airflow_provider_staged.materialized.definition import parse_definition
    from airflow_provider_staged.materialized.params import param_schemas

    ours, yamls, loop = root / "ours", root / "dag_factory", root / "loop"
    (ours / "materialized").mkdir(parents=True)
    (yamls / "yaml").mkdir(parents=True)
    loop.mkdir()
    shutil.copy(REPO / "dags" / "materialized_tables.py", ours / "materialized_tables.py")
    (yamls / "yaml_dags.py").write_text(DAG_FACTORY_FILE.format(folder=str(yamls / "yaml")))
    tables = []
    schemas = None
    for i in range(n):
        freshness, cron = FRESHNESS[i % len(FRESHNESS)]
        text = DEFINITION.format(i=i, freshness=freshness)
        (ours / "materialized" / f"t{i:04d}.sql").write_text(text)
        definition = parse_definition(text)
        schemas = param_schemas(definition)
        doc = f"# Materialized table `bench.t{i:04d}`\n\n```sql\n{text}```\n"
        tables.append((f"t{i:04d}", cron, f"benchmark table {i}", doc))
        (yamls / "yaml" / f"t{i:04d}.yml").write_text(
            _yaml_dag(f"mt__bench__t{i:04d}", cron, f"benchmark table {i}", doc, schemas, i)
        )
    (loop / "plain_loop.py").write_text(PLAIN_LOOP_FILE.format(tables=tables, schemas=schemas))
    return {"ours": ours, "dag-factory": yamls, "plain loop": loop}


def _yaml_dag(dag_id: str, cron: str, comment: str, doc: str, schemas: dict, i: int) -> str:
    # JSON is YAML: it keeps quoting of the schema patterns exact.
    params = {
        name: {"__type__": "airflow.sdk.Param", **schema} for name, schema in schemas.items()
    }
    config = {
        dag_id: {
            "schedule": cron,
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
                        "name": f"bench.t{i:04d}",
                        "uri": f"hive://staged_default/bench/t{i:04d}",
                    }],
                }
            },
        }
    }
    return json.dumps(config, indent=1)


def parse_seconds(folder: Path, expected: int) -> tuple[float, float]:
    """(wall, CPU) seconds of a DagBag of the one DAG file in ``folder``, as the DAG processor
    and workers parse it (not walking the definitions); CPU time is steadier on a shared box."""
    from airflow.dag_processing.dagbag import DagBag

    (dag_file,) = folder.glob("*.py")
    wall, cpu = time.perf_counter(), time.process_time()
    dagbag = DagBag(dag_folder=str(dag_file), bundle_path=folder)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if dagbag.import_errors or dagbag.size() != expected:
        raise SystemExit(f"{folder}: {dagbag.size()} DAGs, errors {dagbag.import_errors}")
    return wall, cpu


def run(sizes: list[int], repeat: int) -> str:
    lines = [
        "| tables | ours | dag-factory | plain loop | dag-factory / ours | ours / plain loop |",
        "|---:|---:|---:|---:|---:|---:|",
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
                ours, factory, loop = best["ours"], best["dag-factory"], best["plain loop"]
                lines.append(
                    f"| {n} ({kind} s) | {ours:.2f} | {factory:.2f} | {loop:.2f} "
                    f"| {factory / ours:.2f}x | {ours / loop:.2f}x |"
                )
                print(lines[-1], flush=True)
        lines += ["", *parsing_context_lines(folders[max(sizes)]["ours"], max(sizes), repeat)]
        lines += ["", query_check_line(folders[max(sizes)]["ours"], max(sizes))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(lines)


def parsing_context_lines(ours: Path, n: int, repeat: int) -> list[str]:
    """One DAG under a parsing context: named like its file, and not (a scan of identifiers)."""
    from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

    definitions = ours / "materialized"
    wanted = f"mt__bench__t{n // 2:04d}"
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
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--repeat", type=int, default=3, help="best of N parses per cell")
    args = parser.parse_args()
    home = setup_airflow_home()
    try:
        sizes = [int(size) for size in args.sizes.split(",")]
        print(f"DagBag parse, best of {args.repeat} interleaved runs, {os.cpu_count()} CPUs, "
              "imports warm; wall and process CPU seconds")
        table = run(sizes, args.repeat)
        print(table)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

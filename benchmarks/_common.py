"""Helpers shared by the benchmarks: timing, alternating arms, paired-ratio statistics, services.

Imported as ``_common`` (the scripts run as ``python benchmarks/<script>.py``, which puts this
directory on ``sys.path``). Importing it also puts the repository root there, so the test
fixtures (``tests.fixtures``) are importable from a benchmark.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))


# -- timing -----------------------------------------------------------------------------


def load() -> str:
    """The machine's 1/5/15-minute load averages (the 2 cores may be shared with other runs)."""
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


@contextmanager
def timed(into: list[float]) -> Iterator[None]:
    """Append the block's wall seconds to ``into`` (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        into.append(time.perf_counter() - start)


def stopwatch(run: Callable[[], object]) -> float:
    """Wall seconds of one call of ``run``."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def timed_method(obj: Any, name: str, into: list[float]) -> None:
    """Wrap ``obj.name`` so every call's duration lands in ``into`` (instrumentation only)."""
    method: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with timed(into):
            return method(*args, **kwargs)

    setattr(obj, name, wrapper)


def percentile_ms(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (seconds) in milliseconds, linearly interpolated."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return (ordered[low] + (ordered[high] - ordered[low]) * (position - low)) * 1000


class ThriftCalls:
    """Wall time of each Hive Metastore Thrift call made while ``recording`` (instrumentation).

    Wraps the ``hmsclient.HMSClient`` methods once, for the whole process; outside a recording
    the wrappers only test a flag. Shows which calls a commit spends its time in.
    """

    NAMES = (
        "open",
        "getStatus",  # the liveness check of a reused connection (metastore.client)
        "lock",
        "check_lock",
        "unlock",
        "get_database",
        "get_table_req",
        "get_partitions",
        "create_table_with_environment_context",
        "alter_table_with_environment_context",
        "add_partitions",
        "alter_partitions",
        "alter_partitions_with_environment_context",
        "get_partitions_ps",
        "drop_partition",
        "close",
    )

    def __init__(self) -> None:
        import hmsclient

        self.times: dict[str, list[float]] = {name: [] for name in self.NAMES}
        self.recordings = 0
        self._recording = False
        for name in self.NAMES:
            setattr(hmsclient.HMSClient, name, self._wrap(name, getattr(hmsclient.HMSClient, name)))

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(client: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._recording:
                return original(client, *args, **kwargs)
            with timed(self.times[name]):
                return original(client, *args, **kwargs)

        return wrapper

    def record_calls_of(self, obj: Any, method: str) -> None:
        """Record the Thrift calls made inside every call of ``obj.method``."""
        inner: Callable[..., Any] = getattr(obj, method)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._recording = True
            self.recordings += 1
            try:
                return inner(*args, **kwargs)
            finally:
                self._recording = False

        setattr(obj, method, wrapper)

    def clear(self) -> None:
        for values in self.times.values():
            values.clear()
        self.recordings = 0

    def describe(self) -> str:
        """Per recorded call: calls per recording and p50 ms of one call."""
        parts = [
            f"{name.replace('_with_environment_context', '')} {len(values) / max(1, self.recordings):.0f}x "
            f"{percentile_ms(values, 0.5):.1f}"
            for name, values in self.times.items()
            if values
        ]
        return " / ".join(parts)


# -- alternating arms ---------------------------------------------------------------------


def arm_order(names: Sequence[str], rep: int) -> list[str]:
    """The order of ``names`` in repetition ``rep``: rotations, then rotations of the reverse.

    Every arm goes first equally often, and every pair runs in both orders equally often, in
    each block of ``2 * len(names)`` reps (ABBA for two arms, all 6 orders for three), so
    neither a warmer machine nor a slow drift favours one arm.
    """
    count = len(names)
    base = list(names) if (rep // count) % 2 == 0 else list(reversed(names))
    shift = rep % count
    return base[shift:] + base[:shift]


Arms = Mapping[str, Callable[[], float]]


def alternating_rounds(
    arms: Arms,
    reps: int,
    warmups: int = 1,
    on_rep: Callable[[int, list[str], dict[str, float]], None] | None = None,
    after_warmup: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Run every arm once per rep in ``arm_order``, after ``warmups`` uncounted rounds.

    Each arm returns the seconds of its own timed region (set-up and clean-up stay outside).
    """
    names = list(arms)
    for warmup in range(warmups):  # JIT, metastore caches, first files of each kind
        for name in arm_order(names, warmup):
            arms[name]()
    if after_warmup is not None:
        after_warmup()
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        order = arm_order(names, rep)
        this_rep = {name: arms[name]() for name in order}
        for name, seconds in this_rep.items():
            times[name].append(seconds)
        if on_rep is not None:
            on_rep(rep, order, this_rep)
    return times


# -- paired-ratio statistics --------------------------------------------------------------


@dataclass(frozen=True)
class PairedRatios:
    """Ratios ``numerator[i] / denominator[i]`` of runs made back to back in the same rep.

    A per-rep ratio cancels load drift that hits both runs of a rep; the spread of these
    ratios, not of the raw times, says whether a target like <= 1.05 is resolved.
    """

    ratios: tuple[float, ...]
    ratio_of_medians: float
    ci_low: float  # bootstrap 90% interval of the median paired ratio
    ci_high: float

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ratios)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.ratios) < 2:
            return self.ratios[0], self.ratios[0]
        q1, _, q3 = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return q1, q3

    def verdict(self, target: float) -> str:
        """Whether the 90% interval of the median lies below, above or across ``target``."""
        if self.ci_high <= target:
            return f"met (90% interval <= {target})"
        if self.ci_low > target:
            return f"NOT met (90% interval > {target})"
        return f"unresolved (90% interval contains {target})"

    def describe(self) -> str:
        q1, q3 = self.quartiles
        return (
            f"paired median {self.median:.3f}  mean {self.mean:.3f}  IQR {q1:.3f}-{q3:.3f}  "
            f"min-max {min(self.ratios):.3f}-{max(self.ratios):.3f}  "
            f"90% CI of median {self.ci_low:.3f}-{self.ci_high:.3f}  "
            f"ratio of medians {self.ratio_of_medians:.3f}"
        )


def paired_ratios(
    numerator: Sequence[float], denominator: Sequence[float], resamples: int = 4000, seed: int = 0
) -> PairedRatios:
    """Paired ratios with a percentile-bootstrap 90% interval of their median (seeded: repeatable)."""
    ratios = tuple(mine / theirs for mine, theirs in zip(numerator, denominator, strict=True))
    low, high = median_interval(ratios, resamples, seed)
    return PairedRatios(
        ratios=ratios,
        ratio_of_medians=statistics.median(numerator) / statistics.median(denominator),
        ci_low=low,
        ci_high=high,
    )


def median_interval(values: Sequence[float], resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap 90% interval of the median of ``values`` (seeded: repeatable)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.05 * (resamples - 1))], medians[int(0.95 * (resamples - 1))]


def runs_text(values: Sequence[float], digits: int = 2) -> str:
    return " ".join(f"{value:.{digits}f}" for value in values)


def latency_line(label: str, values: Sequence[float], target: float | None = None) -> str:
    """``label: p50 (90% interval of the median) runs …``, with the verdict against ``target``
    seconds when given (met: the interval lies wholly at or below it)."""
    low, high = median_interval(values)
    line = (f"  {label}: p50 {statistics.median(values):.2f}s (90% interval {low:.2f}-{high:.2f})  "
            f"runs {runs_text(values)}")
    if target is not None:
        verdict = "met" if high <= target else "NOT met" if low > target else "unresolved"
        line += f"  target <= {target:g} s: {verdict}"
    return line


# -- services -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HiveServices:
    spark: Any
    metastore_uri: str
    warehouse: Path
    home: Path  # temp directory: journal, control writes; removed on exit
    # Where the database's tables are: ``warehouse`` as a URI, or ``s3a://<bucket>/warehouse``.
    location: str = ""


@contextmanager
def hive_services(
    app_name: str, database: str, conf: Mapping[str, str] | None = None, s3: bool = False
) -> Iterator[HiveServices]:
    """A throwaway metastore (Derby, temp home) and one ``local[2]`` SparkSession; both stopped.
    ``s3``: the database lives on a local S3 server (S3Proxy over a temp directory), whose
    endpoint and keys the metastore, Spark and the storage layer get from the environment."""
    from airflow_provider_staged.engine.session import build_session
    from airflow_provider_staged.local.metastore import start_metastore, stop_metastore
    from airflow_provider_staged.local.s3_server import start_s3_server, stop_s3_server

    home = Path(tempfile.mkdtemp(prefix=f"{app_name}-"))
    started = time.perf_counter()
    spark = server = None
    try:
        if s3:
            server = start_s3_server(home / "s3", in_memory=False, heap="1g")
            os.environ.update(server.options.environment())
        metastore = start_metastore(home)
        location = f"file:{metastore.warehouse}"
        if server is not None:
            location = f"s3a://{server.create_bucket('bench')}/warehouse"
        settings = {"spark.ui.showConsoleProgress": "false", **(conf or {})}
        spark = build_session(metastore.uri, metastore.warehouse, "local[2]", app_name, settings)
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql(f"CREATE DATABASE {database} LOCATION '{location}/{database}.db'")
        print(f"services up in {time.perf_counter() - started:.0f}s; load average {load()}", flush=True)
        yield HiveServices(spark, metastore.uri, Path(metastore.warehouse), home, location)
    finally:
        if spark is not None:
            spark.stop()
        stop_metastore(home)
        if server is not None:
            stop_s3_server(server)
        shutil.rmtree(home, ignore_errors=True)
        print(f"total {time.perf_counter() - started:.0f}s; load average {load()}", flush=True)


@contextmanager
def metastore_only(prefix: str, database: str) -> Iterator[Any]:
    """A throwaway Derby metastore (temp home, ``database`` created) without Spark; its
    ``MetastoreInfo`` (``.uri``, ``.warehouse``, ``.home``). Stopped and deleted on exit."""
    from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
    from airflow_provider_staged.local.metastore import start_metastore, stop_metastore

    home = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    try:
        metastore = start_metastore(home)
        with MetastoreClient(metastore.uri) as client:
            client.ensure_database(database, metastore.warehouse)
        yield metastore
    finally:
        stop_metastore(home)
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def client_gateway(prefix: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """A throwaway metastore and a warm gateway (``local[2]``) in a temp home: its ``GatewayInfo``
    and the environment of a ``staged sql`` client of them (this process's ``AIRFLOW_*``,
    ``STAGED_*`` and ``PYTHONPATH`` left out). Both stopped and deleted on exit."""
    from airflow_provider_staged.local.gateway import start_gateway, stop_gateway
    from airflow_provider_staged.local.metastore import start_metastore, stop_metastore

    home = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AIRFLOW", "STAGED_")) and key != "PYTHONPATH"}
    try:
        metastore = start_metastore(home)
        started = time.perf_counter()
        gateway = start_gateway(metastore.uri, metastore.warehouse, home, master="local[2]")
        print(f"gateway up in {time.perf_counter() - started:.0f}s; load average {load()}", flush=True)
        yield gateway, {**env, "STAGED_HOME": str(home), "STAGED_METASTORE_URI": metastore.uri}
    finally:
        stop_gateway(home)
        stop_metastore(home)
        shutil.rmtree(home, ignore_errors=True)


def embedded_engine(services: HiveServices, journal_dir: Path) -> Any:
    """The operator's ``EmbeddedEngine``, running on the benchmark's own session.

    ``EmbeddedEngine`` has no public way to take a session; a second session in the same JVM
    would not be a fair comparison, so the benchmark hands over its own.
    """
    from airflow_provider_staged.engine.runners import EmbeddedEngine
    from airflow_provider_staged.staging.settings import StagedSettings

    settings = StagedSettings(services.metastore_uri, str(services.warehouse), str(journal_dir))
    engine = EmbeddedEngine(settings, master="local[2]")
    engine._session = services.spark
    return engine

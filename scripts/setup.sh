#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine: Debian packages (when missing
# and we are root), a virtual environment with the package and its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# A JDK, not only a JRE: javac compiles the launcher that keeps the local metastore on 127.0.0.1.
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
# Maven copies the JVM dependencies declared in jvm/pom.xml (hadoop-aws, the tests' S3 server...).
command -v mvn >/dev/null || need_apt+=(maven)
[ -x "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | head -1)" ] || need_apt+=(postgresql)
[ -f /usr/share/java/postgresql.jar ] || need_apt+=(libpostgresql-jdbc-java)
# The test suite drives the Airflow UI with a real browser (scripts/test.sh sets STAGED_SETUP_TESTS).
if [ "${STAGED_SETUP_TESTS:-0}" = 1 ]; then
    command -v chromium >/dev/null || need_apt+=(chromium)
    command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
    # Celery's broker for the several-hosts test (tests/fixtures/hosts.py).
    command -v redis-server >/dev/null || need_apt+=(redis-server)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing Debian packages: ${need_apt[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # Another apt/dpkg (an unattended upgrade, a second set-up) may hold the lock: wait for it.
        apt_get() {
            for attempt in $(seq 1 30); do
                apt-get -o DPkg::Lock::Timeout=60 "$@" && return 0
                echo "setup: apt-get $1 failed (attempt $attempt; the dpkg lock may be held), retrying" >&2
                sleep 10
            done
            return 1
        }
        apt_get update -qq
        apt_get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
        # Debian starts a cluster on install; tests start their own throwaway servers.
        if command -v pg_lsclusters >/dev/null; then
            pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
                pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true
            done
        fi
    else
        echo "setup: please install: ${need_apt[*]} (not root, cannot apt-get)" >&2
    fi
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The newest tested versions (scripts/compat.sh tests the lowest); the tests check the lineage events too.
.venv/bin/python -m pip install -q -c scripts/newest-versions.txt -e ".[dev,openlineage]"
# dag-factory is only a comparison (the DAG-parse benchmark, tests/integration/test_mt_factory.py):
# installed outside site-packages (tests/fixtures/dag_factory.py adds it where needed), because
# there its airflow.plugins entry point, a listener, would load into every Airflow process.
if .venv/bin/python -m pip show dag-factory >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall -y -q dag-factory
fi
[ -d .venv/opt/dag-factory/dagfactory ] ||
    .venv/bin/python -m pip install -q --no-deps --target .venv/opt/dag-factory "dag-factory==1.1.0"
# The Celery provider (the several-hosts test's CeleryExecutor, tests/fixtures/hosts.py) outside
# site-packages too: celery 5.7 pins python-dateutil 2.9 below the venv's, and provider 3.26.0
# imports what celery 5.7 removed; 5.5.3 runs beside Airflow 3.3.2 and the venv's own libraries.
if [ "${STAGED_SETUP_TESTS:-0}" = 1 ] && [ ! -d .venv/opt/celery/airflow/providers/celery ]; then
    .venv/bin/python -m pip install -q --no-deps --target .venv/opt/celery \
        apache-airflow-providers-celery==3.26.0 celery==5.5.3 kombu==5.5.4 billiard==4.3.2 vine==5.1.0 \
        amqp==5.4.2 click-didyoumean==0.3.1 click-repl==0.4.1 click-plugins==1.1.1.2 redis==5.2.1
fi
# JVM dependencies, each profile of jvm/pom.xml (versions there) into .venv/jvm/<profile>/.
command -v mvn >/dev/null || { echo "setup: mvn (Apache Maven) is needed for the JVM dependencies" >&2; exit 1; }
jvm_profiles=(s3)
[ "${STAGED_SETUP_TESTS:-0}" = 1 ] && jvm_profiles+=(s3-server hive4)
for profile in "${jvm_profiles[@]}"; do
    stamp=.venv/jvm/$profile/.pom-sha256
    want=$(sha256sum jvm/pom.xml | cut -d' ' -f1)
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && continue
    rm -rf ".venv/jvm/$profile"
    mvn -q -B -f jvm/pom.xml -P "$profile" dependency:copy-dependencies -DoutputDirectory="$PWD/.venv/jvm/$profile"
    echo "$want" >"$stamp"
    echo "setup: JVM profile $profile: $(ls .venv/jvm/$profile | grep -c '\.jar$') jar(s)"
done
# The Spark provider's pyspark-client shares the pyspark/ package: make sure nothing clobbered it.
.venv/bin/python - <<'PY'
import pathlib, pyspark
jars = pathlib.Path(pyspark.__file__).parent / "jars"
core = next(jars.glob("spark-core_*.jar")).name
assert pyspark.__version__ in core, f"pyspark {pyspark.__version__} python files over jars {core}"
print(f"setup: pyspark {pyspark.__version__} ({core})")
PY

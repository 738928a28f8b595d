"""A maintenance loop in its own process, for tests that run it beside refreshes and commits.

``python -m tests.integration.lifecycle_workers SETTINGS_JSON EXPIRY_NOW STOP_FILE``: reconcile,
expire partitions as of EXPIRY_NOW (the injected clock), sweep versions (real clock), again and
again until STOP_FILE exists; prints one line per pass and exits 1 on any failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow_provider_staged.settings import StagedSettings
from airflow_provider_staged.staging.expiry import sweep_expiry
from airflow_provider_staged.staging.maintenance import sweep_all_versions
from airflow_provider_staged.staging.reconcile import reconcile
from airflow_provider_staged.staging.versions import RetentionPolicy


def main(argv: list[str]) -> int:
    raw = json.loads(argv[0])
    retention = RetentionPolicy(**raw.pop("retention"))
    settings = StagedSettings(**raw, retention=retention)
    expiry_now, stop = float(argv[1]), Path(argv[2])
    passes = 0
    while not stop.exists():
        actions = reconcile(settings, None)
        expiry = sweep_expiry(settings, now=expiry_now)
        versions = sweep_all_versions(settings)
        failed = [a for a in actions if a.action.startswith("failed")] or expiry.failures or versions.failures
        dropped = sum(len(plan.expired) for plan in expiry.plans)
        deleted = sum(len(found) for found in versions.deleted.values())
        print(f"pass {passes}: dropped {dropped}, deleted {deleted}, failed {failed}", flush=True)
        if failed:
            return 1
        passes += 1
    return 0 if passes else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Airflow's task-log server on 127.0.0.1 (``python -m ... PORT``).

Airflow 3.3's scheduler and triggerer start their log server on every interface (``host=""``,
no setting); the local Airflow starts them with ``--skip-serve-logs`` and runs this instead:
the same app (``airflow.utils.serve_logs.log_server``), bound to loopback.
"""

from __future__ import annotations

import sys


def main(port: int) -> None:
    import uvicorn
    from airflow.utils.serve_logs.log_server import create_app

    uvicorn.run(create_app(), host="127.0.0.1", port=port, log_config=None, access_log=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))

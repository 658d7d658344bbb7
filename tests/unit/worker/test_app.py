"""The worker's Celery app reads its settings when it is created, never at import (claudeq/worker/app.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.tree import tree_env


def run_python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=tree_env(**env), cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_importing_the_app_module_reads_no_settings(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "import claudeq.worker.app as worker_app\n"
        "from claudeq.errors import ConfigError\n"
        "try:\n"
        "    worker_app.app\n"
        "    print(json.dumps('created'))\n"
        "except ConfigError as exc:\n"
        "    print(json.dumps(exc.field))\n"
    )
    done = run_python(code, tmp_path, CLAUDEQ_CONCURRENCY="many")
    assert done.returncode == 0, done.stderr
    # The import went through; only creating the app read (and refused) the bad setting.
    assert json.loads(done.stdout) == "CLAUDEQ_CONCURRENCY"


def test_create_app_uses_the_settings_it_is_given(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "from claudeq.config.settings import load_settings\n"
        "from claudeq.config.celery import TASK_RUN\n"
        "import claudeq.worker.app as worker_app\n"
        "app = worker_app.create_app(load_settings(concurrency=7, queues=['a', 'b']))\n"
        "print(json.dumps([worker_app.settings.concurrency, worker_app.settings.queues, worker_app.app is app,\n"
        "                  TASK_RUN in app.tasks]))\n"
    )
    done = run_python(code, tmp_path, CLAUDEQ_CONCURRENCY="3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [7, ["a", "b"], True, True]


def test_celery_finds_the_app_by_module_name(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "from celery.app.utils import find_app\n"
        "from claudeq.config.celery import TASK_RUN\n"
        "app = find_app('claudeq.worker.app')\n"
        "print(json.dumps([type(app).__name__, TASK_RUN in app.tasks]))\n"
    )
    done = run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["Celery", True]

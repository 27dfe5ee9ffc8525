"""Followers on a Spark standalone cluster, not only ``local[*]`` (deploy/spark/README.md).

A master and a worker are started from the pyspark wheel with
``spark-class`` (the wheel has no ``start-master.sh``), and
``spark-submit --master spark://…`` (client mode: Spark refuses cluster mode
for Python on standalone) runs ``deploy/spark/submit.py … run --once`` for
all three followers. The Elasticsearch and Redis followers apply their
batches on the worker's executors; the Delta follower's MERGE runs its tasks
there. Every store must then equal the source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcsync.driver import connector_jars
from tests.integration.followers import numbered_table, scenario
from tests.support import execute, uid

ROOT = Path(__file__).resolve().parents[2]
MASTER_PORT, MASTER_UI, WORKER_UI = 17077, 18180, 18181  # clear of the stack's ports (docs/local-stack.md)
ROWS = 300


def _master_state() -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
            return state
    except OSError:
        return None


def _apps() -> dict[str, dict[str, Any]]:
    state = _master_state()
    assert state is not None, "the Spark master stopped answering"
    return {a["id"]: a for a in state["completedapps"] + state["activeapps"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "SPARK_LOG_DIR": str(logs), "SPARK_WORKER_DIR": str(logs / "work")}
    master_url = f"spark://127.0.0.1:{MASTER_PORT}"
    started = []
    try:
        for name, args in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(MASTER_PORT),
                        "--webui-port", str(MASTER_UI)]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores", "2",
                        "--memory", "1g", "--webui-port", str(WORKER_UI)]),
        ):  # fmt: skip
            out = (logs / f"{name}.log").open("wb")
            started.append(subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env))
            deadline = time.monotonic() + 120
            while True:
                state = _master_state()
                if state is not None and (name == "master" or state.get("aliveworkers", 0) >= 1):
                    break
                assert started[-1].poll() is None, (logs / f"{name}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"spark {name} not up: {(logs / f'{name}.log').read_text()[-3000:]}"
                time.sleep(1)
        yield master_url
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_followers_converge_through_a_standalone_master_and_worker(cluster: str, tmp_path: Path) -> None:
    t = f"cluster_{uid()}"
    with scenario(None, tmp_path, {"postgres": [f"public.{t}"]}, numbered_table(t, ROWS)) as sc:
        execute(
            "postgres",
            f"UPDATE {t} SET v = v + 1000 WHERE id % 3 = 0",
            f"DELETE FROM {t} WHERE id % 7 = 0",
            f"INSERT INTO {t} SELECT g, g FROM generate_series({ROWS + 1}, {ROWS + 50}) g",
        )
        sc.caught_up()
        config_path = tmp_path / "cdcsync.yaml"
        config_path.write_text(yaml.safe_dump(sc.raw))
        submitted = _submit(cluster, config_path, "run", "--once")
        assert submitted.returncode == 0, submitted.stderr[-4000:]

        verify = subprocess.run(
            [sys.executable, "-m", "cdcsync", "--config", str(config_path), "verify", "--json"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        reports = json.loads(verify.stdout)
        assert verify.returncode == 0 and len(reports) == 3 * 2, (verify.stdout[-3000:], verify.stderr[-3000:])
        assert all(r["clean"] for r in reports), reports
        kept = ROWS - ROWS // 7 + 50  # ids 1..ROWS less every 7th, then 50 inserted
        assert [r["store_rows"] for r in reports if r["target"] == t] == [kept] * 3, reports

        # A verify submitted to the cluster: the warehouse's rows are digested on the worker's executors.
        on_cluster = _submit(cluster, config_path, "verify", "warehouse", "--json")
        assert on_cluster.returncode == 0, (on_cluster.stdout[-3000:], on_cluster.stderr[-4000:])
        # spark-submit's PythonRunner merges the program's stderr (its progress lines) into its stdout
        report = on_cluster.stdout[on_cluster.stdout.find("\n[\n") + 1 :]
        found = [(r["clean"], r["store_rows"]) for r in json.loads(report) if r["target"] == t]
        assert found == [(True, kept)], on_cluster.stdout[-3000:]


def _submit(cluster: str, config_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``cdcsync ARGS`` through ``spark-submit`` to the cluster; it must have run as one application there."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    spark_submit = Path(sys.executable).parent / "spark-submit"
    before = _apps()
    submitted = subprocess.run(
        [str(spark_submit), "--master", cluster, "--deploy-mode", "client", "--name", "cdcsync-cluster-test",
         "--driver-memory", "1g", "--executor-memory", "768m",
         "--jars", ",".join(str(j) for j in connector_jars()),
         str(ROOT / "deploy" / "spark" / "submit.py"), "--config", str(config_path), *args],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    ran = [a for app_id, a in _apps().items() if app_id not in before]
    assert len(ran) == 1 and ran[0]["cores"] >= 1, ran  # it ran on the cluster's executors, not local[*]
    return submitted

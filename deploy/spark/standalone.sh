#!/usr/bin/env bash
# A Spark standalone master and one worker, from the pyspark wheel (which ships no start-master.sh):
#   deploy/spark/standalone.sh [MASTER_PORT] [WORKER_CORES] [WORKER_MEMORY]
# Both run in the foreground; Ctrl-C stops them. For a real cluster run the
# master once and the worker line on every worker machine (deploy/spark/README.md).
set -euo pipefail
port=${1:-17077}
cores=${2:-2}
memory=${3:-2g}
python=${PYSPARK_PYTHON:-python3}
spark_home=$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
host=${SPARK_MASTER_HOST:-127.0.0.1}
export SPARK_LOG_DIR=${SPARK_LOG_DIR:-${TMPDIR:-/tmp}/cdcsync-spark-logs}
"$spark_home/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "$host" --port "$port" --webui-port $((port + 1003)) &
master=$!
trap 'kill $master $worker 2>/dev/null; wait' EXIT INT TERM
sleep 5
"$spark_home/bin/spark-class" org.apache.spark.deploy.worker.Worker "spark://$host:$port" \
    --host "$host" --cores "$cores" --memory "$memory" --webui-port $((port + 1004)) &
worker=$!
wait

"""bench.cpu: naming the stack's processes and threads from /proc, and the cores between two samples."""

from __future__ import annotations

import os
import time

from bench import cpu


def test_processes_are_named_by_their_command_lines() -> None:
    named = {
        "java\0-cp\0/v/pyspark/jars/*\0org.apache.spark.deploy.SparkSubmit\0pyspark-shell": "spark jvm",
        "/v/bin/python\0-m\0pyspark.daemon": "python workers",
        "/v/bin/python\0-m\0cdcsync\0--config\0/t/cdcsync.yaml\0run\0--metrics-port\01": "cdcsync driver",
        "/v/bin/python\0-m\0cdcsync\0verify": "other",
        "java\0-Xms1g\0org.elasticsearch.bootstrap.Elasticsearch": "elasticsearch",
        "java\0kafka.Kafka\0/s/server.properties": "kafka",
        "java\0org.apache.kafka.connect.cli.ConnectDistributed\0/s/connect.properties": "connect",
        "postgres: cdcsync inventory 127.0.0.1(5432) idle": "postgres",
        "/usr/lib/postgresql/15/bin/postgres\0-D\0/s/pg": "postgres",
        "/usr/sbin/mariadbd\0--defaults-file=/s/my.cnf": "mariadb",
        "/usr/bin/redis-server 127.0.0.1:16379": "redis",
        "sleep\0100": "other",
        # a bootstrap's replay processes (snapshot.parallel), spawned by the bench
        "/v/bin/python\0-c\0from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)\0"
        "--multiprocessing-fork": "bench",
    }
    assert {line: cpu.part_of(line, pid=1) for line in named} == named
    assert cpu.part_of("anything", pid=os.getpid()) == "bench"


def test_spark_threads_are_split_by_kind() -> None:
    names = ["C2 CompilerThre", "C1 CompilerThre", "Executor task l", "GC Thread#3", "G1 Conc#0", "stream executio"]
    assert [cpu.thread_of(n) for n in names] == [
        "spark jvm: jit", "spark jvm: jit", "spark jvm: tasks", "spark jvm: gc", "spark jvm: gc", "spark jvm: other",
    ]  # fmt: skip


def test_a_stat_line_whose_name_holds_spaces_and_parentheses_is_read() -> None:
    stat = "42 (C2 Compiler) (x)) S 1 1 1 0 -1 4194560 0 0 0 0 250 50 0 0 20 0 1 0 100 0 0"
    assert cpu._ticks(stat) == ("C2 Compiler) (x)", 300)


def test_the_bench_counts_the_children_it_reaped() -> None:
    # utime 250, stime 50, cutime 30, cstime 20: a replay process that ended in the phase still counts
    stat = "42 (python) S 1 1 1 0 -1 4194560 0 0 0 0 250 50 30 20 20 0 1 0 100 0 0"
    assert cpu._ticks(stat) == ("python", 300)
    assert cpu._ticks(stat, children=True) == ("python", 350)


def test_cores_are_the_difference_over_the_window_busiest_first() -> None:
    before = {"spark jvm": 10.0, "redis": 1.0, "_at": 100.0}
    after = {"spark jvm": 30.0, "redis": 1.001, "kafka": 2.0, "_at": 110.0}
    used = cpu.cores(before, after)
    assert used == {"spark jvm": 2.0, "kafka": 0.2}
    assert list(used) == ["spark jvm", "kafka"]
    assert cpu.summary({"spark jvm": 1.2, "spark jvm: jit": 0.5, "kafka": 0.1}) == "spark jvm 1.2 (jit 0.5), kafka 0.1"


def test_a_sample_of_this_machine_counts_this_process() -> None:
    first = cpu.sample()
    started = time.process_time()
    while time.process_time() - started < 0.1:  # some CPU of its own: ten clock ticks, not a fixed loop's few
        sum(i * i for i in range(10_000))
    assert cpu.sample()["bench"] > first["bench"] >= 0

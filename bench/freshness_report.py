"""How ``bench.freshness`` prints its figures when not asked for ``--json``."""

from __future__ import annotations

from typing import Any

from bench import cpu, daemon_report


def print_results(results: dict[str, Any]) -> None:
    """The figures of a run as tables: per phase and store, then the quiet markers and the burst."""
    changed = {**results["follower"], **results["debezium"], **results["daemon_env"]} or "defaults"
    print(f"\nfreshness, source commit -> visible (s), {results['rows']:,}-row table, three followers, {changed}")
    print(f"{'phase':<8} {'rate/s':>7} {'sink':<10} {'seen p50':>9} {'p95':>6} {'p99':>6} {'max':>6}"
          f" {'hist p50':>9} {'p95':>6} {'p99':>6} {'<=1s':>6} {'<=2s':>6} {'applied/s':>10}")  # fmt: skip
    for phase in results["phases"]:
        for name in ("search", "cache", "warehouse"):
            s, h = phase[name]["seen"], phase[name]["histogram"]
            print(
                f"{phase.get('label', 'steady'):<8} {phase['rate']:>7,} {name:<10}"
                f" {s['p50']:>9} {s['p95']:>6} {s['p99']:>6} {s['max']:>6}"
                f" {h['p50']!s:>9} {h['p95']!s:>6} {h['p99']!s:>6} {h['within_1s']!s:>6} {h['within_2s']!s:>6}"
                f" {phase[name]['applied_per_s']:>10,}"
            )
        kafka = f"in Kafka {phase['in_kafka_per_s']:,}/s"
        print(f"        {phase['seconds']:.0f} s, written {phase['written_per_s']:,}/s, {kafka}")
        print(f"        cpu (cores, the drain included): {cpu.summary(phase['cpu_cores'])}")
        batches = phase.get("batches") or {}
        if batches:
            print(f"        median batch (ms): {'follower':<10} {'rows':>6} {'every_s':>8} "
                  + " ".join(f"{p:>14}" for p in daemon_report.PHASES))  # fmt: skip
        for name, b in batches.items():
            print(
                f"                           {name:<10} {b['rows_p50']:>6} {b['every_s']!s:>8} "
                + " ".join(f"{b[p]:>14}" for p in daemon_report.PHASES)
            )
    if "quiet" in results:
        q = results["quiet"]
        seen = "; ".join(f"{name} {', '.join(map(str, q[name]))}" for name in ("search", "cache", "warehouse"))
        print(f"after {q['quiet_s']:.0f} s without a change, seen after (s): {seen}")
    if "burst" in results:
        b = results["burst"]
        print(
            f"burst of {b['changes']:,}: capture alone {b['capture_per_s']:,}/s; all three followers "
            f"{b['all_three_per_s']:,}/s (ratio {b['ratio_to_capture']}); search {b['search_per_s']:,}/s, "
            f"cache {b['cache_per_s']:,}/s, warehouse {b['warehouse_per_s']:,}/s"
        )
        print(f"        cpu (cores): {cpu.summary(b['cpu_cores'])}")
        print(f"        {cpu.budget_line(b['cpu'], 'change')}, capture and followers together "
              f"({b['bound_ratio_to_capture']} of capture alone)")  # fmt: skip
        r = b["raw"]
        print(
            f"        raw ceilings, the same changes: alone search {r['search_alone_per_s']:,}/s, "
            f"cache {r['cache_alone_per_s']:,}/s, warehouse {r['warehouse_alone_per_s']:,}/s; the three at once "
            f"{r['three_at_once_per_s']:,}/s (search {r['search_at_once_per_s']:,}, "
            f"cache {r['cache_at_once_per_s']:,}, "
            f"warehouse {r['warehouse_at_once_per_s']:,}); followers / raw at once {b['ratio_to_raw_at_once']}, "
            f"raw at once / capture {round(r['three_at_once_per_s'] / b['capture_per_s'], 2)}"
        )

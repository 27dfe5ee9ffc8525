"""A small client for Kafka Connect's REST API.

Only what cdcsync needs: list, read, validate, PUT (create-or-update, idempotent),
status, restart and delete. A Connect worker that cannot be reached raises
``ConnectUnreachable`` naming the URL; 5xx and rebalance conflicts (409) are
retryable, everything else is fatal with Connect's own message. A call is
tried ``retries`` times while it is retryable, waiting ``retry_after`` times
the attempts so far (at most 5 s) between tries; then its last error is raised.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from cdcsync.errors import FatalError, RetryableError
from cdcsync.retry import raised


class ConnectUnreachable(RetryableError):
    """Kafka Connect's REST endpoint did not answer."""


def _longer_each_attempt(state: RetryCallState) -> float:
    """The error's ``retry_after`` times the attempts made, at most 5 s."""
    return min(raised(state).retry_after * state.attempt_number, 5)


class ConnectClient:
    def __init__(self, url: str, timeout_s: float = 15.0, retries: int = 5) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self._http = requests.Session()
        self._policy = Retrying(
            retry=retry_if_exception_type(RetryableError),
            stop=stop_after_attempt(retries),
            wait=_longer_each_attempt,
            reraise=True,
        )

    def _call(self, method: str, path: str, body: Any = None, ok_404: bool = False) -> Any:
        return self._policy(self._once, method, path, body, ok_404)

    def _once(self, method: str, path: str, body: Any, ok_404: bool) -> Any:
        try:
            response = self._http.request(method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise ConnectUnreachable(
                f"Kafka Connect unreachable at {self.url} ({type(err).__name__}); is it running? (make up; make status)"
            ) from None
        if response.status_code == 404 and ok_404:
            return None
        if response.status_code == 409 or response.status_code >= 500:
            raise RetryableError(f"Kafka Connect {method} {path}: {response.status_code} {response.text[:300]}")
        if response.status_code >= 400:
            raise FatalError(f"Kafka Connect {method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def version(self) -> dict[str, Any]:
        return self._call("GET", "/")

    def plugins(self) -> list[str]:
        return [p["class"] for p in self._call("GET", "/connector-plugins")]

    def connectors(self) -> list[str]:
        return list(self._call("GET", "/connectors"))

    def configs(self) -> dict[str, dict[str, str]]:
        """Every connector's config, by name, in one request (``?expand=info``)."""
        listed = self._call("GET", "/connectors?expand=info") or {}
        return {name: dict(entry.get("info", {}).get("config") or {}) for name, entry in listed.items()}

    def get_config(self, name: str) -> dict[str, str] | None:
        return self._call("GET", f"/connectors/{quote(name)}/config", ok_404=True)

    def tasks(self, name: str) -> list[dict[str, Any]]:
        """The connector's tasks with the config each runs: ``[{"id": {...}, "config": {...}}]``."""
        return list(self._call("GET", f"/connectors/{quote(name)}/tasks", ok_404=True) or [])

    def validate(self, connector_class: str, config: dict[str, str]) -> dict[str, list[str]]:
        """Connect's own validation of a config: field name -> errors (empty when valid)."""
        plugin = connector_class.rsplit(".", 1)[-1]
        result = self._call("PUT", f"/connector-plugins/{quote(plugin)}/config/validate", config)
        # An entry's value may be null (Debezium 3.6 lists some definitions without one).
        values = [c.get("value") or {} for c in result.get("configs", [])]
        return {v["name"]: v["errors"] for v in values if v.get("errors")}

    def put_config(self, name: str, config: dict[str, str]) -> dict[str, Any]:
        return self._call("PUT", f"/connectors/{quote(name)}/config", config)

    def create_stopped(self, name: str, config: dict[str, str]) -> None:
        """Create a connector in the STOPPED state (KIP-980): its offsets can be changed before it runs."""
        self._call("POST", "/connectors", {"name": name, "config": config, "initial_state": "STOPPED"})

    def delete_offsets(self, name: str) -> None:
        """Forget a STOPPED connector's committed source offsets (KIP-875)."""
        self._call("DELETE", f"/connectors/{quote(name)}/offsets")

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{quote(name)}/resume")

    def status(self, name: str) -> dict[str, Any] | None:
        return self._call("GET", f"/connectors/{quote(name)}/status", ok_404=True)

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed source offsets (KIP-875): ``[{"partition": {...}, "offset": {...}}]``."""
        return list((self._call("GET", f"/connectors/{quote(name)}/offsets") or {}).get("offsets", []))

    def restart(self, name: str) -> None:
        """Restart the connector and its tasks that are FAILED."""
        self._call("POST", f"/connectors/{quote(name)}/restart?includeTasks=true&onlyFailed=true")

    def restart_all(self, name: str) -> None:
        """Restart the connector and every task, RUNNING ones too (a task that says RUNNING but is stuck)."""
        self._call("POST", f"/connectors/{quote(name)}/restart?includeTasks=true&onlyFailed=false")

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{quote(name)}", ok_404=True)

"""What every part of the config's models shares: the strict base model, property maps, secret names.

Kept apart from ``cdcsync.config`` so the sections in other modules
(``cdcsync.config.runtime``) use the same rules without importing it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

ENV_PREFIX = "CDCSYNC_"
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,47}$"
# A property whose name says it holds a credential: masked wherever it is shown, sent to Connect by reference.
# Storage keys among them: S3A's access.key (with its secret.key), Azure's account.key, S3A's encryption.key.
SECRET_KEY = re.compile(
    r"password|passwd|secret|token|api[._-]?key|credential|jaas|user\.info|private|(access|account|encryption)[._-]?key",
    re.IGNORECASE,
)
MASK = "**********"  # what SecretStr shows
PROPERTY_KEY = r"^[a-z][a-z0-9._-]*$"


class Strict(BaseModel):
    """A config section: unknown keys are errors, and a loaded config does not change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def property_text(value: Any) -> Any:
    """A YAML number or boolean as a Java or librdkafka property takes it (``10240``, ``true``); the rest as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


# Property maps handed to Debezium, Kafka Connect, Kafka clients and Spark: every value is text to them.
Properties = dict[str, Annotated[str, BeforeValidator(property_text)]]

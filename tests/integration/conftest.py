import pytest


@pytest.fixture(autouse=True)
def _needs_stack(stack_up: None) -> None:
    """Every test here talks to the real local stack."""

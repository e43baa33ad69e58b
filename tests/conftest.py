import jax
import pytest

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiles = []


def _listener(event, duration, **kwargs):
    if event == _COMPILE_EVENT:
        _compiles.append(duration)


jax.monitoring.register_event_duration_secs_listener(_listener)


class CompileCounter:
    """Counts XLA backend compiles (the `jax.monitoring` compile event) since `reset`."""

    def __init__(self):
        self.start = len(_compiles)

    def reset(self):
        self.start = len(_compiles)

    @property
    def count(self) -> int:
        return len(_compiles) - self.start


@pytest.fixture
def compiles():
    return CompileCounter()


@pytest.fixture(autouse=True)
def strict_promotion():
    """Every test runs with strict dtype promotion: no implicit casts anywhere."""
    with jax.numpy_dtype_promotion("strict"):
        yield

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


# XLA's CPU backend maps memory for every executable it keeps, about 200 maps for a compiled
# solver; a test worker that kept all of the suite's programs would pass Linux's default limit
# of 65530 memory maps per process (vm.max_map_count), and the compiler aborts or segfaults
# there. So compiled programs are dropped between tests once 150 compiles have piled up, and
# after each test module.
_CLEAR_EVERY = 150
_cleared_at = [0]


def _release_compiled_programs():
    jax.clear_caches()
    _cleared_at[0] = len(_compiles)


@pytest.fixture(autouse=True)
def bound_compiled_programs():
    if len(_compiles) - _cleared_at[0] > _CLEAR_EVERY:
        _release_compiled_programs()
    yield


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
    yield
    _release_compiled_programs()

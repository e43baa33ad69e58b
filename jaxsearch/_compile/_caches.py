"""The library's caches, each bounded, and `clear_caches`, which empties them all.

Each cache keeps at most a fixed number of entries and drops the oldest first (`Kept`), or
is a `functools.lru_cache` of a fixed size (`bounded_cache`). What they keep: the fresh state
a small run starts from, the compile-option price of an objective, the stand-ins that let new
closures over one computation share a program, the retrace records, the wrappers that hold
compiled programs, and the run's report of its progress. Each is a saving only: after
`clear_caches` every call works as before and builds what it needs again.
"""

import functools
from collections.abc import Callable, Hashable
from typing import Any

_clearers: list[Callable[[], None]] = []
_sizes: dict[str, Callable[[], int]] = {}  # each cache's name -> its number of entries


def sizes() -> dict[str, int]:
    """The number of entries each cache holds, by its name (for the test seam)."""
    return {name: size() for name, size in _sizes.items()}


class Kept:
    """A mapping of at most `size` entries, called `name`; putting one more drops the oldest."""

    def __init__(self, size: int, name: str):
        self.size = size
        self._entries: dict = {}
        _clearers.append(self._entries.clear)
        _sizes[name] = self.__len__

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self._entries.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        if key not in self._entries and len(self._entries) >= self.size:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def bounded_cache(size: int, name: str | None = None):
    """`functools.lru_cache(maxsize=size)`, emptied by `clear_caches`, called `name` (by
    default the function's)."""

    def decorate(fun):
        cached = functools.lru_cache(maxsize=size)(fun)
        _clearers.append(cached.cache_clear)
        _sizes[name or fun.__name__] = lambda: cached.cache_info().currsize
        return cached

    return decorate


def clear_caches() -> None:
    """Empty every cache jaxsearch keeps (JAX's own compile caches are `jax.clear_caches`).

    Each is bounded, so none grows without limit in a long process; this is for a process
    that wants the memory back now, or a measurement that wants no saving carried over."""
    for clear in _clearers:
        clear()

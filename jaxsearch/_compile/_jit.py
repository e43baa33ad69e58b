"""`js.jit`: a training step compiled with the options jaxsearch chooses for its own programs."""

import functools
import math
from typing import Any, Literal

import equinox as eqx
import jax
import jax.tree_util as jtu

from . import _programs

Donate = Literal["all", "all-except-first", "warn", "warn-except-first", "none"]


def jit(fun=None, *, compiler_options="auto", donate: Donate = "none"):
    """`eqx.filter_jit(fun, donate=donate)`, compiled with the XLA options that `run` and
    `step` choose for their own programs: a training step that calls `solver.step` compiles
    as fast as `step` called by itself.

    `compiler_options` as in `Solver.run`: None keeps XLA's defaults, a dict is passed to XLA
    as given, and "auto" (the default) compiles with the lean options (XLA's elemental fusion
    emitters and LLVM at -O1, which compile faster on a CPU) where every solver call
    in `fun` (`step`, `run`, `as_optax().update`) is cheap enough: on a CPU, with its params
    and args under 1 MiB, the run time the options may add to `max_steps` steps of that
    solver below the compile time they save (docs/recompiles.md; a call under `jax.vmap` in
    `fun` priced as its problems times one); otherwise, and where `fun` calls no solver,
    XLA's defaults. To choose, "auto" traces `fun` once more for each new signature of its
    arguments (its `step` calls only priced, not traced), up to the solver call whose price
    brings the total past the saving, then compiles once, as `eqx.filter_jit` does. Called
    inside another trace (a `jax.jit` or `jax.vmap` of it), that trace's compile decides,
    and options other than "auto" are refused, as jax refuses them. Usable as a decorator,
    with or without keywords.

    Where every leaf of the arguments is a `jax.Array`, `donate="none"` and `fun` holds no
    array itself, the call is dispatched by `jax.jit` (jax's C++ dispatch, cheaper a
    call than `eqx.filter_jit` on a solver's state; docs/benchmarks.md), with the same program; a
    Python number `fun` returns then comes back as an array, as from `jax.jit`. Otherwise,
    and for a `fun` whose outputs hold a value that is neither (found by its first trace,
    which is then done again), by `eqx.filter_jit`.
    """
    if fun is None:
        return functools.partial(jit, compiler_options=compiler_options, donate=donate)
    return _Jitted(fun, _programs.setting(compiler_options), donate)


# Functions each told (fun, arrays, compiler_options) of every jit `jitted` builds (the test
# seam's recorders, `seam.jits`; none otherwise).
recorders: list = []


def jitted(fun, arrays: bool, donate: Donate, compiler_options: dict | None):
    """`jax.jit(fun)` where `arrays` (called on arrays alone, nothing donated), else
    `eqx.filter_jit(fun)`, with `compiler_options`."""
    for record in recorders:
        record(fun, arrays, compiler_options)
    jit_options: dict[str, Any] = {"compiler_options": compiler_options}  # to jax.jit
    if arrays:
        return jax.jit(fun, **jit_options)
    return eqx.filter_jit(fun, donate=donate, **jit_options)


class _Jitted:
    """`fun` with its jit per set of options and dispatch, and its choice per signature."""

    def __init__(self, fun, setting, donate: Donate):
        self._fun, self._setting, self._donate = fun, setting, donate
        self._jitted: dict = {}  # (options, by jax.jit) -> the jitted fun
        self._chosen: dict = {}  # signature of the arguments -> options
        self._by_jax_jit = True  # until a trace by jax.jit finds an output not an array
        functools.update_wrapper(self, fun)

    def _jit_with(self, options, arrays: bool = False):
        """`fun` jitted with `options`: by `jax.jit` where `arrays` (every argument leaf an
        array), else by `eqx.filter_jit`."""
        if (options, arrays) not in self._jitted:
            compiler_options = None if options is None else dict(options)
            self._jitted[options, arrays] = jitted(
                self._fun, arrays, self._donate, compiler_options
            )
        return self._jitted[options, arrays]

    def __call__(self, *args, **kwargs):
        if not _programs.top_level():
            _programs.check_top_level(self._setting)
            return self._jit_with(None)(*args, **kwargs)
        options = self._setting
        if options == "auto":
            options = self._auto(args, kwargs)
        return _programs.with_fallback(lambda chosen: self._call(chosen, args, kwargs), options)

    def _call(self, options, args, kwargs):
        # `plain_call` is False for a fun that holds arrays itself (an Equinox module or
        # bound method: unhashable), whose arrays eqx.filter_jit passes in.
        arrays = (
            self._donate == "none"
            and self._by_jax_jit
            and _programs.plain_call(self._fun, (args, kwargs))
        )
        if arrays:
            try:
                return self._jit_with(options, arrays=True)(*args, **kwargs)
            except TypeError as error:  # an output that is not an array: filter_jit's
                if "is not a valid JAX type" not in str(error):
                    raise
                self._by_jax_jit = False
        return self._jit_with(options)(*args, **kwargs)

    def _auto(self, args, kwargs):
        """The options "auto" chooses for these arguments: the lean ones where every solver
        call in `fun` is priced below the compile time they save."""
        if not _programs.lean_eligible():  # another backend, or a jaxlib without them
            return None
        flat, treedef = jtu.tree_flatten((args, kwargs))
        try:
            signature = (
                treedef,
                tuple(jax.typeof(x) if eqx.is_array(x) else (type(x), x) for x in flat),
            )
            return self._chosen[signature]
        except KeyError:
            pass
        except TypeError:  # an unhashable leaf: chosen anew (eqx.filter_jit hashes it too)
            signature = None
        token = _programs.pricing.set([])
        try:
            # a new function each time: a trace no cache answers, so that the solver calls run
            eqx.filter_eval_shape(lambda *a, **k: self._fun(*a, **k), *args, **kwargs)
            priced = _programs.pricing.get()
        except _programs.PricedOut:  # priced above the saving: the rest need not be traced
            priced = [math.inf]
        finally:
            _programs.pricing.reset(token)
        assert priced is not None
        cheap = bool(priced) and sum(priced) < _programs.LEAN_SAVES_SECONDS
        chosen = _programs.LEAN_ITEMS if cheap else None
        if signature is not None:
            self._chosen[signature] = chosen
        return chosen

"""The solvers compared: one function per library, each used the way its documentation shows.

Every function `peer(fn, x0, args, cfg)` returns a zero-argument callable that runs the whole
minimisation (compiled on its first call, cached after) and returns an `Outcome`. `fn(x, args)`
is the (counted) objective; `cfg` holds gtol, ftol and max_steps, the same for every peer.
"""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js


@dataclasses.dataclass
class Config:
    """Stopping settings shared by all peers."""

    gtol: float = 1e-5
    ftol: float = 0.0
    max_steps: int = 2000
    optx_tol: float = 1e-8


@dataclasses.dataclass
class Outcome:
    """What a peer returns: the final point and what the solver itself reports."""

    x: Any
    iterations: int | None
    reported_evals: int | None = None
    reported_grad_evals: int | None = None
    status: str = ""


# --------------------------------------------------------------------------------- jaxsearch


def jaxsearch_configs(cfg: Config) -> dict[str, js.Solver]:
    """The jaxsearch configurations benchmarked: add an entry to add a configuration."""
    common = dict(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    return {
        "jaxsearch": js.Solver(**common),
        "jaxsearch-mt": js.Solver(js.LBFGS(), js.MoreThuente(), **common),
    }


def second_order_configs(cfg: Config) -> dict[str, js.Solver]:
    """jaxsearch's dense and Hessian-free second-order directions, each with its default
    search (`Zoom`): run only when `--solvers` names them (`suite/cutest.py`), as Newton forms
    an n x n Hessian every step."""
    common = dict(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    return {
        "jaxsearch-newton": js.Solver(js.Newton(), **common),
        "jaxsearch-newtoncg": js.Solver(js.NewtonCG(), **common),
        "jaxsearch-bfgs": js.Solver(js.BFGS(), **common),
        "jaxsearch-ssbfgs": js.Solver(js.SSBFGS(), **common),
        "jaxsearch-ssbroyden": js.Solver(js.SSBroyden(), **common),
    }


INITIAL_STEPS = {
    "quadratic": js.InitialQuadratic,  # the default
    "static": js.InitialStatic,
    "previous": js.InitialPrevious,
    "constant-change": js.InitialConstantChange,
    "hager-zhang": js.InitialHagerZhang,
}


def initial_step_configs(cfg: Config) -> dict[str, js.Solver]:
    """L-BFGS and nonlinear CG (each with `Zoom`) under every initial-step rule, named
    `jaxsearch-{lbfgs,cg}-init-<rule>`: run only when `--solvers` names them (`suite/cutest.py`)."""
    common = dict(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    configs = {}
    for direction_name, direction in (("lbfgs", js.LBFGS), ("cg", js.NonlinearCG)):
        for rule_name, rule in INITIAL_STEPS.items():
            configs[f"jaxsearch-{direction_name}-init-{rule_name}"] = js.Solver(
                direction(), js.Zoom(), initial_step=rule(), **common
            )
    return configs


def _jaxsearch(solver: js.Solver, fn, x0, args, cfg: Config):
    def call():
        result = jax.block_until_ready(solver.run(fn, x0, args))
        return Outcome(
            x=result.params,
            iterations=int(result.num_steps),
            reported_evals=int(result.num_fun_evals),
            status=f"{js.Status(int(result.status)).name}: {result.message}",
        )

    return call


# ------------------------------------------------------------------------------------- scipy


def scipy_lbfgsb(fn, x0, args, cfg: Config):
    """scipy L-BFGS-B, jac=True, on a jitted value_and_grad; float64 on scipy's side."""
    import scipy.optimize

    value_and_grad = jax.jit(jax.value_and_grad(fn))
    dtype = x0.dtype

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x, dtype), args)
        return float(value), np.asarray(grad, np.float64)

    options = {"gtol": cfg.gtol, "ftol": cfg.ftol, "maxiter": cfg.max_steps, "maxfun": 10**9}
    x0_np = np.asarray(x0, np.float64)

    def call():
        res = scipy.optimize.minimize(f, x0_np, jac=True, method="L-BFGS-B", options=options)
        return Outcome(
            x=jnp.asarray(res.x, dtype),
            iterations=int(res.nit),
            reported_evals=int(res.nfev),
            reported_grad_evals=int(res.njev),
            status=f"{res.status}: {res.message}",
        )

    return call


# ------------------------------------------------------------------------------------- optax


def optax_lbfgs(fn, x0, args, cfg: Config):
    """optax.lbfgs() in optax's documented while loop, stopping on |g|_inf <= gtol; x0 an
    array or a pytree of arrays."""
    import optax
    import optax.tree_utils as otu

    opt = optax.lbfgs()

    @jax.jit
    def solve(x0, args):
        fun = functools.partial(fn, args=args)
        value_and_grad = optax.value_and_grad_from_state(fun)

        def step(carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(params, updates), state

        def keep_going(carry):
            _, state = carry
            count = otu.tree_get(state, "count")
            grad = otu.tree_get(state, "grad")
            err = functools.reduce(  # |g|_inf over the leaves (one array: jnp.max(jnp.abs))
                jnp.maximum, [jnp.max(jnp.abs(leaf)) for leaf in jax.tree.leaves(grad)]
            )
            return (count == 0) | ((count < cfg.max_steps) & (err > cfg.gtol))

        params, state = jax.lax.while_loop(keep_going, step, (x0, opt.init(x0)))
        return params, otu.tree_get(state, "count")

    def call():
        params, count = jax.block_until_ready(solve(x0, args))
        return Outcome(x=params, iterations=int(count))

    call.program = (solve, (x0, args))  # for measurements of the compiled program
    return call


# ------------------------------------------------------------------------------------ jaxopt


def jaxopt_lbfgs(fn, x0, args, cfg: Config):
    """jaxopt.LBFGS(fun, tol, maxiter) with a jitted run (jaxopt's tol bounds |g|_2)."""
    import jaxopt

    solver = jaxopt.LBFGS(fun=fn, tol=cfg.gtol, maxiter=cfg.max_steps)
    run = jax.jit(solver.run)

    def call():
        params, state = jax.block_until_ready(run(x0, args))
        return Outcome(
            x=params,
            iterations=int(state.iter_num),
            reported_evals=int(state.num_fun_eval),
            reported_grad_evals=int(state.num_grad_eval),
            status=f"error={float(state.error):.3g}",
        )

    return call


# ------------------------------------------------------------------------------- optimistix


def _optimistix(kind: str, fn, x0, args, cfg: Config):
    import optimistix as optx

    solver = getattr(optx, kind)(rtol=cfg.optx_tol, atol=cfg.optx_tol)

    @jax.jit
    def solve(x0, args):
        sol = optx.minimise(fn, solver, x0, args, max_steps=cfg.max_steps, throw=False)
        return sol.value, sol.stats["num_steps"], sol.result._value

    def call():
        x, steps, code = jax.block_until_ready(solve(x0, args))
        names = {int(item._value): name for name, item in optx.RESULTS._name_to_item.items()}
        return Outcome(x=x, iterations=int(steps), status=names.get(int(code), str(int(code))))

    return call


def peers(cfg: Config, second_order: bool = False) -> dict[str, Any]:
    """name -> peer function, jaxsearch configurations first (with `second_order`, those of
    `second_order_configs` and `initial_step_configs` too)."""
    configs = jaxsearch_configs(cfg)
    if second_order:
        configs.update(second_order_configs(cfg))
        configs.update(initial_step_configs(cfg))
    out = {name: functools.partial(_jaxsearch, solver) for name, solver in configs.items()}
    out["scipy"] = scipy_lbfgsb
    out["optax"] = optax_lbfgs
    out["jaxopt"] = jaxopt_lbfgs
    out["optx-lbfgs"] = functools.partial(_optimistix, "LBFGS")
    out["optx-bfgs"] = functools.partial(_optimistix, "BFGS")
    return out

"""A physics-informed neural network (PINN) for the viscous Burgers equation, trained with Adam
and then L-BFGS, with a checkpoint in the middle of the L-BFGS run.

The problem (Raissi, Perdikaris and Karniadakis 2019):

    u_t + u u_x = (0.01 / pi) u_xx,   x in [-1, 1], t in [0, 1],
    u(x, 0) = -sin(pi x),   u(-1, t) = u(1, t) = 0.

An Equinox MLP (x, t) -> u (tanh, three hidden layers of 20) is fitted to the PDE residual at
random collocation points and to the initial and boundary conditions. The example shows

  1. Adam (optax) in a hand-written `eqx.filter_jit` training step, the usual first phase;
  2. jaxsearch's L-BFGS as the second phase, `solver.run(..., progress=True, history=True)`,
     cut into two halves: the first half's last iterate and `SolverState` are saved with
     `eqx.tree_serialise_leaves`, read back into a template from `solver.init`, and the run
     resumes with `solver.run(..., state=state)` (which reuses the first half's compiled
     program: a fresh and a resumed run of one solver compile once between them);
  3. that the resumed run ends exactly where one uninterrupted L-BFGS run of the same total
     number of steps ends, bit for bit;
  4. the relative L2 error against the exact solution (Cole-Hopf, by Gauss-Hermite
     quadrature) on a test grid, and a plot of the loss against the iteration.

In the full run L-BFGS takes the loss about 30 times below where Adam left it (to about
2e-3, float32) and the relative L2 error from about 0.4 to 0.2. That error sits almost all
in the steep front that forms at x = 0 (more than 90% of the squared error within |x| < 0.1
in the --quick run), which a network this small, on this few points and steps, smears; a
larger network and more points and steps resolve it better, at a cost beyond a few minutes on a CPU.

The plot is written to pinn_burgers.png in a new temporary folder, or in the folder --out
names; the script prints where.

    python examples/pinn_burgers.py                          # a few minutes on a CPU
    python examples/pinn_burgers.py --quick                  # fewer points and steps
    python examples/pinn_burgers.py --out plots              # plots/pinn_burgers.png
"""

import argparse
import pathlib
import tempfile
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxsearch as js

NU = 0.01 / np.pi  # viscosity

# Sizes of the two runs: collocation points in the interior, points on the initial line and
# on the two boundaries, Adam steps, L-BFGS steps (cut in two halves).
FULL = dict(interior=2000, initial=100, boundary=100, adam_steps=2000, lbfgs_steps=4000)
QUICK = dict(interior=400, initial=50, boundary=50, adam_steps=500, lbfgs_steps=1000)


# ----------------------------------------------------------------------------- the problem


def collocation_points(key, interior, initial, boundary):
    """Random points (x, t), from a fixed key: in the domain, on t = 0, and on x = -1 or 1."""
    k_xi, k_ti, k_x0, k_tb, k_side = jax.random.split(key, 5)
    x_interior = jax.random.uniform(k_xi, (interior,), minval=-1.0, maxval=1.0)
    t_interior = jax.random.uniform(k_ti, (interior,))
    x_initial = jax.random.uniform(k_x0, (initial,), minval=-1.0, maxval=1.0)
    t_boundary = jax.random.uniform(k_tb, (boundary,))
    x_boundary = jnp.where(jax.random.bernoulli(k_side, 0.5, (boundary,)), 1.0, -1.0)
    return dict(
        interior=jnp.stack([x_interior, t_interior], axis=1),
        initial=jnp.stack([x_initial, jnp.zeros(initial)], axis=1),
        initial_u=-jnp.sin(jnp.pi * x_initial),
        boundary=jnp.stack([x_boundary, t_boundary], axis=1),
    )


def make_model(key):
    return eqx.nn.MLP(2, 1, width_size=20, depth=3, activation=jnp.tanh, key=key)


def u_at(model, x, t):
    """The network's u at one point, as a function of the two scalars x and t."""
    return model(jnp.stack([x, t]))[0]


def pde_residual(model, x, t):
    """u_t + u u_x - nu u_xx at one point, by forward-mode differentiation of the network
    (jvp of jvp for u_xx: quicker to compile and to run here than grad of grad)."""
    one = jnp.ones_like(x)

    def u_and_u_x(x):
        return jax.jvp(lambda x: u_at(model, x, t), (x,), (one,))

    (u, u_x), (_, u_xx) = jax.jvp(u_and_u_x, (x,), (one,))
    _, u_t = jax.jvp(lambda t: u_at(model, x, t), (t,), (one,))
    return u_t + u * u_x - NU * u_xx


def loss(model, data):
    """Mean squared PDE residual plus mean squared misfit of the initial and boundary values.

    Defined once at module level, with the points passed in `data`: the identity of the
    function is part of jaxsearch's compile key."""
    points = data["interior"]
    residual = jax.vmap(pde_residual, in_axes=(None, 0, 0))(model, points[:, 0], points[:, 1])
    u = jax.vmap(model)
    initial = u(data["initial"])[:, 0] - data["initial_u"]
    boundary = u(data["boundary"])[:, 0]
    return jnp.mean(residual**2) + jnp.mean(initial**2) + jnp.mean(boundary**2)


def exact_solution(x, t, nodes=100):
    """The exact u(x, t), by the Cole-Hopf transformation (float64, NumPy):

        u = -int sin(pi (x - s)) f(x - s) G(s) ds / int f(x - s) G(s) ds,
        f(y) = exp(-cos(pi y) / (2 pi nu)),  G(s) = exp(-s^2 / (4 nu t)),

    both integrals by Gauss-Hermite quadrature in z = s / sqrt(4 nu t). 100 nodes agree with
    200 to 1e-15 on the test grid."""
    z, w = np.polynomial.hermite.hermgauss(nodes)
    y = np.asarray(x)[..., None] - np.sqrt(4 * NU * np.asarray(t))[..., None] * z
    log_f = -np.cos(np.pi * y) / (2 * np.pi * NU)
    weights = w * np.exp(log_f - log_f.max(axis=-1, keepdims=True))  # no overflow: f ~ e^50
    return -np.sum(np.sin(np.pi * y) * weights, axis=-1) / np.sum(weights, axis=-1)


def relative_l2_error(model, num_x=256, num_t=101):
    """||u_net - u_exact|| / ||u_exact|| on a regular grid of the domain."""
    x, t = np.meshgrid(np.linspace(-1, 1, num_x), np.linspace(0, 1, num_t), indexing="ij")
    dtype = jax.tree.leaves(eqx.filter(model, eqx.is_array))[0].dtype  # the model's own
    points = jnp.asarray(np.stack([x.ravel(), t.ravel()], axis=1), dtype)
    u_net = np.asarray(jax.vmap(model)(points)[:, 0], np.float64)
    u_exact = exact_solution(x.ravel(), t.ravel())
    return np.linalg.norm(u_net - u_exact) / np.linalg.norm(u_exact)


# ----------------------------------------------------------------------------- phase 1: Adam


def train_adam(model, data, steps, learning_rate=1e-3):
    """`steps` Adam steps in an `eqx.filter_jit` training step; returns the model and the loss
    before each step."""
    optimiser = optax.adam(learning_rate)
    opt_state = optimiser.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def adam_step(model, opt_state, data):
        value, grads = eqx.filter_value_and_grad(loss)(model, data)
        updates, opt_state = optimiser.update(grads, opt_state, model)
        return eqx.apply_updates(model, updates), opt_state, value

    values = []
    for _ in range(steps):
        model, opt_state, value = adam_step(model, opt_state, data)
        values.append(value)
    return model, np.asarray(jnp.stack(values))


# ----------------------------------------------------------------------------- phase 2: L-BFGS


def lbfgs_solver(max_steps):
    # A fixed budget of steps: `throw="failures"` raises on a failed line search, a non-finite
    # loss or a stall, and lets the run end normally with MAX_STEPS.
    return js.Solver(js.LBFGS(), max_steps=max_steps, throw="failures")


def lbfgs_with_checkpoint(model, data, half, path):
    """L-BFGS for 2 * `half` steps, as two runs of `half` steps with a checkpoint between them:
    the first run's last iterate and state go to `path`, are read back into a template (as a
    new process would) and the second run resumes from them. Returns both results."""
    solver = lbfgs_solver(half)
    first = solver.run(loss, model, data, progress=True, history=True)
    # `first.params` is the best point seen; `first.iterate` is where the run stands (the
    # two may differ), and `first.state` its SolverState there: save those two to resume.
    eqx.tree_serialise_leaves(path, (first.iterate, first.state))

    # The template: params of the same structure (any values) and the state `init` gives
    # them, with the loss and its arguments so that it has the loss's value dtype.
    template = (model, solver.init(model, fn=loss, args=(data,)))
    iterate, state = eqx.tree_deserialise_leaves(path, template)
    # The same solver: max_steps more steps, numbered on from the state's count.
    second = solver.run(loss, iterate, data, state=state, progress=True, history=True)
    return first, second


def same_bits(a, b):
    """Whether the arrays of two pytrees are equal leaf for leaf, bit for bit (an Equinox
    model's other leaves, such as its activation function, are left out)."""
    leaves_a = jax.tree.leaves(eqx.filter(a, eqx.is_array))
    leaves_b = jax.tree.leaves(eqx.filter(b, eqx.is_array))
    return len(leaves_a) == len(leaves_b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def report_agreement(first, second, whole):
    """Print whether the resumed run ended where the uninterrupted one did, bit for bit: the
    loss, the params, the count of evaluations, and the history rows of the two halves (the
    resumed run's rows are numbered on from the first's) against those of the whole run."""
    halves = [r.history.to_numpy() for r in (first, second)]
    rows = whole.history.to_numpy()
    checks = {
        "loss": same_bits(second.value, whole.value),
        "params": same_bits(second.params, whole.params),
        "evaluations": int(second.num_fun_evals) == int(whole.num_fun_evals),
        "history": all(
            same_bits(np.concatenate([h[field] for h in halves]), rows[field])
            for field in ("step", "value", "num_fun_evals")
        ),
    }
    for name, same in checks.items():
        print(f"resumed == uninterrupted, {name + ':':<12s} {same}")
    print(f"resumed == uninterrupted, bit for bit: {all(checks.values())}")


def summary(name, result):
    status = js.Status(result.status)
    print(
        f"{name:<22s}: status {status}, steps {int(result.num_steps)}, "
        f"evaluations {int(result.num_fun_evals)}, loss {float(result.value):.6e}"
    )


# ----------------------------------------------------------------------------- the plot


def plot(out, adam_values, first, second, whole):
    """Loss against iteration: Adam's steps, then the two L-BFGS halves (and the uninterrupted
    run, which should lie on them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    adam_steps = len(adam_values)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.semilogy(np.arange(adam_steps), adam_values, label="Adam", linewidth=1.2)
    for name, result in (("L-BFGS, first half", first), ("L-BFGS, resumed", second)):
        rows = result.history.to_numpy()
        ax.semilogy(adam_steps + rows["step"], rows["value"], label=name, linewidth=1.2)
    rows = whole.history.to_numpy()
    ax.semilogy(
        adam_steps + rows["step"],
        rows["value"],
        "k:",
        label="L-BFGS, uninterrupted",
        linewidth=1.0,
    )
    ax.axvline(adam_steps + int(first.num_steps), color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("iteration (Adam steps, then L-BFGS steps)")
    ax.set_ylabel("loss")
    ax.set_title("PINN for viscous Burgers: Adam, then L-BFGS with a checkpoint")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points and steps")
    parser.add_argument(
        "--out", help="folder to write pinn_burgers.png to (default: a new temporary folder)"
    )
    options = parser.parse_args()
    sizes = QUICK if options.quick else FULL
    folder = options.out or tempfile.mkdtemp(prefix="jaxsearch-pinn-burgers-")
    out = pathlib.Path(folder) / "pinn_burgers.png"

    key_data, key_model = jax.random.split(jax.random.key(0))
    data = collocation_points(key_data, sizes["interior"], sizes["initial"], sizes["boundary"])
    model = make_model(key_model)
    num_params = sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_array)))
    print(
        f"points: {sizes['interior']} interior, {sizes['initial']} initial, "
        f"{sizes['boundary']} boundary; MLP 2 -> 20 -> 20 -> 20 -> 1, {num_params} params"
    )

    start = time.perf_counter()
    model, adam_values = train_adam(model, data, sizes["adam_steps"])
    adam_time = time.perf_counter() - start
    adam_loss, adam_error = float(loss(model, data)), relative_l2_error(model)
    print(
        f"Adam: {sizes['adam_steps']} steps, loss {adam_values[0]:.6e} -> {adam_loss:.6e} "
        f"({adam_time:.1f} s)"
    )

    half = sizes["lbfgs_steps"] // 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "lbfgs_half.eqx"
        first, second = lbfgs_with_checkpoint(model, data, half, path)
        size = path.stat().st_size
    halves_time = time.perf_counter() - start
    summary("L-BFGS, first half", first)
    print(f"checkpoint            : {size} bytes (last iterate and SolverState)")
    summary("L-BFGS, resumed", second)

    start = time.perf_counter()
    whole = lbfgs_solver(2 * half).run(loss, model, data, progress=True, history=True)
    whole_time = time.perf_counter() - start
    summary("L-BFGS, uninterrupted", whole)
    print(f"time: two halves {halves_time:.1f} s, uninterrupted {whole_time:.1f} s")

    report_agreement(first, second, whole)

    final = float(second.value)
    print(f"final loss {final:.6e}, {adam_loss / final:.1f} times below the loss after Adam")
    print(
        "relative L2 error against the exact solution: "
        f"after Adam {adam_error:.3e}, after L-BFGS {relative_l2_error(second.params):.3e}"
    )
    print(
        f"evaluations of the loss: Adam {sizes['adam_steps']}, L-BFGS {int(second.num_fun_evals)}"
    )

    plot(out, adam_values, first, second, whole)
    print(f"saved {out}")


if __name__ == "__main__":
    main()

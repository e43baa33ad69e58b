"""Values that fn closes over are differentiated as `args` are: under every adjoint and in every
order of transformations, or refused with jaxsearch's words (`UnrolledAdjoint` in forward
mode). References: central finite differences of the closed-form minimiser in NumPy float64.

The problem: w*(b, lam) minimises 0.5 |A w - b|^2 + 0.5 lam |w|^2, so w* = (A'A + lam I)^-1 A'b,
and the output differentiated is sum(w*) + c'w*.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

A = np.array([[2.0, 0.3, -0.5], [0.1, 1.5, 0.4], [-0.3, 0.2, 1.8], [0.5, -0.4, 0.3]])
C = np.array([0.7, -1.2, 0.4])
B0 = np.array([1.0, -0.5, 2.0, 0.3])
LAM0 = 0.5


def _closed_form(b, lam) -> float:
    w = np.linalg.solve(A.T @ A + lam * np.eye(3), A.T @ b)
    return float(np.sum(w) + C @ w)


def _finite_differences(names) -> dict:
    """d/d(name) of the closed form at (B0, LAM0) for each name, central differences in
    float64."""
    h, point, out = 1e-6, {"b": np.array(B0), "lam": np.array(LAM0)}, {}
    for name in names:
        grad = np.zeros_like(point[name])
        for i in np.ndindex(grad.shape):
            up, down = point[name].copy(), point[name].copy()
            up[i] += h
            down[i] -= h
            grad[i] = _closed_form(**{**point, name: up}) - _closed_form(**{**point, name: down})
        out[name] = grad / (2 * h)
    return out


def _output_of(solver, b, lam):
    """The differentiated output, fn closing over b and lam (and over A, a constant)."""
    a = jnp.asarray(A)

    def fn(w):
        return 0.5 * jnp.sum((a @ w - b) ** 2) + 0.5 * lam * jnp.sum(w**2)

    w = solver.run(fn, jnp.zeros(3, b.dtype)).params  # float64 in the x64 cells
    return jnp.sum(w) + jnp.asarray(C) @ w


# What is differentiated: an array (b), a Python float (lam), a pytree of both.
KINDS = {
    "array": (lambda s: lambda b: _output_of(s, b, LAM0), lambda: jnp.asarray(B0), ("b",)),
    "float": (lambda s: lambda lam: _output_of(s, jnp.asarray(B0), lam), lambda: LAM0, ("lam",)),
    "pytree": (
        lambda s: lambda t: _output_of(s, t["b"], t["lam"]),
        lambda: {"b": jnp.asarray(B0), "lam": jnp.asarray(LAM0)},
        ("b", "lam"),
    ),
}


def _in_order(order, f):
    if order == "grad":
        return jax.grad(f)
    if order == "jit(grad)":
        return jax.jit(jax.grad(f))
    if order == "grad(jit)":
        return jax.grad(jax.jit(f))
    if order == "jacfwd":
        return jax.jacfwd(f)
    assert order == "vmap(grad)"
    return lambda theta: jax.vmap(jax.grad(f))(jax.tree.map(lambda x: jnp.stack([x, x]), theta))


def _as_dict(kind, names, got):
    if kind == "pytree":
        return {name: np.asarray(got[name]) for name in names}
    return {names[0]: np.asarray(got)}


ADJOINTS = {"implicit": js.ImplicitAdjoint(), "unrolled": js.UnrolledAdjoint()}
ORDERS = ["grad", "jit(grad)", "grad(jit)", "jacfwd", "vmap(grad)"]
CELLS = [(a, o, k) for a in ADJOINTS for o in ORDERS for k in KINDS]
# The unrolled adjoint is reverse mode only: every kind once under each reverse order, and
# forward mode is refused (below).
CELLS = [
    (a, o, k)
    for a, o, k in CELLS
    if a == "implicit" or (o != "jacfwd" and (k == "pytree" or o == "grad"))
]


@pytest.mark.parametrize(("adjoint", "order", "kind"), CELLS)
def test_closed_over_values_get_their_derivative(adjoint, order, kind):
    with jax.enable_x64(True):
        # max_steps: the unrolled adjoint differentiates every step of its budget (a 3-D
        # quadratic takes under 10); 50 keeps its compile and run small.
        solver = js.Solver(gtol=1e-12, ftol=0.0, max_steps=50, adjoint=ADJOINTS[adjoint])
        make, theta, names = KINDS[kind]
        got = _in_order(order, make(solver))(theta())
        if order == "vmap(grad)":  # both rows are the same problem
            got = jax.tree.map(lambda x: x[1], got)
        expected = _finite_differences(names)
        for name, value in _as_dict(kind, names, got).items():
            np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-8)


def test_the_unrolled_adjoint_refuses_forward_mode_in_its_own_words():
    solver = js.Solver(gtol=1e-6, adjoint=js.UnrolledAdjoint())
    with pytest.raises(TypeError, match=r"UnrolledAdjoint .* reverse mode only.*ImplicitAdjoint"):
        jax.jacfwd(lambda lam: _output_of(solver, jnp.asarray(B0, jnp.float32), lam))(0.5)


def test_a_closure_made_inside_eager_grad_compiles_once(compiles):
    """Each call of an eager `jax.grad` makes a new closure (over its own tracer, and one
    passing its data through args): the programs of the first call serve the later ones."""
    solver = js.Solver(gtol=1e-6, max_steps=50)

    def closing_over(lam):
        return jnp.sum(
            solver.run(lambda w: jnp.sum((w - 1.0) ** 2) + lam * jnp.sum(w**2), jnp.zeros(3)).params
        )

    def through_args(lam):
        def loss(w, lam):
            return jnp.sum((w - 2.0) ** 2) + lam * jnp.sum(w**2)

        return jnp.sum(solver.run(loss, jnp.zeros(3), lam).params)

    for f, top in [(closing_over, 1.0), (through_args, 2.0)]:
        per_call = []
        for lam in [0.5, 0.6, 0.7]:
            compiles.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("error", js.RetraceWarning)
                got = jax.grad(f)(lam)
            per_call.append(compiles.count)
            np.testing.assert_allclose(got, -3 * top / (1 + lam) ** 2, rtol=1e-4)
        assert per_call[0] > 0 and per_call[1:] == [0, 0], per_call


def test_a_step_inside_a_jit_takes_a_batch_it_closes_over():
    """A closure over the caller's traced batch steps as passing the batch through args does."""
    solver = js.Solver()
    x0 = jnp.array([1.5, -0.5])
    batch = jnp.array([0.3, 2.0])

    def loss(x, batch):
        return jnp.sum((x - batch) ** 2 * jnp.array([1.0, 4.0]))

    @jax.jit
    def closed(params, state, batch):
        return solver.step(lambda x: loss(x, batch), params, state)

    @jax.jit
    def through_args(params, state, batch):
        return solver.step(loss, params, state, batch)

    state = solver.init(x0)
    p1, s1 = x0, state
    p2, s2 = x0, state
    for _ in range(5):
        p1, s1 = closed(p1, s1, batch)
        p2, s2 = through_args(p2, s2, batch)
    np.testing.assert_allclose(p1, p2, rtol=1e-6)
    np.testing.assert_allclose(p1, batch, atol=1e-4)


def test_batched_run_takes_a_tracer_its_fn_closes_over():
    solver = js.Solver(gtol=1e-7)

    def total(lam):
        fn = lambda w: jnp.sum((w - 1.0) ** 2) + lam * jnp.sum(w**2)  # noqa: E731
        return jnp.sum(js.batched_run(solver, fn, jnp.zeros((4, 3)), lanes=4).params)

    assert np.isclose(jax.jit(total)(0.5), 12 / 1.5, rtol=1e-6)
    assert np.isclose(jax.jacfwd(total)(0.5), -12 / 1.5**2, rtol=1e-4)


def test_the_retrace_warning_for_a_fn_that_cannot_be_compared_says_to_define_it_once():
    solver = js.Solver(max_steps=2, gtol=1e-3)

    def make():
        def fn(x):
            jax.debug.callback(lambda: None)
            return jnp.sum(x**2)

        return fn

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            solver.run(make(), jnp.full(2, 1.0 + i))
    messages = [str(w.message) for w in caught if issubclass(w.category, js.RetraceWarning)]
    assert len(messages) == 1
    assert "cannot be compared" in messages[0] and "Define fn once" in messages[0]

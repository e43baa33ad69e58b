"""solver.step inside your own training step, compiled by `js.jit`.

`js.jit` is `eqx.filter_jit` with the compile options that `step` called by itself gets (on a
CPU, about half the compile time for a step as cheap as this one). The state's dtypes are
fixed by `init`, so the step compiles once; the script counts the backend compiles to show it.

    python examples/training_loop.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp

import jaxsearch as js

compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: (
        compiles.append(event) if event == "/jax/core/compile/backend_compile_duration" else None
    )
)


def loss(model, x, y):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def main():
    key_model, key_data = jax.random.split(jax.random.key(0))
    model = eqx.nn.MLP(1, 1, 32, 2, activation=jnp.tanh, key=key_model)
    x = jnp.linspace(-3, 3, 256).reshape(-1, 1)
    y = jnp.sin(x) + 0.1 * jax.random.normal(key_data, x.shape)

    solver = js.Solver(js.LBFGS(memory_size=10), js.Zoom())
    state = solver.init(model, value_dtype=jnp.float32)

    @js.jit
    def train_step(model, state, x, y):
        return solver.step(loss, model, state, x, y)

    before = len(compiles)
    for step in range(200):
        model, state = train_step(model, state, x, y)
        if step % 40 == 0 or step == 199:
            print(
                f"step {step:3d}  loss {float(state.value):.5f}  "
                f"evaluations {int(state.num_fun_evals)}"
            )
    print(f"compiles of the training step over 200 steps: {len(compiles) - before}")


if __name__ == "__main__":
    main()

"""Watching a run: `history=`, `callback=`, `verbose=` and `progress=`, and history under vmap.

One problem throughout: an L2-regularised logistic regression on 2000 x 50 random data in
float32. The example shows
  (a) `history=True`: per-step records kept on the device, read with `to_numpy()`: row 0 is
      x0 (step 0: f(x0), its one evaluation), row k step k;
  (b) `callback=`: the same records handed to a Python function on the host, at x0 and after
      each step;
  (c) `verbose=True`: one printed line at x0 and one per step (a short run, max_steps=5);
  (d) `progress=True`: a tqdm bar on stderr;
  (e) `history=True` under `jax.vmap`, over four regularisation strengths passed through args.

    python examples/history_and_progress.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

FIELDS = ("step", "value", "grad_norm", "step_size", "num_fun_evals", "step_evals")


def logistic_loss(w, features, labels, lam):
    margins = labels * (features @ w)
    return jnp.mean(jnp.logaddexp(0.0, -margins)) + 0.5 * lam * jnp.sum(w**2)


def make_data(n=2000, d=50):
    key_x, key_w, key_noise = jax.random.split(jax.random.key(0), 3)
    features = jax.random.normal(key_x, (n, d))
    scores = features @ jax.random.normal(key_w, (d,)) + jax.random.normal(key_noise, (n,))
    return features, jnp.sign(scores)


def print_table(rows, first=3, last=3):
    n = len(rows["step"])
    print(
        f"  {'step':>5s} {'value':>12s} {'grad_norm':>10s} {'step_size':>10s} "
        f"{'num_fun_evals':>13s} {'step_evals':>10s}"
    )
    shown = list(range(min(first, n))) + list(range(max(first, n - last), n))
    for k, i in enumerate(shown):
        if k == first and i > first:
            print(f"  {'...':>5s}")
        print(
            f"  {rows['step'][i]:5d} {rows['value'][i]:12.6e} {rows['grad_norm'][i]:10.3e} "
            f"{rows['step_size'][i]:10.3e} {rows['num_fun_evals'][i]:13d} "
            f"{rows['step_evals'][i]:10d}"
        )


def main():
    features, labels = make_data()
    w0 = jnp.zeros(features.shape[1])
    lam = jnp.asarray(1e-3)
    solver = js.Solver()  # L-BFGS + Zoom

    # (a) The history: device buffers with max_steps + 1 rows (x0, then each step);
    # to_numpy() keeps the used ones: num_steps + 1.
    print("(a) history=True")
    result = solver.run(logistic_loss, w0, features, labels, lam, history=True)
    rows = result.history.to_numpy()
    print(
        f"  status {js.Status(result.status)}, steps {int(result.num_steps)}, "
        f"history rows {len(rows['step'])}, evaluations {int(result.num_fun_evals)}"
    )
    print_table(rows)
    print(f"  sum of step_evals = {int(rows['step_evals'].sum())}")

    # (b) The same records, streamed to the host as the run goes.
    print("(b) callback=")
    records = []
    solver.run(logistic_loss, w0, features, labels, lam, callback=records.append)
    jax.effects_barrier()  # the host calls are asynchronous: wait for them before reading
    same = len(records) == len(rows["step"]) and all(
        np.allclose([r[name] for r in records], rows[name]) for name in FIELDS
    )
    print(f"  callback records: {len(records)}, history rows: {len(rows['step'])}")
    print(f"  callback records match history: {same}")

    # (c) One line at x0 (step 0), then one per step; a short run, stopped by max_steps.
    print("(c) verbose=True, max_steps=5")
    short = js.Solver(max_steps=5).run(logistic_loss, w0, features, labels, lam, verbose=True)
    jax.effects_barrier()
    print(f"  stopped with status {js.Status(short.status)}")

    # (d) A progress bar (on stderr), closed when the run stops.
    print("(d) progress=True")
    result_d = solver.run(logistic_loss, w0, features, labels, lam, progress=True)
    jax.effects_barrier()
    print(f"  finished: steps {int(result_d.num_steps)}, f {float(result_d.value):.6e}")

    # (e) Four regularisation strengths at once: every leaf of the history gains a batch axis,
    # and each run keeps its own row count (its num_steps + 1).
    print("(e) history=True under jax.vmap")
    lams = jnp.array([1e-4, 1e-3, 1e-2, 1e-1])
    batched = jax.vmap(
        lambda lam_: solver.run(logistic_loss, w0, features, labels, lam_, history=True)
    )(lams)
    for i in range(len(lams)):
        one = jax.tree.map(lambda a, i=i: a[i], batched.history).to_numpy()
        print(
            f"  lam {float(lams[i]):.0e}: history.length {int(batched.history.length[i]):3d}, "
            f"num_steps {int(batched.num_steps[i]):3d}, final f {one['value'][-1]:.6e}"
        )


if __name__ == "__main__":
    main()

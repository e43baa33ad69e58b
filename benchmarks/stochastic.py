"""Mini-batch training: SLS (`js.StochasticArmijo`) against optax's SGD and Adam.

An MLP (2 -> 64 -> 64 -> 3, tanh) classifies three interleaved noisy spirals (3,000 points,
fixed seed; 2,400 for training, 600 held out), in mini-batches of 64 for a few epochs. Every
optimiser starts from the same weights and sees the same batches in the same order.

- optax.sgd and optax.adam run at each learning rate of a sweep (5 each); the table shows the
  best, the lowest training loss after the last epoch.
- jaxsearch's SLS runs with its defaults (no learning rate, nothing tuned) along `js.Gradient`
  (SGD + Armijo, Vaswani et al. 2019) and `js.Preconditioned` (Adam's direction), and AMSGrad
  without momentum (Vaswani et al. 2020); `batches_per_epoch` is the number of batches.

Per epoch: the training loss on the whole training set, the test accuracy, and evaluations
of f and its gradient (one per step for optax; for SLS one at the step's start on its batch
plus one per trial). Writes benchmarks/results/stochastic.json and prints a table:

    python benchmarks/stochastic.py                # about a minute or two on 2 CPU cores
    python benchmarks/stochastic.py --epochs 5
"""

import argparse
import json
import pathlib
import platform
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the jaxsearch of this checkout

import jaxsearch as js  # noqa: E402

SIZES = (2, 64, 64, 3)
SGD_RATES = (0.1, 0.3, 1.0, 3.0, 10.0)
ADAM_RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def spirals(num: int, seed: int, arms: int = 3, noise: float = 0.15):
    """`num` points on `arms` interleaved spirals, with Gaussian noise; labels are the arms."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, arms, num)
    r = rng.uniform(0.1, 1.0, num)
    angle = 3.5 * r + 2 * np.pi * labels / arms
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1)
    x = x + noise * r[:, None] * rng.normal(size=x.shape)
    return (2 * x).astype(np.float32), labels.astype(np.int32)


def init_mlp(seed: int):
    """Glorot-normal weights, zero biases."""
    rng = np.random.default_rng(seed)
    params = []
    for a, b in zip(SIZES[:-1], SIZES[1:], strict=True):
        w = rng.normal(size=(a, b)) * np.sqrt(2.0 / (a + b))
        params.append((jnp.asarray(w, jnp.float32), jnp.zeros(b, jnp.float32)))
    return params


def logits(params, x):
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def loss(params, x, y):
    """Mean softmax cross-entropy."""
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y))


def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(logits(params, x), axis=-1) == y)


def epoch_batches(x, y, batch: int, epochs: int, seed: int):
    """For each epoch, (batches of x, batches of y) in a shuffled order, leading axis the
    batch index (the last partial batch is dropped)."""
    rng = np.random.default_rng(seed)
    num = x.shape[0] // batch
    out = []
    for _ in range(epochs):
        idx = rng.permutation(x.shape[0])[: num * batch].reshape(num, batch)
        out.append((jnp.asarray(x[idx]), jnp.asarray(y[idx])))
    return out


# --------------------------------------------------------------------------- the optimisers


def optax_epoch(opt):
    """A jitted epoch of `opt`: a scan over the epoch's batches, one evaluation per step."""

    @jax.jit
    def run(params, opt_state, xs, ys):
        def body(carry, batch):
            params, opt_state = carry
            grad = jax.grad(loss)(params, *batch)
            updates, opt_state = opt.update(grad, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        (params, opt_state), _ = jax.lax.scan(body, (params, opt_state), (xs, ys))
        return params, opt_state, jnp.asarray(xs.shape[0], jnp.int32)

    return run


def sls_epoch(solver: js.Solver):
    """A jitted epoch of SLS steps, each first evaluating f and its gradient on its batch
    (`reevaluate`), then searching on that batch alone."""

    @eqx.filter_jit
    def run(params, state, xs, ys):
        evals = state.num_fun_evals

        def body(carry, batch):
            params, state = carry
            params, state = solver.step(loss, params, solver.reevaluate(state), *batch)
            return (params, state), None

        (params, state), _ = jax.lax.scan(body, (params, state), (xs, ys))
        return params, state, state.num_fun_evals - evals

    return run


def train(init, epoch_fn, params, epochs_data, data):
    """Train over `epochs_data`; per epoch the training loss, test accuracy, evaluations."""
    x_train, y_train, x_test, y_test = data
    state = init(params)
    rows = []
    start = time.perf_counter()
    for xs, ys in epochs_data:
        params, state, evals = epoch_fn(params, state, xs, ys)
        rows.append(
            dict(
                train_loss=float(loss(params, x_train, y_train)),
                test_accuracy=float(accuracy(params, x_test, y_test)),
                evals=int(evals),
            )
        )
    return rows, time.perf_counter() - start


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "stochastic.json"))
    args = p.parse_args(argv)

    x, y = spirals(3000, args.seed)
    x_train, y_train, x_test, y_test = x[:2400], y[:2400], x[2400:], y[2400:]
    data = (x_train, y_train, x_test, y_test)
    epochs_data = epoch_batches(x_train, y_train, args.batch, args.epochs, args.seed + 1)
    batches_per_epoch = int(epochs_data[0][0].shape[0])
    params = init_mlp(args.seed + 2)

    runs = {}
    for family, make, rates in (
        ("optax.sgd", optax.sgd, SGD_RATES),
        ("optax.adam", optax.adam, ADAM_RATES),
    ):
        for lr in rates:
            opt = make(lr)
            rows, wall = train(opt.init, optax_epoch(opt), params, epochs_data, data)
            runs[f"{family}(lr={lr:g})"] = dict(family=family, lr=lr, epochs=rows, seconds=wall)
            print(f"{family} lr={lr:g}: loss {rows[-1]['train_loss']:.4f}", flush=True)

    searches = {
        "SLS + Gradient": js.Gradient(),
        "SLS + Preconditioned": js.Preconditioned(),
        "SLS + AMSGrad(b1=0, b2=0.99)": js.Preconditioned(b1=0.0, b2=0.99, amsgrad=True),
    }
    for name, direction in searches.items():
        solver = js.Solver(direction, js.StochasticArmijo(batches_per_epoch=batches_per_epoch))
        init = lambda p, solver=solver: solver.init(p, value_dtype=jnp.float32)  # noqa: E731
        rows, wall = train(init, sls_epoch(solver), params, epochs_data, data)
        runs[name] = dict(family="jaxsearch", lr=None, epochs=rows, seconds=wall)
        print(f"{name}: loss {rows[-1]['train_loss']:.4f}", flush=True)

    best = {}
    for family in ("optax.sgd", "optax.adam"):
        candidates = [k for k, v in runs.items() if v["family"] == family]
        best[family] = min(candidates, key=lambda k: runs[k]["epochs"][-1]["train_loss"])
    shown = [best["optax.sgd"], best["optax.adam"], *searches]

    header = "| epoch | " + " | ".join(shown) + " |"
    print("\nTraining loss / test accuracy (evaluations of f and its gradient in the epoch)\n")
    print(header)
    print("| ---: |" + " ---: |" * len(shown))
    for e in range(args.epochs):
        cells = []
        for k in shown:
            row = runs[k]["epochs"][e]
            cells.append(f"{row['train_loss']:.3f} / {row['test_accuracy']:.3f} ({row['evals']})")
        print(f"| {e + 1} | " + " | ".join(cells) + " |")
    print(
        "\nseconds (compile included): " + ", ".join(f"{k} {runs[k]['seconds']:.1f}" for k in shown)
    )

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(
        task="three spirals, 2400 train / 600 test, MLP 2-64-64-3 tanh",
        batch=args.batch,
        epochs=args.epochs,
        batches_per_epoch=batches_per_epoch,
        seed=args.seed,
        sgd_rates=SGD_RATES,
        adam_rates=ADAM_RATES,
        best=best,
        jax=jax.__version__,
        optax=optax.__version__,
        machine=platform.platform(),
    )
    out.write_text(json.dumps(dict(meta=meta, runs=runs), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Mini-batch training: SLS (`js.StochasticArmijo`) against optax's SGD and Adam, over seeds.

The task: ten classes, each two Gaussian clusters in 20 dimensions (centres N(0, 1.2^2 I),
unit noise; 5,120 points from a fixed seed, 4,096 for training and 1,024 held out), and an
MLP 20-64-64-10 (tanh, Glorot-normal weights, zero biases), trained in mini-batches of 128
(32 per epoch) for 20 epochs. For each seed, every method starts from the same weights and
sees the same batches in the same order; the seeds change the weights and the order.

- optax.sgd and optax.adam run at each learning rate of a sweep (5 each); the tables show the
  best of each, the lowest training loss after the last epoch, averaged over the seeds.
- jaxsearch's SLS runs with its defaults (no learning rate, nothing tuned) and
  `batches_per_epoch=32` along `js.Gradient()` (SGD + Armijo, Vaswani et al. 2019),
  `js.Preconditioned()` (Adam's preconditioner without momentum: AdaSLS, Vaswani et al.
  2020), AMSGrad (b2 = 0.99, as there) and `js.Preconditioned(b1=0.9)` (momentum in the
  searched direction).
- Two hand-written SLS loops in plain JAX, transcribed from the papers as the authors'
  code runs them: f and its gradient at the step's start, then trials that evaluate f
  alone (`value-only`). "SGD + Armijo" is the algorithm of `SLS + Gradient` at the reference's
  cost; the same loop whose trials also compute the gradient (`value-and-gradient`, as
  jaxsearch's engine evaluates every trial) measures what value-only trials would save.
  "AdaSLS, momentum 0.9" searches along -D^-1 g and moves along -D^-1 m_hat (the authors'
  momentum, which jaxsearch's steps do not offer: each ends at a point its search evaluated).

Per method: the training loss (whole training set) and test accuracy after each epoch, mean
and standard deviation over the seeds; evaluations of f per step over all epochs (value and
gradient together count as one, as in `num_fun_evals`; a value-only trial counts as one
too); and the wall time of one epoch, compile excluded: the second epoch of the first seed,
from the same state each time, the least over `--rounds` rounds in which the methods take
turns (so that a busy machine slows them alike). Also the wall of one value-and-gradient and
of one value on a batch.

    python -m benchmarks.suite.stochastic  # about 4 minutes on 2 CPU cores
    python -m benchmarks.suite.stochastic --seeds 0 1 2 3 4 --epochs 20
    python -m benchmarks.suite.stochastic --tables benchmarks/results/stochastic.json

Writes benchmarks/results/stochastic_<backend>.json and .md (the tables of docs/benchmarks.md,
which it prints).
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
from jax import lax

import jaxsearch as js
from benchmarks import output

DIM, CLASSES, SEPARATION = 20, 10, 1.2
SIZES = (DIM, 64, 64, CLASSES)
NUM_TRAIN, NUM_TEST = 4096, 1024
SGD_RATES = (0.1, 0.3, 1.0, 3.0, 10.0)
ADAM_RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
SHOWN_EPOCHS = (1, 2, 5, 10, 20)


def mixture(seed: int = 0):
    """Ten classes of two Gaussian clusters each; (x_train, y_train, x_test, y_test)."""
    rng = np.random.default_rng(seed)
    num = NUM_TRAIN + NUM_TEST
    centres = rng.normal(size=(CLASSES, 2, DIM)) * SEPARATION
    y = rng.integers(0, CLASSES, num)
    x = centres[y, rng.integers(0, 2, num)] + rng.normal(size=(num, DIM))
    x, y = x.astype(np.float32), y.astype(np.int32)
    return x[:NUM_TRAIN], y[:NUM_TRAIN], x[NUM_TRAIN:], y[NUM_TRAIN:]


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
    batch index."""
    rng = np.random.default_rng(seed)
    num = x.shape[0] // batch
    out = []
    for _ in range(epochs):
        idx = rng.permutation(x.shape[0])[: num * batch].reshape(num, batch)
        out.append((jnp.asarray(x[idx]), jnp.asarray(y[idx])))
    return out


def tree_axpy(t, d, x):
    """x + t d, leaf by leaf."""
    return jax.tree.map(lambda a, b: a + t * b, x, d)


def tree_vdot(a, b):
    return sum(jnp.vdot(u, v) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


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

        (params, opt_state), _ = lax.scan(body, (params, opt_state), (xs, ys))
        return params, opt_state, jnp.asarray(xs.shape[0], jnp.int32)

    return run


def sls_epoch(solver: js.Solver):
    """A jitted epoch of jaxsearch steps, each on its own batch (`StochasticArmijo` evaluates
    f and its gradient on the step's batch first)."""

    @eqx.filter_jit
    def run(params, state, xs, ys):
        evals = state.num_fun_evals

        def body(carry, batch):
            return solver.step(loss, *carry, *batch), None

        (params, state), _ = lax.scan(body, (params, state), (xs, ys))
        return params, state, state.num_fun_evals - evals

    return run


def reference_epoch(batches_per_epoch: int, *, momentum=None, trial_grads=False):
    """A jitted epoch of SLS written out in JAX from Vaswani et al. 2019 (algorithms 1 and 2,
    c = 0.1, beta = 0.9, gamma = 2, 100 trials, first step 1) as the authors' code runs it:
    f and its gradient at the step's start, then trials of f alone (with `trial_grads`, of f
    and its gradient, the gradient folded into the test so that it is computed). With
    `momentum`, AdaSLS of Vaswani et al. 2020 (Adam's preconditioner, b2 = 0.999, eps 1e-8):
    the search along -D^-1 g with the Armijo test in the D^-1 norm, the step along
    -D^-1 m_hat. A search that fails moves by 1e-6 along the step's direction, as theirs."""
    growth = 2.0 ** (1.0 / batches_per_epoch)
    b2 = 0.999

    def trial_value(params, batch):
        if not trial_grads:
            return loss(params, *batch)
        value, grad = jax.value_and_grad(loss)(params, *batch)
        return jnp.where(jnp.isfinite(tree_vdot(grad, grad)), value, jnp.inf)

    @jax.jit
    def run(params, state, xs, ys):
        def body(carry, batch):
            params, (step, mu, nu, k), evals = carry
            k = k + 1
            value, grad = jax.value_and_grad(loss)(params, *batch)
            if momentum is None:
                d = u = jax.tree.map(jnp.negative, grad)
            else:
                nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grad)
                mu = jax.tree.map(lambda m, g: momentum * m + (1 - momentum) * g, mu, grad)
                scale = jax.tree.map(lambda v: jnp.sqrt(v / (1 - b2**k)) + 1e-8, nu)
                d = jax.tree.map(lambda g, s: -g / s, grad, scale)
                u = jax.tree.map(lambda m, s: -m / (1 - momentum**k) / s, mu, scale)
            slope = tree_vdot(grad, d)
            step = jnp.where(k > 1, step * growth, step)

            def untested(search):
                return (~search[2]) & (search[1] < 100)

            def trial(search):
                t, tried, _ = search
                passes = trial_value(tree_axpy(t, d, params), batch) <= value + 0.1 * t * slope
                return jnp.where(passes, t, 0.9 * t), tried + 1, passes

            step, tried, found = lax.while_loop(untested, trial, (step, 0, False))
            params = tree_axpy(jnp.where(found, step, 1e-6), u, params)
            if momentum is not None:  # AdaSLS carries 1e-6 after a failure, SLS the shrunk step
                step = jnp.where(found, step, 1e-6)
            return (params, (step, mu, nu, k), evals + 1 + tried), None

        (params, state, evals), _ = lax.scan(body, (params, state, 0), (xs, ys))
        return params, state, evals

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return (jnp.float32(1.0), zeros, zeros, jnp.int32(0))

    return init, run


# ------------------------------------------------------------------------------ the trials


def train(init, epoch_fn, params, epochs_data, data):
    """Train over `epochs_data`; per epoch the training loss, test accuracy and evaluations,
    and (params, state) after the first epoch."""
    x_train, y_train, x_test, y_test = data
    state = init(params)
    rows, after_first = dict(train_loss=[], test_accuracy=[], evals=[]), None
    for xs, ys in epochs_data:
        params, state, evals = epoch_fn(params, state, xs, ys)
        after_first = (params, state) if after_first is None else after_first
        rows["train_loss"].append(float(f"{float(loss(params, x_train, y_train)):.6g}"))
        rows["test_accuracy"].append(float(f"{float(accuracy(params, x_test, y_test)):.6g}"))
        rows["evals"].append(int(evals))
    return rows, after_first


def epoch_walls(methods, starts, batches, rounds: int):
    """The least wall of one epoch (`batches`) of each method from its `starts` entry, over
    `rounds` rounds in which the methods take turns (compiled before the first round)."""
    walls = dict.fromkeys(methods, float("inf"))
    for r in range(rounds + 1):
        for name, m in methods.items():
            start = time.perf_counter()
            jax.block_until_ready(m["epoch"](*starts[name], *batches))
            if r > 0:  # round 0 compiled
                walls[name] = min(walls[name], time.perf_counter() - start)
    return walls


def evaluation_walls(batch, repeats: int = 200):
    """The least wall over `repeats` calls of f and its gradient, and of f, on one batch."""
    params = init_mlp(0)
    walls = {}
    for name, fn in (
        ("value_and_grad", jax.jit(jax.value_and_grad(loss))),
        ("value", jax.jit(loss)),
    ):
        jax.block_until_ready(fn(params, *batch))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn(params, *batch))
            best = min(best, time.perf_counter() - start)
        walls[name] = best
    return walls


def summary(runs, name):
    """Mean and standard deviation over the seeds of each epoch's loss and accuracy, and the
    evaluations per step (all epochs)."""
    seeds = runs[name]["seeds"]
    losses = np.array([s["train_loss"] for s in seeds])
    accs = np.array([s["test_accuracy"] for s in seeds])
    evals = np.array([s["evals"] for s in seeds])
    steps = runs[name]["steps_per_epoch"]

    def rounded(values):
        return [float(f"{v:.4g}") for v in values]

    return dict(
        loss_mean=rounded(losses.mean(0)),
        loss_std=rounded(losses.std(0)),
        accuracy_mean=rounded(accs.mean(0)),
        accuracy_std=rounded(accs.std(0)),
        evals_per_step=float(evals.sum() / (evals.size * steps)),
    )


def cpu_model() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def mean_std(mean: float, std: float) -> str:
    """`mean ± std` with two significant digits for losses far below 1."""
    if abs(mean) >= 0.01:
        return f"{mean:.3f} ± {std:.3f}"
    return f"{mean:.1e} ± {std:.0e}"


def tables(meta, runs) -> str:
    """The tables of docs/benchmarks.md from a results file's `meta` and `runs`."""
    lines = []
    last, shown = meta["epochs"] - 1, meta["shown"]
    lines.append(f"\nAfter {meta['epochs']} epochs, mean ± std over seeds {meta['seeds']}:\n")
    lines.append("| method | training loss | test accuracy | evaluations per step | ms per epoch |")
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    for name in shown:
        s = runs[name]["summary"]
        lines.append(
            f"| {name} | {mean_std(s['loss_mean'][last], s['loss_std'][last])} | "
            f"{s['accuracy_mean'][last]:.3f} ± {s['accuracy_std'][last]:.3f} | "
            f"{s['evals_per_step']:.2f} | {s['epoch_wall'] * 1e3:.1f} |"
        )
    epochs_shown = [e for e in SHOWN_EPOCHS if e <= meta["epochs"]]
    lines.append("\nTraining loss after each epoch, mean ± std over the seeds:\n")
    lines.append("| method | " + " | ".join(f"epoch {e}" for e in epochs_shown) + " |")
    lines.append("| --- |" + " ---: |" * len(epochs_shown))
    for name in shown:
        s = runs[name]["summary"]
        cells = [mean_std(s["loss_mean"][e - 1], s["loss_std"][e - 1]) for e in epochs_shown]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    walls = meta["evaluation_walls"]
    lines.append(
        f"\nOne batch of {meta['batch']}: value and gradient "
        f"{walls['value_and_grad'] * 1e6:.0f} us, value {walls['value'] * 1e6:.0f} us"
    )
    for family in ("optax.sgd", "optax.adam"):
        rates = [k for k, v in runs.items() if v["family"] == family]
        finals = (f"{runs[k]['lr']:g}: {runs[k]['summary']['loss_mean'][last]:.3g}" for k in rates)
        lines.append(f"{family} sweep, final training loss: " + ", ".join(finals))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=15, help="timing rounds (least wall kept)")
    p.add_argument("--out", default=str(output.RESULTS), help="output directory")
    p.add_argument("--tables", metavar="JSON", help="print the tables of a results file and exit")
    args = p.parse_args(argv)
    if args.tables:
        results = json.loads(pathlib.Path(args.tables).read_text())
        print(tables(results["meta"], results["runs"]))
        return

    data = mixture(0)
    x_train, y_train = data[0], data[1]
    batches_per_epoch = NUM_TRAIN // args.batch

    methods = {}
    for family, make, rates in (
        ("optax.sgd", optax.sgd, SGD_RATES),
        ("optax.adam", optax.adam, ADAM_RATES),
    ):
        for lr in rates:
            opt = make(lr)
            methods[f"{family}(lr={lr:g})"] = dict(
                family=family, lr=lr, init=opt.init, epoch=optax_epoch(opt)
            )
    directions = {
        "SLS + Gradient": js.Gradient(),
        "SLS + Preconditioned": js.Preconditioned(),
        "SLS + AMSGrad (b2 0.99)": js.Preconditioned(b2=0.99, amsgrad=True),
        "SLS + Preconditioned(b1=0.9)": js.Preconditioned(b1=0.9),
    }
    for name, direction in directions.items():
        search = js.StochasticArmijo(batches_per_epoch=batches_per_epoch)
        solver = js.Solver(direction, search)

        def init(params, solver=solver):
            return solver.init(params, value_dtype=jnp.float32)

        methods[name] = dict(family="jaxsearch", lr=None, init=init, epoch=sls_epoch(solver))
    hand_written = {
        "SGD + Armijo, value-only trials": dict(),
        "SGD + Armijo, value-and-gradient trials": dict(trial_grads=True),
        "AdaSLS, momentum 0.9, value-only trials": dict(momentum=0.9),
    }
    for name, options in hand_written.items():
        init, epoch = reference_epoch(batches_per_epoch, **options)
        methods[name] = dict(family="hand-written", lr=None, init=init, epoch=epoch)

    runs = {
        name: dict(family=m["family"], lr=m["lr"], steps_per_epoch=batches_per_epoch, seeds=[])
        for name, m in methods.items()
    }
    starts, timed_batches = {}, None
    for seed in args.seeds:
        params = init_mlp(100 + seed)
        epochs_data = epoch_batches(x_train, y_train, args.batch, args.epochs, 200 + seed)
        for name, m in methods.items():
            rows, after_first = train(m["init"], m["epoch"], params, epochs_data, data)
            runs[name]["seeds"].append(dict(seed=seed, **rows))
            print(f"seed {seed} {name}: loss {rows['train_loss'][-1]:.4g}", flush=True)
            if seed == args.seeds[0]:
                starts[name] = after_first
        if seed == args.seeds[0]:
            timed_batches = epochs_data[1 % len(epochs_data)]
    print(f"timing: an epoch, {args.rounds} rounds", flush=True)
    walls = epoch_walls(methods, starts, timed_batches, args.rounds)

    for name in runs:
        runs[name]["summary"] = summary(runs, name)
        runs[name]["summary"]["epoch_wall"] = walls[name]
    best = {}
    for family in ("optax.sgd", "optax.adam"):
        candidates = [k for k, v in runs.items() if v["family"] == family]
        best[family] = min(candidates, key=lambda k: runs[k]["summary"]["loss_mean"][-1])
    batch = (jnp.asarray(x_train[: args.batch]), jnp.asarray(y_train[: args.batch]))
    evaluation = evaluation_walls(batch)
    shown = [best["optax.sgd"], best["optax.adam"], *directions, *hand_written]
    meta = dict(
        task=(
            f"10 classes x 2 Gaussian clusters in {DIM}-d (separation {SEPARATION}), "
            f"{NUM_TRAIN} train / {NUM_TEST} test, MLP 20-64-64-10 tanh"
        ),
        command=" ".join(
            ["python -m benchmarks.suite.stochastic", *(sys.argv[1:] if argv is None else argv)]
        ),
        batch=args.batch,
        epochs=args.epochs,
        batches_per_epoch=batches_per_epoch,
        seeds=args.seeds,
        sgd_rates=SGD_RATES,
        adam_rates=ADAM_RATES,
        best=best,
        shown=shown,
        evaluation_walls=evaluation,
        timing=f"epoch 2 of seed {args.seeds[0]}, least of {args.rounds} interleaved rounds",
        jax=jax.__version__,
        optax=optax.__version__,
        machine=platform.platform(),
        cpu=cpu_model(),
    )
    text = tables(meta, runs)
    md, _ = output.write(
        args.out, output.stem("stochastic"), text + "\n", dict(meta=meta, runs=runs), True
    )
    print(text)
    print(f"wrote {md} and .json")


if __name__ == "__main__":
    main()

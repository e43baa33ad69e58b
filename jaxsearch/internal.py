"""The author's kit: what a new direction, line search or initial-step rule is built from.

`import jaxsearch as js` holds what a user runs (solvers, methods, results, statuses, the
abstract classes to subclass); this module holds the pieces those subclasses use inside
their methods, documented in docs/extending.md:

- a line search's state and its helpers: `SearchState` (the fields the solver reads),
  `capped_start` and `search_cap` (the cap and first-trial rules), `after_trial` (the fields
  after a judged trial), `end_on_best` and `trials_before_fallback` (the best-point fallback),
  `at_binding_cap` (acceptance at a dynamic cap), `sufficient_decrease` and `ValueScale`
  (Armijo's test with Hager & Zhang's rounding allowance);
- what a direction is handed and uses: `DirectionInfo`, `no_limit` (no limit on the step),
  `run_loop` (a fixed-trip loop that vmap and reverse mode accept), `flatten_tree` and
  `unflatten_tree` (a pytree as one vector and back);
- what an initial-step rule is handed: `InitialStepInfo`.

Until the next release each of these is also reachable as `jaxsearch.<name>`, with a
`DeprecationWarning`.
"""

from ._direction import (
    DirectionInfo as DirectionInfo,
    flatten_tree as flatten_tree,
    no_limit as no_limit,
    run_loop as run_loop,
    unflatten_tree as unflatten_tree,
)
from ._linesearch import (
    InitialStepInfo as InitialStepInfo,
    SearchState as SearchState,
    ValueScale as ValueScale,
    after_trial as after_trial,
    at_binding_cap as at_binding_cap,
    capped_start as capped_start,
    end_on_best as end_on_best,
    search_cap as search_cap,
    sufficient_decrease as sufficient_decrease,
    trials_before_fallback as trials_before_fallback,
)

KIT = (
    "DirectionInfo",
    "InitialStepInfo",
    "SearchState",
    "ValueScale",
    "after_trial",
    "at_binding_cap",
    "capped_start",
    "end_on_best",
    "flatten_tree",
    "no_limit",
    "run_loop",
    "search_cap",
    "sufficient_decrease",
    "trials_before_fallback",
    "unflatten_tree",
)

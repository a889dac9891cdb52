"""The surrogate's best mixture under the constraints a full run imposes, with an interval.

The feasible set is a polytope: each phase on the simplex; a per-component epoch cap over the whole planned
run, sum_p w[p, c] * phase_tokens[p] <= epoch_cap * available_tokens[c]; minimum and maximum shares; and
optionally a total-variation distance to the prior per phase. Mixture reuse (Olmix) keeps the components
marked `fixed` at the prior's relative weights as one virtual domain whose total share is optimised with
the others. Every constraint is linear in one set of variables, so:
- the log-linear surrogate's optimum is exact: exp of a linear function is least where the linear function
  is, a linear programme that HiGHS (scipy.optimize.linprog) solves at any size;
- any other surrogate (LightGBM's trees are piecewise constant: no gradient for SLSQP to follow) is searched
  over convex combinations of feasible points (the prior, given starts such as the best observed rows,
  RegMix draws around the prior and random vertices, each made feasible by an L1-nearest linear programme),
  then refined around the best; a convex combination of feasible points is feasible, so no candidate ever
  breaks a constraint.
The interval is the prediction plus and minus the out-of-fold RMSE times the normal quantile at `LEVEL`:
the error one out-of-fold prediction made on the swarm's own rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog
from scipy.stats import norm

from millrace.errors import ConfigError
from trainer.search.sampling import check_prior, sample_mixtures
from trainer.search.surrogate import FitQuality, LogLinear, Surrogate

LEVEL = 0.95
CAP_SLACK = 1e-6  # the cap is solved a millionth tighter, so rounding the weights for a revision stays under it
TOLERANCE = 1e-9  # what `violations` forgives: float rounding of a solved mixture
CANDIDATES = 2048
REFINE_ROUNDS = 4


@dataclass(frozen=True)
class Constraints:
    """What a full run allows a mixture to be."""

    phase_tokens: np.ndarray  # (phases,) tokens each phase of the planned (full) run trains
    available_tokens: np.ndarray  # (components,) tokens each component holds
    epoch_cap: float = 8.0  # sum_p w[p,c] * phase_tokens[p] <= epoch_cap * available_tokens[c]
    min_share: float = 0.0
    max_share: float = 1.0
    prior: np.ndarray | None = None
    max_distance: float | None = None  # optional closeness to the prior: total variation per phase, in [0, 1]

    def __post_init__(self) -> None:
        phase = np.asarray(self.phase_tokens, dtype=float)
        available = np.asarray(self.available_tokens, dtype=float)
        if phase.ndim != 1 or phase.size == 0 or not np.isfinite(phase).all() or (phase <= 0).any():
            raise ConfigError(f"phase_tokens: expected one positive token count per phase, got {phase.tolist()}")
        if available.ndim != 1 or available.size == 0 or not np.isfinite(available).all() or (available < 0).any():
            raise ConfigError("available_tokens: expected one non-negative token count per component")
        if not (np.isfinite(self.epoch_cap) and self.epoch_cap > 0):
            raise ConfigError(f"epoch_cap: must be positive, got {self.epoch_cap}")
        if not 0.0 <= self.min_share <= self.max_share <= 1.0:
            raise ConfigError(
                f"min_share, max_share: need 0 <= min <= max <= 1, got {self.min_share}, {self.max_share}"
            )
        object.__setattr__(self, "phase_tokens", phase)
        object.__setattr__(self, "available_tokens", available)
        if self.prior is not None:
            prior = check_prior(self.prior)
            if prior.shape != (phase.size, available.size):
                raise ConfigError(f"prior: expected shape {(phase.size, available.size)}, got {prior.shape}")
            object.__setattr__(self, "prior", prior)
        if self.max_distance is not None:
            if self.prior is None:
                raise ConfigError("max_distance: a closeness to the prior needs a prior")
            if not 0.0 <= self.max_distance <= 1.0:
                raise ConfigError(f"max_distance: a total-variation distance lies in [0, 1], got {self.max_distance}")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.phase_tokens.size, self.available_tokens.size)


@dataclass(frozen=True)
class Proposal:
    weights: np.ndarray  # (phases, components)
    predicted: float
    interval: tuple[float, float]  # at LEVEL, from the out-of-fold RMSE
    prior_predicted: float | None


def max_weights(constraints: Constraints) -> np.ndarray:
    """(phases, components) per-phase upper bounds under which every mixture meets the joint epoch cap: each
    phase may spend the cap in proportion to its tokens (sum_p bound * tokens_p = cap * available)."""
    per_phase = constraints.epoch_cap * constraints.available_tokens / constraints.phase_tokens.sum()
    return np.tile(np.minimum(per_phase, constraints.max_share), (constraints.shape[0], 1))


def violations(weights: np.ndarray, constraints: Constraints, fixed: np.ndarray | None = None) -> list[str]:
    """Each constraint `weights` breaks, in words (empty when it meets them all)."""
    w = np.asarray(weights, dtype=float)
    found: list[str] = []
    if w.shape != constraints.shape:
        return [f"shape {w.shape}, expected {constraints.shape}"]
    for p, total in enumerate(w.sum(axis=1)):
        if abs(total - 1.0) > TOLERANCE * w.shape[1]:
            found.append(f"phase {p} sums to {total:.12g}")
    spent = constraints.phase_tokens @ w
    allowed = constraints.epoch_cap * constraints.available_tokens
    found += [
        f"component {c} over the epoch cap" for c in np.flatnonzero(spent > allowed * (1 + TOLERANCE) + TOLERANCE)
    ]
    found += [f"weight {tuple(i)} below min_share" for i in np.argwhere(w < constraints.min_share - TOLERANCE)]
    found += [f"weight {tuple(i)} above max_share" for i in np.argwhere(w > constraints.max_share + TOLERANCE)]
    if constraints.max_distance is not None and constraints.prior is not None:
        distance = 0.5 * np.abs(w - constraints.prior).sum(axis=1)
        found += [
            f"phase {p} is {d:.6g} from the prior"
            for p, d in enumerate(distance)
            if d > constraints.max_distance + 1e-7
        ]
    if fixed is not None and constraints.prior is not None:
        found += _reuse_violations(w, constraints.prior, np.asarray(fixed, dtype=bool))
    return found


def _reuse_violations(w: np.ndarray, prior: np.ndarray, fixed: np.ndarray) -> list[str]:
    """Fixed components must keep the prior's relative weights within each phase."""
    found = []
    for p in range(w.shape[0]):
        group, base = w[p, fixed[p]], prior[p, fixed[p]]
        if group.size and base.sum() > 0 and np.abs(group - base / base.sum() * group.sum()).max() > 1e-7:
            found.append(f"phase {p}: fixed components left the prior's relative weights")
    return found


class _Polytope:
    """The feasible mixtures as linear constraints on variables z, with mixtures x = basis @ z: one variable
    per free component and phase, plus one per phase for the fixed components' virtual domain."""

    def __init__(self, constraints: Constraints, fixed: np.ndarray) -> None:
        self.constraints, self.shape = constraints, constraints.shape
        self.basis = _basis(constraints, fixed)
        phases, components = self.shape
        cells = phases * components
        total = constraints.phase_tokens.sum()
        spend = sparse.hstack(
            [sparse.diags(np.full(components, tokens / total)) for tokens in constraints.phase_tokens]
        )
        allowed = constraints.epoch_cap * constraints.available_tokens / total * (1 - CAP_SLACK)
        rows, bounds = [spend @ self.basis], [allowed]
        if constraints.max_share < 1.0:
            rows.append(self.basis)
            bounds.append(np.full(cells, constraints.max_share))
        if constraints.min_share > 0.0:
            rows.append(-self.basis)
            bounds.append(np.full(cells, -constraints.min_share))
        self.upper = (sparse.vstack(rows).tocsr(), np.concatenate(bounds))
        sums = sparse.kron(sparse.eye(phases), np.ones((1, components)))
        self.equal = ((sums @ self.basis).tocsr(), np.ones(phases))

    def solve(self, cost: np.ndarray | None = None, target: np.ndarray | None = None) -> np.ndarray:
        """The feasible mixture least in `cost` (phases, components), or the one nearest `target` in L1."""
        blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (variables' coefficient in x, cost) per L1 pair
        prior = self.constraints.prior
        if self.constraints.max_distance is not None and prior is not None:
            blocks.append((prior.ravel(), np.zeros(prior.size)))
        if target is not None:
            blocks.append((np.asarray(target, dtype=float).ravel(), np.ones(target.size)))
        a_ub, b_ub, a_eq, b_eq, c = self._system(blocks, cost)
        # scipy-stubs type A_ub and A_eq as dense arrays; HiGHS takes sparse ones, as scipy's docs say
        result = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")  # type: ignore[call-overload]
        if result.status == 2:
            raise ConfigError(_infeasible(self.constraints))
        if result.status != 0:
            raise ConfigError(f"propose: the linear programme did not solve ({result.message})")
        mixture = np.clip(self.basis @ result.x[: self.basis.shape[1]], 0.0, None).reshape(self.shape)
        shares: np.ndarray = mixture / mixture.sum(axis=1, keepdims=True)
        return shares

    def _system(
        self, blocks: list[tuple[np.ndarray, np.ndarray]], cost: np.ndarray | None
    ) -> tuple[sparse.csr_matrix, np.ndarray, sparse.csr_matrix, np.ndarray, np.ndarray]:
        """Variables [z, (plus, minus) per block]: x - point = plus - minus, so sum(plus + minus) is the L1
        distance to the block's point; the closeness block bounds it, the target block minimises it."""
        nz, cells, phases = self.basis.shape[1], self.shape[0] * self.shape[1], self.shape[0]
        width = nz + 2 * cells * len(blocks)
        a_ub, b_ub = (
            sparse.hstack([self.upper[0], sparse.csr_matrix((self.upper[0].shape[0], width - nz))]),
            self.upper[1],
        )
        eq_rows, eq_bounds = [sparse.hstack([self.equal[0], sparse.csr_matrix((phases, width - nz))])], [self.equal[1]]
        c = np.zeros(width)
        c[:nz] = 0.0 if cost is None else self.basis.T @ np.asarray(cost, dtype=float).ravel()
        for k, (point, weight) in enumerate(blocks):
            start = nz + 2 * cells * k
            split = sparse.hstack([-sparse.eye(cells), sparse.eye(cells)])
            eq_rows.append(
                sparse.hstack(
                    [
                        self.basis,
                        sparse.csr_matrix((cells, start - nz)),
                        split,
                        sparse.csr_matrix((cells, width - start - 2 * cells)),
                    ]
                )
            )
            eq_bounds.append(point)
            c[start : start + 2 * cells] = np.tile(weight, 2)
        if self.constraints.max_distance is not None and blocks and self.constraints.prior is not None:
            per_phase = sparse.kron(sparse.eye(phases), np.ones((1, self.shape[1])))
            distance = sparse.hstack(
                [
                    sparse.csr_matrix((phases, nz)),
                    per_phase,
                    per_phase,
                    sparse.csr_matrix((phases, width - nz - 2 * cells)),
                ]
            )
            a_ub = sparse.vstack([a_ub, distance])
            b_ub = np.concatenate([b_ub, np.full(phases, 2 * self.constraints.max_distance)])
        return a_ub.tocsr(), b_ub, sparse.vstack(eq_rows).tocsr(), np.concatenate(eq_bounds), c


def _basis(constraints: Constraints, fixed: np.ndarray) -> sparse.csr_matrix:
    """(phases * components, variables): a free component is its own variable; a phase's fixed components
    are one variable (the virtual domain's share) spread in the prior's relative weights."""
    phases, components = constraints.shape
    rows, cols, values, column = [], [], [], 0
    for p in range(phases):
        for c in np.flatnonzero(~fixed[p]):
            rows.append(p * components + c)
            cols.append(column)
            values.append(1.0)
            column += 1
        if fixed[p].any() and constraints.prior is not None and constraints.prior[p, fixed[p]].sum() > 0:
            group = np.flatnonzero(fixed[p])
            relative = constraints.prior[p, group] / constraints.prior[p, group].sum()
            rows += [p * components + c for c in group]
            cols += [column] * group.size
            values += relative.tolist()
            column += 1
    return sparse.csr_matrix((values, (rows, cols)), shape=(phases * components, column))


def _infeasible(constraints: Constraints) -> str:
    capacity = constraints.epoch_cap * constraints.available_tokens.sum()
    return (
        f"constraints: no mixture meets them (epoch cap {constraints.epoch_cap:g} over "
        f"{constraints.phase_tokens.sum():,.0f} planned tokens, {capacity:,.0f} tokens of capacity in all; shares "
        f"[{constraints.min_share:g}, {constraints.max_share:g}]; distance to the prior <= {constraints.max_distance})"
    )


def _check_fixed(fixed: np.ndarray | None, constraints: Constraints) -> np.ndarray:
    if fixed is None:
        return np.zeros(constraints.shape, dtype=bool)
    mask = np.asarray(fixed)
    if mask.shape != constraints.shape or mask.dtype != bool:
        raise ConfigError(f"fixed: expected a {constraints.shape} boolean mask, got {mask.dtype} {mask.shape}")
    if mask.any() and constraints.prior is None:
        raise ConfigError("fixed: mixture reuse keeps fixed components at the prior's weights, so it needs a prior")
    return mask


def _anchors(
    surrogate: Surrogate, polytope: _Polytope, starts: np.ndarray | None, rng: np.random.Generator
) -> np.ndarray:
    """Feasible points to search between: the log-linear optimum (exact), the prior's and each start's nearest
    feasible mixture, RegMix draws around the prior made feasible, and random vertices of the polytope."""
    constraints = polytope.constraints
    found = []
    if isinstance(surrogate, LogLinear):
        found.append(polytope.solve(cost=surrogate.coefficients))
    centre = constraints.prior
    if centre is None:
        usable = (constraints.available_tokens > 0).astype(float)
        centre = np.tile(usable / usable.sum(), (constraints.shape[0], 1))
    else:
        found.append(polytope.solve(target=centre))
    points = [] if starts is None else list(np.asarray(starts, dtype=float).reshape(-1, *constraints.shape))
    points += list(sample_mixtures(centre, 8, int(rng.integers(2**31))))
    found += [polytope.solve(target=point) for point in points]
    found += [polytope.solve(cost=rng.standard_normal(constraints.shape)) for _ in range(8)]
    return np.stack(found)


def _search(surrogate: Surrogate, anchors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The best predicted convex combination of the anchors, refined by shrinking steps around the best."""
    flat = anchors.reshape(len(anchors), -1)
    mixes = rng.dirichlet(np.full(len(anchors), 0.5), size=CANDIDATES) @ flat
    candidates = np.concatenate([flat, mixes])
    scores = surrogate.predict(candidates.reshape(-1, *anchors.shape[1:]))
    best, best_score = candidates[int(np.argmin(scores))], float(scores.min())
    for round_ in range(REFINE_ROUNDS):
        toward = rng.dirichlet(np.full(len(anchors), 0.5), size=CANDIDATES // 4) @ flat
        steps = rng.uniform(0.0, 0.5 ** (round_ + 1), size=(len(toward), 1))
        local = best + steps * (toward - best)
        scores = surrogate.predict(local.reshape(-1, *anchors.shape[1:]))
        if scores.min() < best_score:
            best, best_score = local[int(np.argmin(scores))], float(scores.min())
    proposal: np.ndarray = best.reshape(anchors.shape[1:])
    return proposal


def propose(
    surrogate: Surrogate,
    constraints: Constraints,
    quality: FitQuality,
    seed: int = 0,
    fixed: np.ndarray | None = None,
    *,
    starts: np.ndarray | None = None,
) -> Proposal:
    """The mixture the surrogate predicts best under `constraints`; `fixed` (phases, components) marks the
    components mixture reuse keeps at the prior's relative weights; `starts` (k, phases, components), such as
    the best observed rows, are searched from as well."""
    if quality.kind != surrogate.kind:
        raise ConfigError(f"quality: measured for a {quality.kind} surrogate, not this {surrogate.kind} one")
    coefficients = getattr(surrogate, "coefficients", None)
    if coefficients is not None and np.shape(coefficients) != constraints.shape:
        raise ConfigError(
            f"surrogate: fitted on {np.shape(coefficients)} weights, constraints are {constraints.shape}"
        )
    rng = np.random.default_rng(seed)
    polytope = _Polytope(constraints, _check_fixed(fixed, constraints))
    weights = _search(surrogate, _anchors(surrogate, polytope, starts, rng), rng)
    weights = np.clip(weights, 0.0, None)
    weights /= weights.sum(axis=1, keepdims=True)
    predicted = float(surrogate.predict(weights[None])[0])
    half = float(norm.ppf(0.5 + LEVEL / 2)) * quality.rmse
    prior = constraints.prior
    prior_predicted = None if prior is None else float(surrogate.predict(prior[None])[0])
    return Proposal(weights, predicted, (predicted - half, predicted + half), prior_predicted)

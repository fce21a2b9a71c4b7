"""Spatial discretisation of a 2-D or 3-D convection-diffusion-reaction PDE on a tensor grid.

The PDE, in time to maturity ``tau`` (solved forward in tau from the payoff at tau = 0)::

    u_tau = sum_i a_i u_{x_i x_i} + sum_{i<j} b_ij u_{x_i x_j} + sum_i c_i u_{x_i} - r u

with coefficients ``a_i, b_ij, c_i, r`` given as functions of the coordinates and tau.

Finite differences (in 't Hout & Foulon 2010, §2.2, the second-order schemes on non-uniform
grids; ``h_i = x_i - x_{i-1}``):

* first derivative, interior: central, weights on (i-1, i, i+1)
  ``(-h_{i+1}/(h_i(h_i+h_{i+1})), (h_{i+1}-h_i)/(h_i h_{i+1}), h_i/(h_{i+1}(h_i+h_{i+1})))``;
  on a boundary node: the one-sided three-point (second-order) forward / backward formula;
* second derivative, interior: central
  ``(2/(h_i(h_i+h_{i+1})), -2/(h_i h_{i+1}), 2/(h_{i+1}(h_i+h_{i+1})))``;
* mixed derivative: the product of the first-derivative schemes in the two directions (a
  nine-point stencil, one-sided in a direction on that direction's boundary).

Boundary conditions, per side of each axis (:class:`BC`):

* ``"dirichlet"``: ``u = g(x, tau)`` on the face. The face nodes are not unknowns: every
  operator row there is zero and each implicit stage sets them to ``g(tau_n)``.
* ``"neumann"``: ``u_x = g(x, tau)``. Second derivative from a mirrored ghost node
  (``u_{n} = u_{n-2} + 2 h g``), first derivative replaced by ``g``; the data enter as a source
  ``(±2a/h + c) g`` (in 't Hout & Foulon 2010, §2.2, the condition at ``s = S``).
* ``"linear"`` (alias ``"pde"``): no condition is imposed; the PDE is discretised with the
  second derivative normal to the face dropped (zero curvature) and the first derivative taken
  one-sided. This is exact where the diffusion coefficient vanishes, as at ``v = 0`` in the
  Heston model (in 't Hout & Foulon 2010, §2.2), and the usual "linearity" condition elsewhere.

Every directional operator row ``i`` is stored as three weights on nodes ``b(i), b(i)+1,
b(i)+2`` with ``b(i) = min(max(i-1, 0), n-3)``: the central stencil inside, the one-sided one on
the boundary. A one-sided row has one entry outside the tridiagonal band, which the line solver
eliminates with the neighbouring row (so every implicit system is still solved by Thomas).

The reaction term ``-r u`` is split between the directional operators (``reaction_split``,
equal shares by default, as in in 't Hout & Foulon 2010, §2.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

BC_KINDS = ("dirichlet", "neumann", "linear")
_BC_ALIASES = {"pde": "linear", "free": "linear", "none": "linear", "linearity": "linear"}

#: Coefficient: a scalar, an array broadcastable to the grid, or ``f(x1, x2, [x3], tau)`` taking
#: open-mesh coordinate arrays (shapes (n1,1[,1]), (1,n2[,1]), ...) and returning an array
#: broadcastable to the grid.
Coef = Any


@dataclass(frozen=True)
class BC:
    """A boundary condition on one side of one axis.

    Attributes:
        kind: ``"dirichlet"`` (u = value), ``"neumann"`` (du/dx = value) or ``"linear"`` (no
            condition: the PDE with zero normal curvature and a one-sided first derivative).
        value: for dirichlet/neumann, a scalar or ``g(x1, x2, [x3], tau)`` on open-mesh face
            coordinates (the axis of the face is a length-1 array holding the face coordinate).
    """

    kind: str = "linear"
    value: Coef = 0.0

    def __post_init__(self) -> None:
        k = _BC_ALIASES.get(str(self.kind).lower(), str(self.kind).lower())
        if k not in BC_KINDS:
            raise ValueError(f"unknown boundary condition {self.kind!r}; expected one of {BC_KINDS}")
        object.__setattr__(self, "kind", k)


@dataclass
class PDE:
    """A 2-D or 3-D pricing PDE in time to maturity (see the module docstring).

    Attributes:
        axes: 2 or 3 strictly increasing 1-D float64 grids, each of >= 5 nodes.
        diffusion: ``a_i``, one coefficient per axis (term ``a_i u_{x_i x_i}``).
        convection: ``c_i``, one per axis (term ``c_i u_{x_i}``).
        mixed: ``{(i, j): b_ij}`` for ``i < j`` (term ``b_ij u_{x_i x_j}``); missing pairs are 0.
        reaction: ``r`` (term ``-r u``).
        bcs: per axis, ``(lower, upper)`` :class:`BC`.
        time_dependent: whether coefficients depend on tau: False, True (all of them), or the
            collection of terms that do: ``"reaction"``, ``("diffusion", d)``,
            ``("convection", d)``, ``("mixed", (i, j))`` (only those are re-assembled per level).
            Boundary data may depend on tau either way.
        reaction_split: weights (summing to 1) with which ``-r u`` is shared between the
            directional operators; default equal.
    """

    axes: Sequence[np.ndarray]
    diffusion: Sequence[Coef]
    convection: Sequence[Coef]
    mixed: dict = field(default_factory=dict)
    reaction: Coef = 0.0
    bcs: Sequence[tuple] = ()
    time_dependent: Any = False
    reaction_split: Sequence[float] | None = None

    def __post_init__(self) -> None:
        self.axes = tuple(np.ascontiguousarray(a, dtype=np.float64) for a in self.axes)
        nd = len(self.axes)
        if nd not in (2, 3):
            raise ValueError(f"the ADI solver takes 2 or 3 dimensions, got {nd}")
        for k, a in enumerate(self.axes):
            if a.ndim != 1 or a.shape[0] < 5 or not np.all(np.diff(a) > 0):
                raise ValueError(f"axis {k} must be strictly increasing with >= 5 nodes")
        if len(self.diffusion) != nd or len(self.convection) != nd:
            raise ValueError("need one diffusion and one convection coefficient per axis")
        for key in self.mixed:
            i, j = key
            if not (0 <= i < j < nd):
                raise ValueError(f"mixed term key {key}: need 0 <= i < j < {nd}")
        if not self.bcs:
            self.bcs = tuple((BC(), BC()) for _ in range(nd))
        if len(self.bcs) != nd:
            raise ValueError("need (lower, upper) boundary conditions for every axis")
        self.bcs = tuple((b[0] if isinstance(b[0], BC) else BC(*b[0]), b[1] if isinstance(b[1], BC) else BC(*b[1])) for b in self.bcs)
        if self.reaction_split is None:
            self.reaction_split = tuple([1.0 / nd] * nd)
        if len(self.reaction_split) != nd or abs(sum(self.reaction_split) - 1.0) > 1e-12:
            raise ValueError("reaction_split needs one weight per axis, summing to 1")

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def shape(self) -> tuple:
        return tuple(a.shape[0] for a in self.axes)

    def mesh(self) -> tuple:
        """Open-mesh coordinates (``np.ix_``), shapes (n1,1[,1]), (1,n2[,1]) ..."""
        return np.ix_(*self.axes)


PAIRS = {2: ((0, 1),), 3: ((0, 1), (0, 2), (1, 2))}


def eval_coef(coef: Coef, X: Sequence[np.ndarray], tau: float, shape: tuple) -> np.ndarray:
    """Evaluate a coefficient on (open-mesh) coordinates ``X`` and broadcast it to ``shape``."""
    val = coef(*X, tau) if callable(coef) else coef
    return np.broadcast_to(np.asarray(val, dtype=np.float64), shape)


def d1_weights(x: np.ndarray) -> np.ndarray:
    """First-derivative weights, shape (..., n, 3), on nodes ``b(i) .. b(i)+2`` of the grids
    along the last axis of ``x``: central inside, one-sided three-point (second order) at both
    ends."""
    h = np.diff(x, axis=-1)
    w = np.zeros(x.shape + (3,))
    hm, hp = h[..., :-1], h[..., 1:]  # h_i, h_{i+1} for i = 1..n-2
    w[..., 1:-1, 0] = -hp / (hm * (hm + hp))
    w[..., 1:-1, 1] = (hp - hm) / (hm * hp)
    w[..., 1:-1, 2] = hm / (hp * (hm + hp))
    h1, h2 = h[..., 0], h[..., 1]
    w[..., 0, 0] = -(2 * h1 + h2) / (h1 * (h1 + h2))
    w[..., 0, 1] = (h1 + h2) / (h1 * h2)
    w[..., 0, 2] = -h1 / (h2 * (h1 + h2))
    ha, hb = h[..., -2], h[..., -1]
    w[..., -1, 0] = hb / (ha * (ha + hb))
    w[..., -1, 1] = -(ha + hb) / (ha * hb)
    w[..., -1, 2] = (ha + 2 * hb) / (hb * (ha + hb))
    return w


def d2_weights(x: np.ndarray) -> np.ndarray:
    """Second-derivative weights, shape (..., n, 3): central inside, zero on the two end rows
    (the boundary conditions fill those)."""
    h = np.diff(x, axis=-1)
    w = np.zeros(x.shape + (3,))
    hm, hp = h[..., :-1], h[..., 1:]
    w[..., 1:-1, 0] = 2.0 / (hm * (hm + hp))
    w[..., 1:-1, 1] = -2.0 / (hm * hp)
    w[..., 1:-1, 2] = 2.0 / (hp * (hm + hp))
    return w


def _along(vec: np.ndarray, axis: int, nd: int) -> np.ndarray:
    shape = [1] * nd
    shape[axis] = vec.shape[0]
    return vec.reshape(shape)


def _face(arr_shape: tuple, axis: int, side: int) -> tuple:
    idx = [slice(None)] * len(arr_shape)
    idx[axis] = 0 if side == 0 else arr_shape[axis] - 1
    return tuple(idx)


def _face_mesh(pde: PDE, axis: int, side: int) -> list:
    """Open-mesh coordinates of one face: the face's axis is a length-1 array."""
    X = list(pde.mesh())
    X[axis] = np.take(X[axis], [0 if side == 0 else -1], axis=axis)
    return X


@dataclass
class Operator:
    """The discretised operator at one tau.

    Attributes:
        W: float64, shape (nd, 3, *grid): directional weights (row i on nodes b(i)..b(i)+2);
            zero on Dirichlet nodes. ``A_d u = sum_p W[d, p] * u[b(i)+p]`` along axis d.
        M: float64, shape (npairs, *grid): mixed coefficients ``b_ij`` (zero on Dirichlet nodes).
        G: per axis, the first-derivative weights, shape (n_d, 3).
        dmask: bool, shape grid: the Dirichlet nodes.
        dir_idx: int64 flat indices of the Dirichlet nodes.
        src_idx, src_dir: int64 flat indices and direction of the Neumann source terms.
        src_coef: float64, coefficient multiplying the Neumann data g at each source node.
        dir_map, src_map: per Dirichlet / Neumann face, ``(axis, side, positions in dir_idx /
            src_idx, flat indices within the face, face coordinates)``, so the boundary data
            of a level are evaluated on the faces only.
    """

    W: np.ndarray
    M: np.ndarray
    G: tuple
    dmask: np.ndarray
    dir_idx: np.ndarray
    src_idx: np.ndarray
    src_dir: np.ndarray
    src_coef: np.ndarray
    dir_map: list = field(default_factory=list)
    src_map: list = field(default_factory=list)


def dirichlet_mask(pde: PDE) -> np.ndarray:
    shape = pde.shape
    mask = np.zeros(shape, dtype=bool)
    for d, (lo, hi) in enumerate(pde.bcs):
        for side, bc in ((0, lo), (1, hi)):
            if bc.kind == "dirichlet":
                mask[_face(shape, d, side)] = True
    return mask


def _fill_direction(pde: PDE, d: int, tau: float, X, r: np.ndarray, dmask: np.ndarray, Wd: np.ndarray) -> dict:
    """Write the weights of direction d at tau into ``Wd`` (shape (3, *grid)); return the
    Neumann source coefficients per side ``{side: face array}``."""
    nd, shape = pde.ndim, pde.shape
    x = pde.axes[d]
    n = x.shape[0]
    a = eval_coef(pde.diffusion[d], X, tau, shape)
    c = eval_coef(pde.convection[d], X, tau, shape)
    D1, D2 = d1_weights(x), d2_weights(x)
    rd = pde.reaction_split[d] * r
    # reaction on the diagonal: p = 1 inside, p = 0 on the first row, p = 2 on the last
    diag = np.ones(n, dtype=np.int64)
    diag[0], diag[-1] = 0, 2
    for p in range(3):
        Wd[p] = a * _along(D2[:, p], d, nd) + c * _along(D1[:, p], d, nd) - rd * _along((diag == p).astype(np.float64), d, nd)
    h_first, h_last = x[1] - x[0], x[-1] - x[-2]
    coefs = {}
    for side in (0, 1):
        if pde.bcs[d][side].kind != "neumann":
            continue  # "linear": D2 rows already zero, D1 one-sided; "dirichlet": masked below
        f = _face(shape, d, side)
        Wf = [Wd[p][f] for p in range(3)]  # views into the face
        af, cf, rf = a[f], c[f], rd[f]
        if side == 0:
            Wf[0][...] = -2.0 * af / h_first**2 - rf
            Wf[1][...] = 2.0 * af / h_first**2
            Wf[2][...] = 0.0
            coefs[side] = -2.0 * af / h_first + cf
        else:
            Wf[0][...] = 0.0
            Wf[1][...] = 2.0 * af / h_last**2
            Wf[2][...] = -2.0 * af / h_last**2 - rf
            coefs[side] = 2.0 * af / h_last + cf
    Wd[:, dmask] = 0.0
    return coefs


def time_dependent_terms(pde: PDE) -> tuple[set, set]:
    """The directions and mixed pairs whose operator changes with tau.

    ``pde.time_dependent`` is a bool (True: everything) or a collection of term keys:
    ``"reaction"``, ``("diffusion", d)``, ``("convection", d)``, ``("mixed", (i, j))``.
    """
    td = pde.time_dependent
    nd = pde.ndim
    if td is True:
        return set(range(nd)), set(PAIRS[nd])
    if not td:
        return set(), set()
    dirs, pairs = set(), set()
    for key in td:
        if key == "reaction":
            dirs |= set(range(nd))
        elif key[0] in ("diffusion", "convection"):
            dirs.add(int(key[1]))
        elif key[0] == "mixed":
            pairs.add(tuple(key[1]))
        else:
            raise ValueError(f"unknown time-dependent term {key!r}")
    return dirs, pairs


def assemble(pde: PDE, tau: float, update: Operator | None = None) -> Operator:
    """Build the :class:`Operator` of ``pde`` at time to maturity ``tau``.

    With ``update`` (an operator of the same PDE at another tau) only the time-dependent terms
    (:func:`time_dependent_terms`) are recomputed, in place, and ``update`` is returned.
    """
    nd, shape = pde.ndim, pde.shape
    X = pde.mesh()
    pairs = PAIRS[nd]
    if update is not None:
        op = update
        dirs, dpairs = time_dependent_terms(pde)
        r = eval_coef(pde.reaction, X, tau, shape) if dirs else None
        for d in sorted(dirs):
            coefs = _fill_direction(pde, d, tau, X, r, op.dmask, op.W[d])
            for dd, side, pos, local, _ in op.src_map:
                if dd == d:
                    op.src_coef[pos] = np.ravel(np.broadcast_to(coefs[side], op.dmask[_face(shape, d, side)].shape))[local]
        for k, pr in enumerate(pairs):
            if pr in dpairs and pr in pde.mixed:
                op.M[k] = eval_coef(pde.mixed[pr], X, tau, shape)
                op.M[k][op.dmask] = 0.0
        return op
    dmask = dirichlet_mask(pde)
    r = eval_coef(pde.reaction, X, tau, shape)
    W = np.zeros((nd, 3) + shape)
    src_idx, src_dir, src_coef, src_map = [], [], [], []
    flat = np.arange(int(np.prod(shape))).reshape(shape)
    start = 0
    for d in range(nd):
        coefs = _fill_direction(pde, d, tau, X, r, dmask, W[d])
        for side, coef in coefs.items():
            f = _face(shape, d, side)
            keep = ~dmask[f]
            cnt = int(keep.sum())
            src_map.append((d, side, np.arange(start, start + cnt), np.flatnonzero(keep.ravel()), _face_mesh(pde, d, side)))
            start += cnt
            src_idx.append(flat[f][keep])
            src_dir.append(np.full(cnt, d))
            src_coef.append(np.broadcast_to(coef, keep.shape)[keep])
    M = np.zeros((len(pairs),) + shape)
    for k, (i, j) in enumerate(pairs):
        if (i, j) in pde.mixed:
            M[k] = eval_coef(pde.mixed[(i, j)], X, tau, shape)
    M[:, dmask] = 0.0
    G = tuple(np.ascontiguousarray(d1_weights(x)) for x in pde.axes)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)  # noqa: E731
    dir_idx = np.flatnonzero(dmask.ravel())
    # which Dirichlet face owns each Dirichlet node: the lower axis wins where faces meet
    owner = np.full(shape, -1, dtype=np.int64)
    faces = []
    for d in reversed(range(nd)):
        for side in (1, 0):
            if pde.bcs[d][side].kind == "dirichlet":
                owner[_face(shape, d, side)] = len(faces)
                faces.append((d, side))
    dir_map = []
    own = owner.ravel()[dir_idx]
    for code, (d, side) in enumerate(faces):
        pos = np.flatnonzero(own == code)
        if pos.size == 0:
            continue
        coords = list(np.unravel_index(dir_idx[pos], shape))
        del coords[d]
        fshape = tuple(shape[k] for k in range(nd) if k != d)
        local = np.ravel_multi_index(tuple(coords), fshape)
        dir_map.append((d, side, pos, local, _face_mesh(pde, d, side)))
    return Operator(W, M, G, dmask, dir_idx, cat(src_idx, np.int64), cat(src_dir, np.int64),
                    np.ascontiguousarray(cat(src_coef, np.float64)), dir_map, src_map)


def boundary_values(pde: PDE, op: Operator, tau: float, src_coef: np.ndarray | None = None) -> tuple:
    """Dirichlet values on ``op.dir_idx`` and Neumann source values on ``op.src_idx`` at tau.

    Args:
        src_coef: the source coefficients at tau when they differ from ``op.src_coef``
            (time-dependent PDEs pass the ones of the operator assembled at tau).

    Returns:
        ``(dir_val, src_val)``, float64 arrays of the lengths of ``op.dir_idx``, ``op.src_idx``.
        Where Dirichlet faces of two axes meet, the lower axis's condition wins.
    """
    shape = pde.shape
    dir_val = np.empty(op.dir_idx.shape[0])
    for d, side, pos, local, Xf in op.dir_map:
        dir_val[pos] = _eval_face(pde.bcs[d][side].value, Xf, tau, shape, d).ravel()[local]
    src_val = np.empty(op.src_idx.shape[0])
    for d, side, pos, local, Xf in op.src_map:
        src_val[pos] = _eval_face(pde.bcs[d][side].value, Xf, tau, shape, d).ravel()[local]
    src_val *= op.src_coef if src_coef is None else src_coef
    return dir_val, src_val


def _eval_face(value: Coef, Xf: list, tau: float, shape: tuple, axis: int) -> np.ndarray:
    """Boundary data on one face, shape = grid shape without ``axis``."""
    fshape = tuple(1 if k == axis else shape[k] for k in range(len(shape)))
    val = np.asarray(value(*Xf, tau) if callable(value) else value, dtype=np.float64)
    return np.take(np.broadcast_to(val, fshape), 0, axis=axis)

"""The daemon client's calls on named market objects: zero curves, cash-dividend schedules,
Heston parameter sets (given, or fitted to a chain) and fitted surfaces kept in the daemon by
name, each with a version
(:mod:`optiond.daemon.objects`, the kinds :mod:`optiond.daemon.object_kinds`).

Part of the client of :mod:`optiond.daemon.client`, whose :class:`~optiond.daemon.client.Client`
inherits :class:`ObjectsMixin` (it uses the client's ``_request``). The objects live in the
daemon only, so these calls never price in this process: without a daemon they raise
:class:`~optiond.daemon.client.DaemonUnavailable`. A name the daemon does not hold, a stale
handle or an object of another kind raise :class:`~optiond.daemon.client.DaemonError` with
``ename`` ``UnknownObject``, ``StaleHandle`` or ``WrongKind``; bad input
:class:`optiond.models.InvalidInputError`.

Example::

    from optiond import chain
    from optiond.daemon.client import get_client

    c = get_client()
    df = chain.read_chain("examples/data/spy_chain_2026-02-13.csv")
    h = c.fit_surface("SPY", df, quote_time="10:50")["handle"]      # "SPY#0001"
    c.surface_vol(h, [600.0, 680.0], 0.25).vol                      # annualised decimals
    c.surface_price("SPY", 680.0, 0.25, "put", american=True).price  # the latest version
    spx = chain.read_chain("examples/data/spx_chain_2025-10-01.csv")
    c.fit_heston("SPX-H", spx)["handle"]                            # "SPX-H#0001": a heston object
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .protocol import packb
from .client_replies import decode_iv, decode_result

if TYPE_CHECKING:  # the fits' encoders (pandas, the chain job) load with the first call that needs them
    from ..models import ImpliedVol, Result

#: seconds a surface fit or price waits for its reply by default (a fit runs the chain job)
FIT_TIMEOUT_S = 300.0
#: the share of a fit's timeout the daemon is given as its deadline (the rest: the way back), so
#: a fit the client stops waiting for is never kept (:class:`optiond.daemon.objects.Claim`)
FIT_DEADLINE_SHARE = 0.9


def _fit_metadata(timeout: float, deadline_s: float | None) -> dict:
    """A fit's run options: its deadline, within the client's ``timeout``."""
    within = FIT_DEADLINE_SHARE * float(timeout)
    return {"deadline_s": within if deadline_s is None else min(float(deadline_s), within)}


class ObjectsMixin:
    """The object calls of :class:`optiond.daemon.client.Client` (see the module docstring)."""

    def fit_surface(self, name: str, df: Any, *, timeout: float | None = None, deadline_s: float | None = None,
                    **market: Any) -> dict:
        """Fit a volatility surface to an option chain in the daemon and keep it as the next
        version of ``name``: the chain job (:func:`optiond.chain.price_chain`) and the fit
        (:func:`optiond.surface.points.fit_chain`) run next to the daemon's GPU, in one request.

        Args:
            name: 1 to 64 of ``A-Za-z0-9_.:/-`` (case-sensitive), e.g. ``"SPY"``.
            df: the chain (:func:`optiond.chain.read_chain`'s columns).
            market: ``rate``, ``dividend_yield``, ``steps``, ``carry``, ``spot_mode``,
                ``quote_time``, ``settlement``, ``curve`` as :func:`optiond.chain.price_chain`.
            timeout: seconds to wait for the reply (default :data:`FIT_TIMEOUT_S`); sent once.
            deadline_s: seconds the daemon may spend (at most :data:`FIT_DEADLINE_SHARE` of
                ``timeout``, the default): past it the daemon answers ``DeadlineExceeded`` and
                keeps nothing.

        Returns:
            the reply (:mod:`optiond.daemon.surface_op`): ``handle`` (``"SPY#0002"``), ``name``,
            ``version``, ``summary``, ``slices`` (per-expiry statistics), ``chain`` (contracts
            and counts by status), ``skipped`` (expiries with too few quotes), ``elapsed_s``.

        Raises:
            ValueError: an unknown market field (before anything is sent).
            InvalidInputError: a bad name, chain column or market field, or a chain with no
                expiry to fit.
            DaemonUnavailable: no daemon answered.
            DaemonError: refused (``max_objects``, ``max_objects_bytes``, another kind under
                the name) or failed.
        """
        buffers: list = []
        from . import surface_op  # where used: a client that only prices imports no pandas or SciPy

        content = surface_op.encode_fit(name, df, market, buffers)
        timeout = FIT_TIMEOUT_S if timeout is None else timeout
        msg = self._request("surface_fit", content, buffers, timeout=timeout, retries=0,
                            metadata=_fit_metadata(timeout, deadline_s))
        return dict(msg.content)

    def fit_heston(self, name: str, df: Any, *, feller: bool = False, timeout: float | None = None,
                   deadline_s: float | None = None, **market: Any) -> dict:
        """Fit the European Heston model to an option chain in the daemon and keep the parameters
        as the next version of the ``heston`` object ``name`` (:mod:`optiond.daemon.heston_op`:
        the chain job, then :func:`optiond.heston_fit.fit_heston` with its default residual and
        weights, in one request); a refit to the same quotes keeps the version.

        Args:
            name, df, market, timeout, deadline_s: as :meth:`fit_surface` (``df`` a European
                chain).
            feller: impose the Feller condition 2 kappa theta >= xi^2.

        Returns:
            the reply: ``handle`` (``"SPX-H#0002"``), ``name``, ``version``, ``summary`` (the
            five parameters, the fit's RMS error in vol points and SSE), ``document``, ``fit``
            (:meth:`optiond.heston_fit.HestonFit.to_dict`), ``chain``, ``elapsed_s``.

        Raises:
            ValueError: an unknown market field (before anything is sent).
            InvalidInputError: a bad name, chain column or market field; American contracts in
                the chain (the American fit: ``optiond heston-fit --american``); too few quotes
                to fit.
            DaemonUnavailable: no daemon answered.
            DaemonError: refused (over :data:`optiond.daemon.heston_op.MAX_FIT_QUOTES` quotes,
                the object bounds, another kind under the name) or failed.
        """
        buffers: list = []
        from . import heston_op

        content = heston_op.encode_fit(name, df, market, feller, buffers)
        timeout = FIT_TIMEOUT_S if timeout is None else timeout
        msg = self._request("heston_fit", content, buffers, timeout=timeout, retries=0,
                            metadata=_fit_metadata(timeout, deadline_s))
        return dict(msg.content)

    def put_surface(self, name: str, surface: Any, *, timeout: float | None = None) -> dict:
        """Keep a fitted surface in the daemon as the next version of ``name`` (publish
        ``optiond chain --surface FILE.json``'s output).

        Args:
            name: as :meth:`fit_surface`.
            surface: a :class:`optiond.surface.Surface`, its :meth:`~optiond.surface.Surface.to_dict`
                map, or its JSON text (read by the daemon, which says what is wrong with it).

        Returns:
            the reply: ``handle``, ``name``, ``version``, ``summary``, ``slices``.

        Raises:
            InvalidInputError: a bad name, or a malformed surface document (field ``surface``).
            DaemonUnavailable, DaemonError: as :meth:`fit_surface`.
        """
        if hasattr(surface, "to_dict"):
            from ..surface.model import json_ready

            surface = json_ready(surface.to_dict())
        elif isinstance(surface, (str, bytes)):
            try:
                surface = json.loads(surface)
            except ValueError:
                pass  # sent as it is: the daemon says what is wrong with it
        content, buffers = _document_content(name, "surface", surface)
        msg = self._request("surface_put", content, buffers, timeout=timeout, retries=0)
        return dict(msg.content)

    def surface_vol(self, name: str, strike: Any, expiry: Any, *, timeout: float | None = None,
                    deadline_s: float | None = None) -> ImpliedVol:
        """The implied volatility of the daemon's surface ``name`` at each ``(K, T)``.

        Args:
            name: a name (the live version) or a handle ``NAME#0003`` (that version, which
                must be the live one).
            strike: K in the surface's currency; expiry: T in years; each a scalar or shape
                (n,) (scalars broadcast). T must lie within the surface's expiries.
            deadline_s: seconds the daemon may spend on a large request (more than
                :data:`optiond.daemon.object_ops.INLINE_VOL_POINTS` points; default and cap:
                its ``max_request_s``).

        Returns:
            :class:`optiond.models.ImpliedVol`: ``vol`` annualised decimals; a bad row has
            status ``invalid`` and its reason in ``error`` (``expiry=3.0: must lie within the
            surface's expiries, ...``); ``diagnostics["handle"]`` the version that answered.

        Raises:
            DaemonError: ``UnknownObject``, ``StaleHandle``, ``WrongKind``, ``DeadlineExceeded``.
            InvalidInputError, DaemonUnavailable: as :meth:`fit_surface`.
        """
        buffers: list = []
        from . import surface_op

        content = surface_op.encode_points(name, {"strike": strike, "expiry": expiry}, buffers)
        meta = None if deadline_s is None else {"deadline_s": float(deadline_s)}
        return decode_iv(self._request("surface_vol", content, buffers, timeout=timeout, metadata=meta))

    def surface_price(self, name: str, strike: Any, expiry: Any, kind: Any, american: Any = True, *,
                      style: Any = None, steps: int | None = None, timeout: float | None = None) -> Result:
        """Option prices at the daemon's surface ``name``'s volatility at each ``(K, T)``, on the
        surface's forward, rate and spot at T (:mod:`optiond.surface.points`): the closed form
        for European options, the CRR tree for American ones.

        Args:
            name, strike, expiry: as :meth:`surface_vol`.
            kind: ``"call"``/``"put"``, a scalar or shape (n,).
            american: True (the default) or False; or ``style``: ``"american"``/``"european"``
                per row (overrides ``american``).
            steps: CRR steps of American prices (default :data:`optiond.chain.DEFAULT_STEPS`).
            timeout: seconds to wait (default :data:`FIT_TIMEOUT_S`); sent once.

        Returns:
            :class:`optiond.models.Result`: prices (currency units) and Greeks; a bad row has
            status ``error`` and its reason; ``diagnostics["handle"]`` the version that answered.

        Raises:
            as :meth:`surface_vol`; RequestRefused over the daemon's work limits.
        """
        if style is None:
            style = "american" if american else "european"
        buffers: list = []
        from . import surface_op

        content = surface_op.encode_points(name, {"strike": strike, "expiry": expiry, "kind": kind, "style": style},
                                           buffers)
        if steps is not None:
            content["steps"] = steps
        msg = self._request("surface_price", content, buffers, timeout=FIT_TIMEOUT_S if timeout is None else timeout,
                            retries=0)
        return decode_result(msg)

    def put_object(self, name: str, kind: str, document: dict, *, timeout: float | None = None) -> dict:
        """Keep an object in the daemon as the next version of ``name``, or find the live version
        already holding the same document (then nothing changes).

        Args:
            name: as :meth:`fit_surface`.
            kind: ``"curve"``, ``"dividends"``, ``"heston"`` or ``"surface"``.
            document: the object's document (:mod:`optiond.daemon.object_kinds`), e.g.
                ``{"days": [30, 365], "rates": [0.043, 0.041]}`` for a curve.

        Returns:
            :func:`optiond.daemon.object_kinds.entry_content` without the document:
            ``handle``, ``name``, ``kind``, ``version``, ``created``, ``created_s``, ``bytes``,
            ``summary`` (its ``text``: one line).

        Raises:
            InvalidInputError: a bad name, kind or document field (named).
            DaemonError: ``WrongKind`` (the name holds another kind), or over the daemon's
                ``max_objects`` / ``max_objects_bytes``.
            DaemonUnavailable: no daemon answered.
        """
        content, buffers = _document_content(name, "document", document)
        content["kind"] = kind
        msg = self._request("object_put", content, buffers, timeout=timeout, retries=0)
        return dict(msg.content)

    def get_object(self, name: str, *, known: tuple[str, float] | None = None, timeout: float | None = None) -> dict:
        """The live object a name (the latest version) or a handle (that version, which must be
        the live one) names: :func:`optiond.daemon.object_kinds.entry_content`, with its
        ``document`` unless ``known`` is that object's ``(handle, created_s)``.

        Raises:
            DaemonError: ``UnknownObject``, ``StaleHandle``.
            InvalidInputError: neither a name nor a handle.
            DaemonUnavailable: no daemon answered.
        """
        content: dict[str, Any] = {"name": name}
        if known is not None:
            content["known"] = [str(known[0]), float(known[1])]
        return dict(self._request("object_get", content, timeout=timeout).content)

    def objects(self, *, timeout: float | None = None) -> list[dict]:
        """The daemon's live objects, by name: each ``name``, ``kind``, ``version``,
        ``handle``, ``created`` (ISO 8601), ``bytes`` and ``summary``.

        Raises:
            DaemonUnavailable: no daemon answered.
        """
        return list(self._request("objects", {}, timeout=timeout).content["objects"])

    def drop_object(self, name: str, *, timeout: float | None = None) -> dict:
        """Forget the daemon's object ``name`` (or its live handle). Returns ``{"dropped":
        handle, "name", "kind", "version"}``.

        Raises:
            DaemonError: ``UnknownObject``, ``StaleHandle``.
            DaemonUnavailable: no daemon answered.
        """
        return dict(self._request("object_drop", {"name": name}, timeout=timeout, retries=0).content)


def _document_content(name: str, field: str, document: Any) -> tuple[dict, list]:
    """A put's content and buffers: a map document goes as msgpack in a frame of its own
    (``<field>_frame``: the daemon sizes the put before decoding it, and decodes it off its
    request loop); anything else in the content, for the daemon to refuse."""
    if isinstance(document, dict):
        try:
            return {"name": name, f"{field}_frame": 0}, [packb(document)]
        except (TypeError, ValueError, OverflowError):
            pass
    return {"name": name, field: document}, []


__all__ = ["FIT_DEADLINE_SHARE", "FIT_TIMEOUT_S", "ObjectsMixin"]

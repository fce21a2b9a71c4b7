"""The volatility surface: an arbitrage-free fit of a priced chain, per expiry a raw-SVI prior
and an arbitrage-free correction of its call prices towards the quotes.

* :mod:`.svi`: raw SVI (Gatheral 2004) in total variance, its derivatives, Gatheral &
  Jacquier's density function g and Lee's wing slopes;
* :mod:`.model`: :class:`Surface` / :class:`Slice` (the fitted parameters with the market and
  the statistics of each expiry), volatility at any (K, T), the versioned JSON form;
* :mod:`.arbitrage`: the static-arbitrage checks (butterfly, Lee's wings, minimum variance,
  calendar) of a slice and of a surface;
* :mod:`.theo`: ``iv_fit``, the theo price and Greeks at it and the edge for each row of a
  priced chain (:func:`optiond.surface.theo.apply_surface`);
* :mod:`.plots`: the smiles, term structure and heatmap pictures (matplotlib; imported only
  where used).

* :mod:`.fit`: the fit of a priced chain (:func:`fit_surface`): one raw-SVI prior per expiry
  from a quasi-explicit start, no butterfly, Lee, minimum-variance or calendar arbitrage
  (the checks as constraints), then its correction;
* :mod:`.correction`: the correction towards every quote (an LP on call prices, HiGHS) and the
  convex call curve through it, the prior's wings beyond the quotes, the calendar exact;
* :mod:`.achievable`: the most quotes of an expiry any arbitrage-free smile lies inside (a
  MILP, the yardstick); :mod:`.report`: confidence, wing cover and warnings per expiry;
* :mod:`.calls`: undiscounted call prices over the forward (Black) and their inverse.
"""

from .arbitrage import Check, butterfly, calendar, check_slice, check_surface
from .fit import fit_surface
from .model import SCHEMA, SCHEMA_VERSION, Slice, Surface, load
from .svi import SVI

__all__ = ["SCHEMA", "SCHEMA_VERSION", "SVI", "Check", "Slice", "Surface", "butterfly", "calendar", "check_slice",
           "check_surface", "fit_surface", "load"]

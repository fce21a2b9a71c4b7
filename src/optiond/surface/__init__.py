"""The volatility surface: an arbitrage-free fit of a priced chain, one raw-SVI slice per expiry.

* :mod:`.svi`: raw SVI (Gatheral 2004) in total variance, its derivatives, Gatheral &
  Jacquier's density function g and Lee's wing slopes;
* :mod:`.model`: :class:`Surface` / :class:`Slice` (the fitted parameters with the market and
  the statistics of each expiry), volatility at any (K, T), the versioned JSON form.
"""

from .model import SCHEMA, SCHEMA_VERSION, Slice, Surface
from .svi import SVI

__all__ = ["SCHEMA", "SCHEMA_VERSION", "SVI", "Slice", "Surface"]

"""Market conventions of a listed option chain: the clock (time to expiry), the rate curve,
and the forward and carry per expiry implied by the chain itself.

* :mod:`.clock`: quote and settlement timestamps, time to expiry in minutes over 525,600
  (Cboe's convention);
* :mod:`.curve`: a zero-rate curve (continuously compounded, linear in r·T);
* :mod:`.forwards`: put–call parity fits (European chains) and the residual carry that makes
  call and put implied volatilities agree (American chains).
"""

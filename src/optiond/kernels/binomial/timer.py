"""Device time of a run of GPU launches, by CUDA events, optionally behind a stream gate.

``timing`` dicts (the GPU pricers' optional argument) receive ``device_s``: the CUDA-event time
from just before the first launch to just after the last. By default the start event is
recorded once the launches' arguments are prepared, so the window holds the kernels, the GPU's
launch latency and the host's calls that submit the launches (a few microseconds each, during
which an idle GPU waits). With ``timing["gate"]`` true the stream is first held by
``gate.cu`` (beside this file) (one thread spinning on a flag in page-locked host memory), the events and
launches are queued behind it, and the flag is set once they are all queued: the window then
holds the GPU's work and launch latency only (NVBench's "blocking kernel" method,
NVIDIA/nvbench ``blocking_kernel``). ``timing["gated"]`` says whether a gate was used;
``timing["gate_timed_out"]`` is true if the gate gave up before the host released it (the
sample then includes host time and should be discarded). CuPy is imported lazily
(:func:`optiond.kernels.gpu.cupy`).

Use::

    t = DeviceTimer(timing, stream)   # timing may be None: everything below is then a no-op
    t.start()                          # gate (if asked), start event
    ...launches...                     # no synchronising call in between while gated
    t.stop()                           # stop event, gate released
    ...copy back, synchronise...
    t.finish()                         # timing["device_s"] (and the gate flags)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import gpu as gpus

GATE_SOURCE = Path(__file__).with_name("gate.cu")
#: the gate's spin gives up after this long (no launch sequence here takes the host as long)
GATE_TIMEOUT_NS = 200_000_000

def _gate_kernel():
    """The gate kernel of the current device (its module compiled once per device by
    :func:`optiond.kernels.gpu.module`)."""
    return gpus.module(GATE_SOURCE).get_function("crr_gate")


class DeviceTimer:
    """CUDA-event window around launches on ``stream``; see the module docstring.

    Args:
        timing: dict that receives the results, or None (then nothing is recorded).
        stream: the CuPy stream the launches go to.
        allow_gate: False where the caller synchronises between start() and stop() (a gate
            would then only time out); ``timing["gate"]`` is then ignored.
    """

    def __init__(self, timing: dict | None, stream, allow_gate: bool = True):
        self.timing = timing
        self.stream = stream
        self.gated = bool(timing is not None and timing.get("gate") and allow_gate)
        self._ev = None
        self._flag = None

    def start(self) -> None:
        if self.timing is None:
            return
        cp = gpus.cupy()
        self._ev = (cp.cuda.Event(), cp.cuda.Event())
        if self.gated:
            k = _gate_kernel()
            self._pinned = cp.cuda.alloc_pinned_memory(4)
            self._flag = np.frombuffer(self._pinned, np.int32, 1)
            self._flag[0] = 0
            self._out = cp.zeros(1, np.int32)
            # page-locked memory is mapped at the same address on the device (unified addressing)
            k((1,), (1,), (np.uint64(self._pinned.ptr), np.uint64(GATE_TIMEOUT_NS), self._out), stream=self.stream)
        self._ev[0].record(self.stream)

    def stop(self) -> None:
        if self.timing is None:
            return
        self._ev[1].record(self.stream)
        if self._flag is not None:
            self._flag[0] = 1

    def finish(self) -> None:
        """After the stream is synchronised: fill ``timing``."""
        if self.timing is None:
            return
        cp = gpus.cupy()
        self.timing["device_s"] = cp.cuda.get_elapsed_time(*self._ev) / 1e3
        self.timing["gated"] = self.gated
        if self.gated:
            self.timing["gate_timed_out"] = bool(int(self._out.get()[0]))

"""Host time perseus's run mode spends between iterations, per rank, in a real job.

Wraps the straggler exchange and the report of
``perseus.megatron._between.Between`` in a timer, runs a script as
``__main__`` (the example) and prints, per rank at exit, the median, mean and
largest exchange time (iterations 10 on) and the report's median. Run it
under the CPU launcher of the tests, e.g. dp2 x pp2 on 4 CPU ranks::

    PERSEUS_NVML_LIBRARY=.../libnvidia-ml.so.1 FAKE_NVML_DEVICES=4 \\
    python tests/megatron_support/cpu_launch.py --nproc 4 bench/megatron_exchange.py \\
        examples/megatron_gpt.py --cpu --pipeline=2 --microbatches=4 --iterations=60 \\
        --mode=run --profile=profile.csv --blocking-power=80

and compare builds by putting one's ``perseus`` first on PYTHONPATH.
"""

from __future__ import annotations

import atexit
import os
import runpy
import statistics
import sys
import time
from typing import Any, Callable

from perseus.megatron import _between

_SPENT: dict[str, list[float]] = {"exchange": [], "report": []}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            _SPENT[name].append(time.perf_counter() - start)

    return wrapper


def _show() -> None:
    exchange, report = _SPENT["exchange"][10:], _SPENT["report"][1:]
    if not exchange:
        return
    ms = 1e3
    print(
        f"rank {os.environ.get('RANK', 0)}: straggler exchange median "
        f"{statistics.median(exchange) * ms:.3f} ms, mean {statistics.mean(exchange) * ms:.3f} ms, "
        f"max {max(exchange) * ms:.3f} ms over {len(exchange)} iterations; report median "
        f"{statistics.median(report) * ms if report else float('nan'):.3f} ms over {len(report)}",
        flush=True,
    )


def main() -> None:
    between: Any = _between.Between
    between._follow_stragglers = _timed("exchange", between._follow_stragglers)
    between._report = _timed("report", between._report)
    atexit.register(_show)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()

"""The reference solver: lowtime 0.3.0, driven the way Zeus drives it.

Zeus's pipeline frequency optimizer
(``examples/pipeline_frequency_optimizer/run_optimization.py`` in ml-energy/zeus)
turns a measured profile into a time-energy frontier with the PyPI package
``lowtime``. This module repeats that procedure step by step, so that the
benchmark compares perseus with the reference exactly as users run it:

1. Per (stage, instruction), one ``ExecutionOption`` per **measured row of the
   CSV** (``knob`` = MHz, ``real_time`` = seconds, ``cost`` = joules) with the
   chosen ``unit_time``: every row, in file order, Pareto-dominated ones
   included, exactly as Zeus's script reads the CSV with pandas (here with the
   standard ``csv`` module, ``bench/replay.py``'s ``RawProfile``).
2. The cost becomes *effective* energy: ``cost -= P_block * quant_time * unit_time``
   (Zeus subtracts the blocking power over the *quantised* time, not the real
   time; we keep that).
3. ``CandidateExecutionOptions`` filters the Pareto-optimal options on
   (real time, effective cost), deduplicates equal quantised times and sorts
   them. If three or fewer remain, Zeus filters again with the "soft" noise
   factor 0.95, which keeps more options.
4. ``ExponentialModel(..., search_strategy="best")`` fits ``a*exp(b*d)+c``.
5. The activity-on-node DAG: per stage, lowtime's ``Synchronous1F1B``
   instructions chained in execution order; cross-stage edges from
   ``DependencyResolver`` with the ``forward_dep`` / ``backward_dep`` rules
   checked on every ordered pair of instructions (quadratic, as in Zeus);
   dummy source node 0 and sink node 1.
6. ``PhillipsDessouky(dag).run()``; after every yielded iteration the
   ``assigned_knob`` of every instruction is one plan (Zeus writes one file of
   frequencies per iteration at this point).

What is left out of Zeus's script: logging to a file, the per-(stage,
instruction) cost-model plots and the pipeline drawings every
``plot_interval`` iterations. They are output, not part of the solve.

Only this module imports lowtime; the rest of bench/ sees plain Python data.

``solve`` also accepts a ``perseus.Profile`` (``bench/quality.py``'s generated
suite, whose rows are all Pareto-optimal): then lowtime gets the options
perseus kept, which for a profile read from a CSV is *not* what Zeus does.
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

__all__ = [
    "INSTRUCTIONS",
    "LowtimePlan",
    "LowtimeResult",
    "lowtime_version",
    "preload",
    "solve",
    "stage_orders",
]

#: Profile instruction names, in the order Zeus processes them.
INSTRUCTIONS = ("forward", "backward")

#: Zeus's default "soft Pareto frontier" noise factor (``--noise-factor``).
ZEUS_NOISE_FACTOR = 0.95


@dataclass(frozen=True)
class LowtimePlan:
    """One iteration of lowtime's Phillips-Dessouky loop.

    Attributes
    ----------
    quant_time:
        lowtime's own iteration time, in units of ``unit_time`` (critical path
        of the quantised durations).
    iteration_time:
        ``quant_time * unit_time``, seconds (lowtime's ``real_time``).
    cost:
        lowtime's total effective energy from the fitted cost models, joules.
    energy:
        lowtime's estimate of the total energy, joules:
        ``cost + num_stages * iteration_time * P_block`` (what Zeus prints as
        "total cost with P2P").
    knobs:
        The assigned knob (MHz) of every computation, in the order of ``keys``.
    keys:
        ``(stage, instruction, microbatch)`` of each entry of ``knobs`` (shared
        by every plan of one solve).
    """

    quant_time: int
    iteration_time: float
    cost: float
    energy: float
    knobs: np.ndarray
    keys: tuple[tuple[int, str, int], ...]

    @property
    def frequencies(self) -> dict[tuple[int, str, int], int]:
        """``{(stage, instruction, microbatch): MHz}``, the key ``perseus.evaluate`` takes."""
        return {k: int(f) for k, f in zip(self.keys, self.knobs)}


@dataclass(frozen=True)
class LowtimeResult:
    """Everything one lowtime solve produced.

    Attributes
    ----------
    plans:
        One plan per yielded Phillips-Dessouky iteration, slowest first (the
        order lowtime produces them). The starting point (every computation at
        its slowest duration) is not yielded by lowtime and not included.
    wall_time:
        Seconds from profile to frontier: option building, cost-model fitting,
        DAG construction, the solver loop and reading the plans out.
    build_time:
        Seconds of that spent before the solver loop (fitting and DAG).
    solve_time:
        Seconds of that spent in the solver loop (including reading plans out).
    stage_orders:
        Per stage, lowtime's execution order as ``(instruction, microbatch)``.
    """

    plans: list[LowtimePlan]
    wall_time: float
    build_time: float
    solve_time: float
    stage_orders: list[list[tuple[str, int]]]


def lowtime_version() -> Optional[str]:
    """The installed lowtime version (the benchmark expects 0.3.0), or None where lowtime is
    not installed: a ``--no-lowtime`` run needs none, and its JSON says so."""
    try:
        import lowtime
    except ImportError:
        return None
    return str(lowtime.__version__)


def preload() -> None:
    """Import lowtime and its dependencies (networkx, scipy, matplotlib) up front.

    The memory benchmark calls this before it resets the peak-RSS mark, so that
    importing libraries is not counted as memory of the solve.
    """
    import lowtime.cost_model
    import lowtime.graph_utils
    import lowtime.perseus.schedule
    import lowtime.solver  # noqa: F401


def _instruction_classes() -> dict[str, Any]:
    from lowtime.perseus.instruction import Backward, Forward

    return {"forward": Forward, "backward": Backward}


def _measured_rows(source: Any, stage: int, name: str) -> list[tuple[int, float, float]]:
    """(MHz, s, J) rows lowtime gets for one (stage, instruction)."""
    if hasattr(source, "rows"):  # RawProfile: every row of the CSV, in file order
        return [(int(f), float(t), float(e)) for f, t, e in source.rows(stage, name)]
    measured = source.options(stage, name)  # perseus.Profile: the options it kept
    return [
        (int(f), float(t), float(e))
        for f, t, e in zip(measured.frequency_mhz, measured.time_s, measured.energy_j)
    ]


def _operation_specs(
    source: Any, blocking_power: float, unit_time: float, noise_factor: float
) -> list[dict[Any, Any]]:
    """Per stage, ``{instruction class: OperationSpec}``, built as Zeus builds them."""
    from lowtime.cost_model import ExponentialModel
    from lowtime.operation import CandidateExecutionOptions, ExecutionOption, OperationSpec

    classes = _instruction_classes()
    specs: list[dict[Any, Any]] = [{} for _ in range(source.num_stages)]
    for name in INSTRUCTIONS:
        for stage in range(source.num_stages):
            options = [
                ExecutionOption[int](real_time=t, unit_time=unit_time, cost=e, knob=f)
                for f, t, e in _measured_rows(source, stage, name)
            ]
            # Effective energy over the quantised time, as Zeus computes it.
            for option in options:
                option.cost -= blocking_power * option.quant_time * option.unit_time
            candidates = CandidateExecutionOptions[int](options=options)
            if len(candidates.options) <= 3:
                candidates = CandidateExecutionOptions[int](
                    options=options, noise_factor=noise_factor
                )
            model = ExponentialModel(candidates, search_strategy="best")
            specs[stage][classes[name]] = OperationSpec[int](options=candidates, cost_model=model)
    return specs


def _build_dag(specs: list[dict[Any, Any]], microbatches: int) -> tuple[Any, list[list[Any]]]:
    """Activity-on-node 1F1B DAG with dummy source 0 and sink 1, as in Zeus."""
    import networkx as nx
    from lowtime.graph_utils import DependencyResolver, add_sink_node, add_source_node
    from lowtime.perseus.instruction import Instruction, backward_dep, forward_dep
    from lowtime.perseus.schedule import Synchronous1F1B

    num_stages = len(specs)
    dag = nx.DiGraph()
    per_stage: list[list[Any]] = []
    next_id = 2  # 0 and 1 are reserved for the dummy source and sink
    for stage in range(num_stages):
        ids: list[int] = []
        insts: list[Any] = []
        schedule = Synchronous1F1B(
            num_stages=num_stages,
            num_micro_batches=microbatches,
            stage_id=stage,
            operation_spec_map=specs[stage],
        )
        for inst in schedule:
            dag.add_node(next_id, op=inst)
            ids.append(next_id)
            insts.append(inst)
            next_id += 1
        dag.add_edges_from(zip(ids, ids[1:]))
        per_stage.append(insts)

    resolver = DependencyResolver(
        dependency_rules=[forward_dep, backward_dep], node_type=Instruction
    )
    nodes = list(dag.nodes(data="op"))
    for (u, op_u), (v, op_v) in itertools.product(nodes, nodes):
        if resolver.is_dependent(op_u, op_v):
            dag.add_edge(u, v)

    add_source_node(dag, 0)
    add_sink_node(dag, 1)
    dag.graph["source_node"] = 0
    dag.graph["sink_node"] = 1
    return dag, per_stage


def _plan_keys(per_stage: list[list[Any]], forward_cls: Any) -> tuple[tuple[int, str, int], ...]:
    return tuple(
        (stage, "forward" if isinstance(inst, forward_cls) else "backward", inst.micro_batch_id)
        for stage, insts in enumerate(per_stage)
        for inst in insts
    )


def stage_orders(num_stages: int, microbatches: int) -> list[list[tuple[str, int]]]:
    """lowtime's 1F1B execution order per stage, as ``(instruction, microbatch)``.

    Lets the benchmark check that lowtime and perseus solve the same DAG.
    """
    from lowtime.perseus.instruction import Forward
    from lowtime.perseus.schedule import Synchronous1F1B

    # The schedule only needs a spec to construct instructions; any spec will do.
    spec = _dummy_spec()
    classes = _instruction_classes()
    spec_map = dict.fromkeys(classes.values(), spec)
    orders = []
    for stage in range(num_stages):
        sched = Synchronous1F1B(
            num_stages=num_stages,
            num_micro_batches=microbatches,
            stage_id=stage,
            operation_spec_map=spec_map,
        )
        orders.append(
            [("forward" if isinstance(i, Forward) else "backward", i.micro_batch_id) for i in sched]
        )
    return orders


def _dummy_spec() -> Any:
    from lowtime.cost_model import CostModel
    from lowtime.operation import CandidateExecutionOptions, ExecutionOption, OperationSpec

    class _Flat(CostModel):
        def __call__(self, quant_time: int) -> float:  # noqa: ARG002 (lowtime's signature)
            return 0.0

    options = CandidateExecutionOptions[int](
        options=[ExecutionOption[int](real_time=1.0, unit_time=1.0, cost=1.0, knob=0)]
    )
    return OperationSpec[int](options=options, cost_model=_Flat())


def solve(
    source: Any,
    *,
    microbatches: int,
    blocking_power_w: Optional[float] = None,
    unit_time: float = 1e-3,
    noise_factor: float = ZEUS_NOISE_FACTOR,
    quiet: bool = True,
) -> LowtimeResult:
    """Run lowtime with the 1F1B schedule, as Zeus does.

    Parameters
    ----------
    source:
        A ``replay.RawProfile`` (every measured row of a CSV, what Zeus gives
        lowtime) with ``blocking_power_w``; or a ``perseus.Profile`` (its kept
        options; the blocking power defaults to the profile's). Every stage is
        one pipeline stage.
    microbatches:
        Microbatches per iteration.
    blocking_power_w:
        P2P blocking power, W (Zeus's ``--p2p-power``).
    unit_time:
        Time quantum, seconds (Zeus's default is 1 ms).
    noise_factor:
        Zeus's soft Pareto filter factor, used when a (stage, instruction)
        keeps three or fewer options.
    quiet:
        Silence scipy's curve-fitting and overflow warnings (they do not change
        the result).

    Returns
    -------
    LowtimeResult
        The plans of every iteration and the wall time it took.
    """
    from lowtime.perseus.instruction import Forward
    from lowtime.solver import PhillipsDessouky

    if blocking_power_w is None:
        if not hasattr(source, "blocking_power_w"):
            raise TypeError("solve() needs blocking_power_w for raw rows")
        blocking_power_w = float(source.blocking_power_w)
    blocking_power_w = float(blocking_power_w)

    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        start = time.perf_counter()
        specs = _operation_specs(source, blocking_power_w, unit_time, noise_factor)
        dag, per_stage = _build_dag(specs, microbatches)
        solver = PhillipsDessouky(dag)
        keys = _plan_keys(per_stage, Forward)
        flat = [inst for insts in per_stage for inst in insts]
        built = time.perf_counter()

        scale = source.num_stages * blocking_power_w
        plans: list[LowtimePlan] = []
        for result in solver.run():
            knobs = np.fromiter(
                (inst.assigned_knob for inst in flat), dtype=np.int32, count=len(flat)
            )
            plans.append(
                LowtimePlan(
                    quant_time=int(result.quant_time),
                    iteration_time=float(result.real_time),
                    cost=float(result.cost),
                    energy=float(result.cost) + scale * float(result.real_time),
                    knobs=knobs,
                    keys=keys,
                )
            )
        end = time.perf_counter()

    orders = [
        [("forward" if isinstance(i, Forward) else "backward", i.micro_batch_id) for i in insts]
        for insts in per_stage
    ]
    return LowtimeResult(
        plans=plans,
        wall_time=end - start,
        build_time=built - start,
        solve_time=end - built,
        stage_orders=orders,
    )

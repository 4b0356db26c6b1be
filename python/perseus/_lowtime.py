"""``perseus bench --compare-lowtime``: the reference solver (PyPI ``lowtime``) on the same case.

lowtime is driven the way Zeus's pipeline frequency optimizer drives it
(``bench/lowtime_reference.py`` documents each step against Zeus's script and
is the repository's benchmark copy of this procedure): every measured CSV row
becomes an ``ExecutionOption``; the cost is made effective by subtracting the
blocking power over the quantised time; ``CandidateExecutionOptions`` filters
(again with Zeus's soft noise factor 0.95 when three or fewer remain); an
``ExponentialModel`` is fitted; the 1F1B activity-on-node DAG is built with
lowtime's own schedule and dependency rules; ``PhillipsDessouky`` runs and
every yielded iteration is one plan. Each plan is then replayed with
`perseus.evaluate` on the measured rows, so both solvers are judged alike.
lowtime solves 1F1B only.
"""

from __future__ import annotations

import csv
import importlib
import itertools
import time
import warnings
from collections.abc import Sequence
from typing import Any, Optional

__all__ = ["lowtime_available", "solve_and_replay"]

_NOISE_FACTOR = 0.95  # Zeus's default --noise-factor


def _module(name: str) -> Any:
    """lowtime and networkx ship no type information; they are used as Any."""
    return importlib.import_module(name)


def lowtime_available() -> Optional[str]:
    """lowtime's version when it can be imported, else None."""
    try:
        lowtime = _module("lowtime")
    except ImportError:
        return None
    return str(getattr(lowtime, "__version__", "unknown"))


def _raw_rows(csv_path: str) -> dict[tuple[int, str], list[tuple[int, float, float]]]:
    """Every (MHz, s, J) row per (stage, instruction), in file order, as Zeus reads them."""
    rows: dict[tuple[int, str], list[tuple[int, float, float]]] = {}
    with open(csv_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if not any((value or "").strip() for value in row.values()):
                continue
            key = (int(row["stage"]), row["instruction"].strip())
            rows.setdefault(key, []).append(
                (int(row["frequency"]), float(row["time"]), float(row["energy"]))
            )
    return rows


def _specs(
    rows: dict[tuple[int, str], list[tuple[int, float, float]]],
    num_stages: int,
    blocking_power_w: float,
    unit_time_s: float,
) -> list[dict[Any, Any]]:
    ExponentialModel = _module("lowtime.cost_model").ExponentialModel
    operation = _module("lowtime.operation")
    CandidateExecutionOptions = operation.CandidateExecutionOptions
    ExecutionOption, OperationSpec = operation.ExecutionOption, operation.OperationSpec
    instruction = _module("lowtime.perseus.instruction")
    Backward, Forward = instruction.Backward, instruction.Forward

    specs: list[dict[Any, Any]] = [{} for _ in range(num_stages)]
    for name, cls in (("forward", Forward), ("backward", Backward)):
        for stage in range(num_stages):
            options = [
                ExecutionOption[int](real_time=t, unit_time=unit_time_s, cost=e, knob=f)
                for f, t, e in rows[(stage, name)]
            ]
            for option in options:  # effective energy over the quantised time, as Zeus does
                option.cost -= blocking_power_w * option.quant_time * option.unit_time
            candidates = CandidateExecutionOptions[int](options=options)
            if len(candidates.options) <= 3:
                candidates = CandidateExecutionOptions[int](
                    options=options, noise_factor=_NOISE_FACTOR
                )
            model = ExponentialModel(candidates, search_strategy="best")
            specs[stage][cls] = OperationSpec[int](options=candidates, cost_model=model)
    return specs


def _dag(specs: list[dict[Any, Any]], microbatches: int) -> tuple[Any, list[Any], list[Any]]:
    """The 1F1B DAG (dummy source 0, sink 1), its instructions in order and their keys."""
    nx = _module("networkx")
    graph_utils = _module("lowtime.graph_utils")
    instruction = _module("lowtime.perseus.instruction")
    Forward, Instruction = instruction.Forward, instruction.Instruction
    Synchronous1F1B = _module("lowtime.perseus.schedule").Synchronous1F1B

    dag = nx.DiGraph()
    flat: list[Any] = []
    keys: list[Any] = []
    next_id = 2
    for stage, spec in enumerate(specs):
        ids = []
        schedule = Synchronous1F1B(
            num_stages=len(specs),
            num_micro_batches=microbatches,
            stage_id=stage,
            operation_spec_map=spec,
        )
        for inst in schedule:
            dag.add_node(next_id, op=inst)
            ids.append(next_id)
            flat.append(inst)
            name = "forward" if isinstance(inst, Forward) else "backward"
            keys.append((stage, name, int(inst.micro_batch_id)))
            next_id += 1
        dag.add_edges_from(zip(ids, ids[1:]))
    resolver = graph_utils.DependencyResolver(
        dependency_rules=[instruction.forward_dep, instruction.backward_dep],
        node_type=Instruction,
    )
    nodes = list(dag.nodes(data="op"))
    for (u, op_u), (v, op_v) in itertools.product(nodes, nodes):
        if resolver.is_dependent(op_u, op_v):
            dag.add_edge(u, v)
    graph_utils.add_source_node(dag, 0)
    graph_utils.add_sink_node(dag, 1)
    dag.graph["source_node"] = 0
    dag.graph["sink_node"] = 1
    return dag, flat, keys


def solve_and_replay(
    csv_path: str,
    *,
    blocking_power_w: float,
    microbatches: int,
    unit_time_s: float,
    deadlines_s: Sequence[float],
) -> dict[str, Any]:
    """lowtime's frontier for a 1F1B case, each plan replayed; energy at each deadline.

    Returns the wall seconds lowtime took (profile to plans), its plan count,
    its fastest replayed plan and, per deadline, the energy of its cheapest
    replayed plan that meets it, waiting out the rest at blocking power
    (None when none of its plans is that fast).
    """
    PhillipsDessouky = _module("lowtime.solver").PhillipsDessouky

    from .optimize import evaluate
    from .profile import Profile

    profile = Profile.from_csv(csv_path, blocking_power_w=blocking_power_w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's curve-fit and overflow warnings
        start = time.perf_counter()
        specs = _specs(_raw_rows(csv_path), profile.num_stages, blocking_power_w, unit_time_s)
        dag, flat, keys = _dag(specs, microbatches)
        assignments = [
            {key: int(inst.assigned_knob) for key, inst in zip(keys, flat)}
            for _ in PhillipsDessouky(dag).run()
        ]
        wall_s = time.perf_counter() - start
    replayed = [
        evaluate(profile, plan, microbatches=microbatches, schedule="1f1b") for plan in assignments
    ]
    if not replayed:
        raise ValueError(f"lowtime yielded no plan for {csv_path}")
    waiting_w = profile.num_stages * blocking_power_w
    fastest = min(replayed, key=lambda e: (e.iteration_time_s, e.energy_j))
    at_deadlines: list[Optional[float]] = []
    for deadline_s in deadlines_s:
        fitting = [
            e.energy_j + waiting_w * (deadline_s - e.iteration_time_s)
            for e in replayed
            if e.iteration_time_s <= deadline_s * (1 + 1e-12)
        ]
        at_deadlines.append(min(fitting) if fitting else None)
    return {
        "wall_s": wall_s,
        "plans": len(replayed),
        "fastest": {"iteration_time_s": fastest.iteration_time_s, "energy_j": fastest.energy_j},
        "energy_at_deadlines_j": at_deadlines,
    }

"""perseus: energy-optimal GPU frequency plans for pipeline-parallel training.

Typical use (run from a clone, where ``examples/`` is):

>>> import perseus
>>> profile = perseus.Profile.from_csv("examples/small-4stage.csv", blocking_power_w=70.0)
>>> frontier = perseus.optimize(profile, microbatches=8)
>>> plan = frontier.plan_for(1.02 * frontier.iteration_times_s[0])
>>> plan.to_zeus()[0][:2]  # GPU 0's first two computations: (instruction, MHz)
[('forward', ...), ('forward', ...)]
"""

from __future__ import annotations

try:
    from . import _core  # noqa: F401  (fail early, with a hint)
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(
        "perseus's compiled extension perseus._core could not be imported "
        f"({error}). Was the extension built? Run `pip install .` in the "
        "perseus source tree."
    ) from error

from ._core import SolveCancelled
from .errors import ProfileError
from .frontier import Frontier, FrontierSummary, PowerCapError
from .optimize import LOCAL_SEARCH_MOVES, SolverBudgets, evaluate, optimize
from .pipeline_spec import PipelineSpec
from .plan import Evaluation, Plan, PlanStep
from .profile import INSTRUCTIONS, LIMITS, Profile, ProfileWarning, StageOptions
from .profiler import ProfilerResult, measure_blocking_power, profile_stages
from .progress import SolveProgress
from .schedule import SCHEDULES, pipeline_order
from .switch_timing import SwitchLatency, measure_switch_latency
from .switcher import FrequencySwitcher
from .timeline import PowerTimeline, Timeline


def _installed_version() -> str:
    """The version in the installed package's metadata; pyproject.toml is its one source."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perseus-energy")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__version__ = _installed_version()

__all__ = [
    "INSTRUCTIONS",
    "LIMITS",
    "LOCAL_SEARCH_MOVES",
    "SCHEDULES",
    "Evaluation",
    "FrequencySwitcher",
    "Frontier",
    "FrontierSummary",
    "PipelineSpec",
    "Plan",
    "PlanStep",
    "PowerCapError",
    "PowerTimeline",
    "Profile",
    "ProfileError",
    "ProfileWarning",
    "ProfilerResult",
    "SolveCancelled",
    "SolveProgress",
    "SolverBudgets",
    "StageOptions",
    "SwitchLatency",
    "Timeline",
    "evaluate",
    "measure_blocking_power",
    "measure_switch_latency",
    "optimize",
    "pipeline_order",
    "profile_stages",
]

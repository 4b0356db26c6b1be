"""What perseus can follow: which megatron-core, and which of its configurations.

perseus attaches to the megatron-core versions in :data:`SUPPORTED_VERSIONS`
and checks the signatures of the schedule functions it wraps, so another
version fails at attach with the function it does not know rather than
mid-training. Configurations whose code paths bypass the wrapped functions
(full-iteration CUDA graphs, the fused MoE 1F1B overlap, hybrid context
parallelism, variable sequence lengths without a per-length frontier) are
named here, once, for attach, the first iteration and the command line.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, Optional

from ._errors import MegatronVersionError
from ._once import warn_for_job

__all__ = [
    "FULL_GRAPH_MESSAGE",
    "SCHEDULE_FUNCTIONS",
    "STEP_FUNCTIONS",
    "SUPPORTED_VERSIONS",
    "check_megatron",
    "full_iteration_graphs",
    "parse_version",
    "unsupported_schedule",
]

SUPPORTED_VERSIONS = ((0, 16, 0), (0, 20, 0))
"""megatron-core releases perseus attaches to: from the first, up to but not
including the second. The CI tests run the oldest (0.16.0) and the newest
(0.19.2) release of the range."""

SUPPORTED_TEXT = ">=0.16.0,<0.20"

#: Schedule functions perseus wraps, and the pipeline schedule each one runs.
SCHEDULE_FUNCTIONS = {
    "forward_backward_no_pipelining": "no-pipelining",
    "forward_backward_pipelining_without_interleaving": "1f1b",
    "forward_backward_pipelining_with_interleaving": "interleaved",
}

#: Per-computation functions the schedules call through the module.
STEP_FUNCTIONS = ("forward_step", "backward_step")

# Parameters perseus reads, per function. The schedules take keyword
# arguments only; forward_step and backward_step are called positionally and
# are bound against their own signature.
_REQUIRED_PARAMETERS = {
    "forward_step": ("data_iterator", "model", "input_tensor", "current_microbatch", "vp_stage"),
    "backward_step": ("output_tensor", "output_tensor_grad", "config"),
    **dict.fromkeys(
        SCHEDULE_FUNCTIONS,
        ("forward_step_func", "data_iterator", "model", "num_microbatches", "forward_only"),
    ),
}


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.19.2"`` or ``"0.16.0rc0.dev1"`` -> ``(0, 19, 2)`` / ``(0, 16, 0)``.

    Raises
    ------
    ValueError
        If the text does not start with ``MAJOR.MINOR``.
    """
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if match is None:
        raise ValueError(f"not a version number: {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _check_signature(name: str, function: Callable[..., Any], version: str) -> None:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError) as error:
        raise MegatronVersionError(
            f"megatron-core {version}: cannot read the signature of schedules.{name} ({error}); "
            f"perseus supports megatron-core {SUPPORTED_TEXT}"
        ) from None
    missing = [p for p in _REQUIRED_PARAMETERS[name] if p not in parameters]
    if missing:
        raise MegatronVersionError(
            f"megatron-core {version}: schedules.{name} has no parameter(s) {', '.join(missing)} "
            f"(its signature is {name}{inspect.signature(function)}); perseus does not recognise "
            f"this schedule code. perseus supports megatron-core {SUPPORTED_TEXT}"
        )


def check_megatron(schedules: Any, version: str, *, allow_untested_version: bool = False) -> None:
    """Check that perseus knows this megatron-core and its schedule functions.

    Parameters
    ----------
    schedules
        The module ``megatron.core.pipeline_parallel.schedules`` (or anything
        with its functions as attributes).
    version
        megatron-core's version string (``megatron.core.package_info.__version__``).
    allow_untested_version
        Accept a version outside `SUPPORTED_VERSIONS` with a warning instead
        of an error. The signatures are checked either way.

    Raises
    ------
    MegatronVersionError
        The version is outside the supported range, or a schedule function
        is missing or lacks a parameter perseus reads.
    """
    try:
        parsed = parse_version(version)
    except ValueError:
        raise MegatronVersionError(
            f"cannot read megatron-core's version {version!r}; perseus supports megatron-core "
            f"{SUPPORTED_TEXT}"
        ) from None
    low, high = SUPPORTED_VERSIONS
    if not low <= parsed < high:
        message = (
            f"megatron-core {version} is not supported: perseus attaches to megatron-core "
            f"{SUPPORTED_TEXT} (tested: 0.16.0 and 0.19.2)"
        )
        if not allow_untested_version:
            raise MegatronVersionError(
                message + "; install a supported release, or pass allow_untested_version=True "
                "to try anyway (the schedule functions' signatures are still checked)"
            )
        warn_for_job(message + "; trying anyway (allow_untested_version=True)", stacklevel=3)
    for name in (*STEP_FUNCTIONS, *SCHEDULE_FUNCTIONS):
        function = getattr(schedules, name, None)
        if not callable(function):
            raise MegatronVersionError(
                f"megatron-core {version}: megatron.core.pipeline_parallel.schedules has no "
                f"function {name}; perseus supports megatron-core {SUPPORTED_TEXT}"
            )
        _check_signature(name, function, version)


# -- configurations perseus cannot follow -------------------------------------------


def full_iteration_graphs(config: Any) -> bool:
    """Whether megatron captures whole iterations in one CUDA graph (0.16-0.19 spellings)."""
    if getattr(config, "cuda_graph_impl", None) == "full_iteration":
        return True
    for name in ("cuda_graph_scope", "cuda_graph_modules"):
        scope = getattr(config, name, None)
        values = scope if isinstance(scope, (list, tuple)) else [scope]
        for value in values:
            text = str(getattr(value, "name", None) or getattr(value, "value", None) or value)
            if getattr(config, "cuda_graph_impl", "none") != "none" and "full_iteration" in text:
                return True
    return False


FULL_GRAPH_MESSAGE = (
    "full-iteration CUDA graphs ({setting}) replay a whole forward-backward call as one "
    "graph: perseus's per-computation clock requests and timing are Python that a graph "
    "replay never runs. Use per-layer graphs (--cuda-graph-impl local or transformer_engine "
    "with a per-layer scope), which perseus works with, or no CUDA graphs"
)


def unsupported_schedule(
    config: Any, kind: str, *, run_mode: bool, by_length: bool
) -> Optional[str]:
    """What in megatron's `config` makes its schedule impossible to follow; None if nothing.

    `kind` is the schedule (:data:`SCHEDULE_FUNCTIONS` values); `by_length`
    whether the frontiers are keyed by sequence length (the opt-in to
    variable lengths).
    """
    if getattr(config, "overlap_moe_expert_parallel_comm", False):
        return (
            "the fused MoE 1F1B overlap (config.overlap_moe_expert_parallel_comm=True) runs "
            "merged forward-backward steps through combined_1f1b, bypassing forward_step and "
            "backward_step"
        )
    if kind == "no-pipelining" and getattr(config, "hybrid_context_parallel", False):
        return (
            "hybrid context parallelism (config.hybrid_context_parallel=True) splits "
            "microbatches into sub-samples the plan does not know"
        )
    if run_mode and not by_length and getattr(config, "variable_seq_lengths", False):
        return (
            "variable sequence lengths (config.variable_seq_lengths=True) give microbatches of "
            "different lengths than the plan was made for; to opt in, pass attach() frontiers "
            "keyed by (microbatches, seq_length), made for each length"
        )
    return None

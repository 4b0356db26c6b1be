"""Train a small GPT with megatron-core's pipeline schedules, through perseus.

One process per GPU, started by torchrun. The three steps of perseus:

1. profile each stage (model chunk) across SM frequencies, then stop::

       torchrun --nproc-per-node 4 examples/megatron_gpt.py --pipeline 2 --tensor 2 \\
           --recompute full --mode profile --profile out/gpt.csv

2. optimise and run: the frontier from that profile, and training with every
   forward and backward at its planned frequency, the energy of every GPU
   measured (``--calibrate K`` first runs K iterations at the all-fastest
   plan and K at the plan, and reports the measured saving), following
   stragglers when there is more than one data-parallel replica::

       perseus optimize out/gpt.csv -m 4 -o out   # schedule, V, fingerprint from gpt.json
       torchrun --nproc-per-node 4 examples/megatron_gpt.py --pipeline 2 --tensor 2 \\
           --recompute full --mode run --frontier out/frontier.json --calibrate 10 --iterations 40

   (``--profile out/gpt.csv`` instead of ``--frontier`` optimizes on every rank.)

   At the end rank 0 prints a table of the energy every GPU measured.
   (``--mode plain`` trains without perseus, for comparison.)

3. a straggler: ``--slow-replica 1 --slow-seconds 0.5 --slow-iterations 10:20``
   makes data-parallel replica 1 sleep 0.5 s more per iteration in
   iterations 10 to 19; the other replicas follow it and recover, and each
   replica's first rank logs its switches.

Locking clocks needs root or CAP_SYS_ADMIN. ``--virtual V`` uses the
interleaved schedule with V chunks per GPU. perseus is attached before
torch.distributed and Megatron are initialised, as it would wrap
Megatron-LM's ``pretrain(...)``.

Without a GPU, megatron-core's few hard-coded CUDA calls have to be
redirected; the test suite's shims do that (tests only)::

    python tests/megatron_support/cpu_launch.py --nproc 4 examples/megatron_gpt.py \\
        --cpu --pipeline 2 --tensor 2 --mode plain

The model, data and training step are also used by ``tests/test_megatron.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Optional

import perseus
import perseus.megatron
import torch
import torch.distributed as dist


def _span(text: str) -> tuple[int, int]:
    try:
        first, _, end = text.partition(":")
        return int(first), int(end)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected A:B (iterations A to B-1), not {text!r}"
        ) from None


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("plain", "profile", "run"), default="plain")
    parser.add_argument("--pipeline", type=int, default=2, help="pipeline-parallel size")
    parser.add_argument("--tensor", type=int, default=1, help="tensor-parallel size")
    parser.add_argument(
        "--virtual", type=int, default=1, help="model chunks per GPU (interleaved if > 1)"
    )
    parser.add_argument(
        "--recompute",
        choices=("none", "full", "selective"),
        default="none",
        help="activation recomputation (megatron's recompute_granularity)",
    )
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--layers-per-chunk", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--profile", type=Path, help="profile CSV: written in profile mode, read in run mode"
    )
    parser.add_argument(
        "--frontier",
        type=Path,
        help="run mode: the frontier.json `perseus optimize` wrote (instead of --profile, "
        "which optimizes on every rank)",
    )
    parser.add_argument(
        "--blocking-power",
        type=float,
        help="run mode: P_block in W (default: from the profile's .json sidecar)",
    )
    parser.add_argument(
        "--frequencies", type=str, help="profile mode: SM clocks to try, e.g. 1980,1500,1200"
    )
    parser.add_argument(
        "--calibrate",
        type=int,
        default=0,
        metavar="K",
        help="run mode: K iterations at the all-fastest plan, then K at the plan",
    )
    parser.add_argument("--report-every", type=int, default=10, metavar="N")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="every replica sleeps S s per iteration: a stand-in for work that dwarfs the "
        "noise of a loaded CPU (the toy model computes for milliseconds)",
    )
    parser.add_argument("--slow-replica", type=int, default=None, metavar="K")
    parser.add_argument("--slow-seconds", type=float, default=0.0, metavar="S")
    parser.add_argument(
        "--slow-iterations", type=_span, default=None, metavar="A:B", help="iterations A to B-1"
    )
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU (needs the test shims)")
    parser.add_argument(
        "--json", type=Path, help="write this rank's losses, gradient digests and metrics here"
    )
    return parser.parse_args(argv)


# -- distributed setup -------------------------------------------------------------


def initialize(
    pipeline: int,
    virtual: int,
    *,
    cpu: bool,
    seed: int,
    tensor: int = 1,
    timeout_s: float = 600.0,
) -> None:
    """torch.distributed from torchrun's environment, then megatron's parallel state."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if not dist.is_initialized():
        if not cpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("gloo" if cpu else "nccl", timeout=timedelta(seconds=timeout_s))
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor,
        pipeline_model_parallel_size=pipeline,
        virtual_pipeline_model_parallel_size=virtual if virtual > 1 else None,
    )
    # On the CPU there is no CUDA RNG to fork: megatron's inference tracker
    # forks nothing (and the model has no dropout).
    model_parallel_cuda_manual_seed(seed, inference_rng_tracker=cpu, force_reset_rng=True)


# -- the model and its training step ----------------------------------------------------


class Trainer:
    """A small GPT split into pipeline chunks, with megatron's DDP and optimizer.

    Parameters
    ----------
    args
        From :func:`parse_args`.
    delay_s
        Called with the iteration number at this rank's first forward of each
        iteration; its result is slept (seconds) there, to make this replica
        a straggler.
    """

    def __init__(
        self, args: argparse.Namespace, delay_s: Optional[Callable[[int], float]] = None
    ) -> None:
        from megatron.core import parallel_state
        from megatron.core.distributed import (
            DistributedDataParallel,
            DistributedDataParallelConfig,
            finalize_model_grads,
        )
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer.transformer_config import TransformerConfig

        self.args = args
        self.delay_s = delay_s or (lambda _iteration: 0.0)
        self.iteration = 0
        self._delayed = -1
        virtual = args.virtual if args.virtual > 1 else None
        recompute: dict[str, Any] = {}
        if args.recompute == "full":
            recompute = dict(
                recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1
            )
        elif args.recompute == "selective":
            recompute = dict(recompute_granularity="selective", recompute_modules=["core_attn"])
        torch.manual_seed(args.seed)  # the same weights in every run
        self.config = TransformerConfig(
            num_layers=args.pipeline * args.virtual * args.layers_per_chunk,
            hidden_size=args.hidden,
            num_attention_heads=args.heads,
            tensor_model_parallel_size=args.tensor,
            pipeline_model_parallel_size=args.pipeline,
            virtual_pipeline_model_parallel_size=virtual,
            pipeline_dtype=torch.float32,
            params_dtype=torch.float32,
            use_cpu_initialization=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bias_activation_fusion=False,
            masked_softmax_fusion=False,
            bias_dropout_fusion=False,
            gradient_accumulation_fusion=False,
            persist_layer_norm=False,
            # Interleaving on two stages with batched p2p gives wrong results
            # (megatron refuses it on GPUs); single sends work everywhere.
            batch_p2p_comm=not (args.virtual > 1 and args.pipeline == 2),
            **recompute,
        )
        self.chunks = []
        for chunk in range(args.virtual):
            model = GPTModel(
                config=self.config,
                transformer_layer_spec=get_gpt_layer_local_spec(),
                vocab_size=args.vocab,
                max_sequence_length=args.seq,
                pre_process=parallel_state.is_pipeline_first_stage(
                    ignore_virtual=False, vp_stage=chunk
                ),
                post_process=parallel_state.is_pipeline_last_stage(
                    ignore_virtual=False, vp_stage=chunk
                ),
                vp_stage=chunk,
            )
            if not args.cpu:
                model.cuda(torch.cuda.current_device())
            self.chunks.append(
                DistributedDataParallel(self.config, DistributedDataParallelConfig(), model)
            )
        self.config.no_sync_func = (
            [c.no_sync for c in self.chunks] if len(self.chunks) > 1 else self.chunks[0].no_sync
        )
        self.config.finalize_model_grads_func = finalize_model_grads
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=args.lr, clip_grad=0.0), self.chunks
        )
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        self.last_stage = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
        self.device = (
            torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
        )

    def batches(self) -> list[torch.Tensor]:
        """This iteration's microbatches (token ids, one more than the sequence for the labels)."""
        a = self.args
        generator = torch.Generator().manual_seed(
            a.seed * 1_000_003 + self.iteration * 101 + self.dp_rank
        )
        return [
            torch.randint(0, a.vocab, (a.micro_batch_size, a.seq + 1), generator=generator)
            for _ in range(a.microbatches)
        ]

    def forward_step(
        self, data_iterator: Any, model: Any
    ) -> tuple[torch.Tensor, Callable[..., Any]]:
        """megatron's ``forward_step_func``: one microbatch through one chunk."""
        if self._delayed != self.iteration:
            self._delayed = self.iteration
            delay = self.delay_s(self.iteration)
            if delay > 0:
                time.sleep(delay)
        tokens = labels = None
        if data_iterator is not None:
            batch = next(data_iterator).to(self.device)
            tokens, labels = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        a = self.args
        positions = (
            torch.arange(a.seq, device=self.device).unsqueeze(0).expand(a.micro_batch_size, a.seq)
        )
        output = model(tokens, positions, None, labels=labels)

        def loss_func(per_token: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss = per_token.float().mean()
            return loss, {"lm loss": loss.detach().clone()}

        return output, loss_func

    def step(self, digest: bool = False) -> Optional[float]:
        """One training iteration; the mean loss on the last stage, None elsewhere.

        With `digest`, ``self.grad_digest`` is set to a digest of the gradients.
        """
        for chunk in self.chunks:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self.forward_backward(forward_only=False)
        if digest:
            self.grad_digest = self.digest_gradients()
        self.optimizer.step()
        self.iteration += 1
        if self.last_stage and losses:
            return float(torch.stack([entry["lm loss"] for entry in losses]).mean())
        return None

    def forward_backward(self, *, forward_only: bool) -> Any:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        batches = self.batches()
        iterators = [iter(batches) for _ in self.chunks]
        return get_forward_backward_func()(
            forward_step_func=self.forward_step,
            data_iterator=iterators if len(iterators) > 1 else iterators[0],
            model=self.chunks if len(self.chunks) > 1 else self.chunks[0],
            num_microbatches=self.args.microbatches,
            seq_length=self.args.seq,
            micro_batch_size=self.args.micro_batch_size,
            forward_only=forward_only,
        )

    def evaluate(self) -> None:
        """A forward-only pass, as Megatron's evaluation runs it."""
        with torch.no_grad():
            self.forward_backward(forward_only=True)

    def digest_gradients(self) -> str:
        """SHA-256 of this rank's gradients, bit for bit."""
        digest = hashlib.sha256()
        for chunk in self.chunks:
            for name, param in sorted(chunk.module.named_parameters()):
                grad = getattr(param, "main_grad", None)
                if grad is None:
                    grad = param.grad
                digest.update(name.encode())
                if grad is not None:
                    digest.update(grad.detach().cpu().numpy().tobytes())
        return digest.hexdigest()


# -- the command line -------------------------------------------------------------------


def schedule_of(args: argparse.Namespace) -> str:
    return "interleaved-1f1b" if args.virtual > 1 else "1f1b"


def load_frontier(args: argparse.Namespace) -> perseus.Frontier:
    """The frontier for this pipeline: `perseus optimize`'s frontier.json (``--frontier``), or
    one optimized here from the profile written by profile mode."""
    if args.frontier is not None:
        return perseus.Frontier.load(args.frontier)
    if args.profile is None:
        raise SystemExit(
            "--mode run needs --frontier (perseus optimize's frontier.json) or --profile (the "
            "CSV profile mode wrote)"
        )
    blocking_w = args.blocking_power
    if blocking_w is None:
        sidecar = args.profile.with_suffix(".json")
        if not sidecar.exists():
            raise SystemExit(f"no {sidecar}: pass --blocking-power (W)")
        # The key perseus writes and reads (perseus._sidecar.BLOCKING_POWER_KEY); this
        # script keeps to the public API.
        blocking_w = json.loads(sidecar.read_text())["blocking_power_w"]
    profile = perseus.Profile.from_csv(args.profile, blocking_power_w=blocking_w)
    return perseus.optimize(
        profile,
        microbatches=args.microbatches,
        schedule=schedule_of(args),
        virtual_stages=args.virtual,
        progress=False,
    )


def delay_of(args: argparse.Namespace) -> Callable[[int], float]:
    """Seconds each replica's first pipeline stage sleeps per iteration: ``--step-seconds``,
    and ``--slow-seconds`` more for replica ``--slow-replica`` in ``--slow-iterations``."""
    first, end = args.slow_iterations or (0, args.iterations)

    def delay(iteration: int) -> float:
        from megatron.core import parallel_state as ps

        if ps.get_pipeline_model_parallel_rank() != 0:
            return 0.0
        slow = ps.get_data_parallel_rank() == args.slow_replica and first <= iteration < end
        return args.step_seconds + (args.slow_seconds if slow else 0.0)

    return delay


def attachment_of(args: argparse.Namespace, rank: int) -> Any:
    """The perseus attachment of this mode (entered before anything is initialised)."""
    from perseus.megatron import MetricsOptions, ProfileOptions

    if args.mode == "plain":
        return contextlib.nullcontext(None)
    if args.mode == "profile":
        if args.profile is None:
            raise SystemExit("--mode profile needs --profile (where to write the CSV)")
        options: dict[str, Any] = {"progress": rank == 0}
        if args.frequencies:
            options["frequencies_mhz"] = [int(f) for f in args.frequencies.split(",")]
        if args.cpu:  # quick sweeps against the fake NVML of the tests
            options.update(window_s=0.02, windows=1, warmup_s=0.0, blocking_window_s=0.05)
        return perseus.megatron.attach(
            profile=ProfileOptions(
                path=args.profile,
                profiler_mode="cpu" if args.cpu else "gpu",
                profiler_options=options,
                after="stop",
            )
        )
    return perseus.megatron.attach(
        load_frontier(args),
        metrics=MetricsOptions(report_every=args.report_every, calibrate=args.calibrate),
    )


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    log = logging.getLogger("perseus")  # switches, reports and calibration are logged at INFO
    log.setLevel(logging.INFO)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    log.addHandler(handler)
    rank = int(os.environ.get("RANK", 0))
    losses: list[Optional[float]] = []
    digests: list[str] = []
    with attachment_of(args, rank) as attached:
        # perseus reads the GPU and the layout at the first iteration, so it
        # may be attached before all of this, as around Megatron-LM's pretrain().
        initialize(args.pipeline, args.virtual, cpu=args.cpu, seed=args.seed, tensor=args.tensor)
        trainer = Trainer(args, delay_of(args))
        while trainer.iteration < args.iterations:
            started = time.perf_counter()
            loss = trainer.step(digest=args.json is not None)
            losses.append(loss)
            if args.json is not None:
                digests.append(trainer.grad_digest)
            if loss is not None:
                print(
                    f"rank {rank} iteration {trainer.iteration}: loss {loss:.5f} "
                    f"({time.perf_counter() - started:.3f} s)",
                    flush=True,
                )
    if args.mode == "profile" and rank == 0 and attached is not None and attached.profile:
        print(
            f"profile of {attached.profile.num_stages} stages written to {args.profile}",
            flush=True,
        )
    summaries: list[Any] = []
    if args.mode == "run" and attached is not None:
        summaries = [None] * dist.get_world_size()
        dist.all_gather_object(summaries, attached.metrics.summary())
        if rank == 0:
            print(perseus.megatron.format_energy_table(summaries), flush=True)
            plan, baseline = attached.base_plan, attached.frontier.baseline
            switches = sum(s["switches"] for s in summaries if s.get("model_parallel_rank") == 0)
            print(
                f"plan {plan.iteration_time_s:.4g} s / {plan.energy_j:.4g} J (baseline "
                f"{baseline.iteration_time_s:.4g} s / {baseline.energy_j:.4g} J); "
                f"{switches} straggler switch(es) over all replicas",
                flush=True,
            )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = args.json.with_name(f"{args.json.stem}.rank{rank}{args.json.suffix}")
        record: dict[str, Any] = {"losses": losses, "grad_digests": digests}
        if args.mode == "run" and attached is not None:
            record["switches"] = [s.__dict__ for s in attached.switches]
            record["summary"] = attached.metrics.summary()
            record["reports"] = [str(r) for r in attached.metrics.reports]
        out.write_text(json.dumps(record, default=str))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

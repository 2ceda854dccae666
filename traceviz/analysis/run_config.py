"""What a report needs to know about the training run that traces do not say.

Sources, later ones winning: a TorchTitan TOML config (``--config``), then command-line
flags. Peak FLOP/s default to the device's dense BF16 tensor peak (:mod:`.devices`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..errors import TraceVizError
from ..table.inputs import note_input
from .devices import device_of

# parameter counts of TorchTitan model flavors (for 6 N FLOPs per token)
MODEL_PARAMS = {
    ("llama3", "debugmodel"): 6.0e6, ("llama3", "8B"): 8.03e9, ("llama3", "70B"): 70.6e9,
    ("llama3", "405B"): 405.9e9, ("llama2", "7B"): 6.74e9, ("llama2", "13B"): 13.0e9,
    ("llama2", "70B"): 69.0e9,
}


def training_flops_per_token(params: float) -> float:
    """Training FLOPs per token of a dense transformer with ``params`` parameters: 6N
    (2N in the forward pass, 4N in the backward; attention's own FLOPs left out)."""
    return 6.0 * params


def peak_tflops_of(device_name: str | None) -> float | None:
    """Dense BF16 peak of a device, from its deviceProperties name (None: unknown)."""
    device = device_of(device_name)
    return device.peak("bf16") if device else None


@dataclass(frozen=True)
class RunConfig:
    """Facts about the run; None: unknown. ``global_batch_size`` is in sequences per
    iteration, ``seq_len`` in tokens, FLOPs per token count forward plus backward."""

    model: str | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    flops_per_token: float | None = None
    peak_tflops: float | None = None
    peak_bw_gbps: float | None = None
    parallelism: dict = field(default_factory=dict)
    source: str = "traces"

    @property
    def tokens_per_iteration(self) -> int | None:
        if self.global_batch_size and self.seq_len:
            return self.global_batch_size * self.seq_len
        return None

    def updated(self, **values) -> "RunConfig":
        """A copy with every value that is not None replaced."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def _read_toml(path: str | os.PathLike) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    note_input(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read the config: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TraceVizError(f"{path}: not a valid TOML file ({exc}); pass a TorchTitan "
                            "train config") from None


def from_torchtitan_toml(path: str | os.PathLike, world: int | None) -> RunConfig:
    """Model, batch and parallelism of a TorchTitan train config.

    Global batch = ``training.local_batch_size`` (older configs: ``batch_size``) x the
    data-parallel degree, ``replicate x shard``; a shard degree of -1 takes the ranks
    left over by the other degrees (needs ``world``)."""
    cfg = _read_toml(path)
    model, training = cfg.get("model", {}), cfg.get("training", {})
    par = dict(cfg.get("parallelism", {}))
    local = training.get("local_batch_size", training.get("batch_size"))
    rep = int(par.get("data_parallel_replicate_degree", 1))
    shard = int(par.get("data_parallel_shard_degree", -1 if world else 1))
    if shard < 0:
        other = rep
        for key in ("tensor_parallel_degree", "pipeline_parallel_degree",
                    "context_parallel_degree"):
            other *= int(par.get(key, 1))
        shard = max(1, (world or other) // other)
    name = model.get("name")
    flavor = model.get("flavor")
    params = MODEL_PARAMS.get((name, str(flavor)))
    return RunConfig(
        model=f"{name}{flavor or ''}" if name else None,
        global_batch_size=int(local) * rep * shard if local else None,
        seq_len=training.get("seq_len"),
        flops_per_token=training_flops_per_token(params) if params else None,
        parallelism={"dp_replicate": rep, "dp_shard": shard,
                     **{k: v for k, v in sorted(par.items())}},
        source=str(path))

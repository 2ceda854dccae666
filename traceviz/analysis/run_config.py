"""What a report needs to know about the training run that traces do not say.

Sources, later ones winning: a TorchTitan TOML config (``--config``), then command-line
flags. Peak FLOP/s default to the device's dense BF16 tensor peak (:mod:`.devices`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..errors import TraceVizError
from ..table.inputs import note_input
from ..topology.layout import MAX_WORLD
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
    except UnicodeDecodeError as exc:
        raise TraceVizError(f"{path}: byte {exc.start}: not UTF-8 text; pass a TorchTitan "
                            "train config (TOML)") from None


MAX_COUNT = 1 << 40  # sequences per batch, tokens per sequence: beyond is no real run


def _table(cfg: dict, section: str, path) -> dict:
    """The config's ``[section]`` table ({} when absent)."""
    value = cfg.get(section, {})
    if not isinstance(value, dict):
        raise TraceVizError(f"{path}: '{section}' is not a table ([{section}])")
    return value


def from_torchtitan_toml(path: str | os.PathLike, world: int | None) -> RunConfig:
    """Model, batch and parallelism of a TorchTitan train config.

    Global batch = ``training.local_batch_size`` (older configs: ``batch_size``) x the
    data-parallel degree, ``replicate x shard``; a shard degree of -1 takes the ranks
    left over by the other degrees (needs ``world``)."""
    cfg = _read_toml(path)
    model, training = _table(cfg, "model", path), _table(cfg, "training", path)
    par = dict(_table(cfg, "parallelism", path))

    def count(table: dict, section: str, key: str, default, limit: int, auto: bool = False):
        """A positive whole number (``auto``: or -1, 'the rest') at most ``limit``."""
        value = table.get(key, default)
        if value is None or (auto and value == -1 and not isinstance(value, bool)):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit:
            return value
        raise TraceVizError(f"{path}: [{section}] {key} = {value!r} is not a whole number "
                            f"from 1 to {limit:,}" + (" (or -1)" if auto else ""))

    local = count(training, "training", "local_batch_size",
                  training.get("batch_size"), MAX_COUNT)
    if "local_batch_size" not in training:
        local = count(training, "training", "batch_size", None, MAX_COUNT)
    seq_len = count(training, "training", "seq_len", None, MAX_COUNT)
    rep = count(par, "parallelism", "data_parallel_replicate_degree", 1, MAX_WORLD)
    shard = count(par, "parallelism", "data_parallel_shard_degree", -1 if world else 1,
                  MAX_WORLD, auto=True)
    if shard < 0:
        other = rep
        for key in ("tensor_parallel_degree", "pipeline_parallel_degree",
                    "context_parallel_degree"):
            other *= count(par, "parallelism", key, 1, MAX_WORLD)
        shard = max(1, (world or other) // other)
    name = model.get("name")
    flavor = model.get("flavor")
    params = MODEL_PARAMS.get((str(name), str(flavor)))
    return RunConfig(
        model=f"{name}{flavor or ''}" if name else None,
        global_batch_size=int(local) * rep * shard if local else None,
        seq_len=seq_len,
        flops_per_token=training_flops_per_token(params) if params else None,
        parallelism={"dp_replicate": rep, "dp_shard": shard,
                     **{k: v for k, v in sorted(par.items())}},
        source=str(path))

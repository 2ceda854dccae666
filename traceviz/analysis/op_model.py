"""FLOPs and bytes of one operator call from the shapes ``record_shapes`` writes
(``Input Dims``, ``Input type``, ``Concrete Inputs``).

Families and formulas (``e``: bytes per element of the operand's dtype):

- ``gemm``: ``aten::mm`` A[M,K] B[K,N]: 2MKN FLOPs, bytes (MK + KN + MN)e;
  ``aten::addmm`` (bias, A, B) and ``aten::_addmm_activation``: the same plus the bias
  read; ``aten::bmm`` [B,M,K] [B,K,N] and ``aten::baddbmm`` (C, A, B): 2BMKN;
  ``aten::matmul`` (broadcast batch dims, 1-D operands as vectors) and ``aten::linear``
  (x[..., K], W[N, K]): 2 x rows x K x N; ``aten::_scaled_mm`` (FP8) as mm;
  ``aten::_grouped_mm`` (MoE): A[T,K] x B[G,K,N] -> 2TKN, [G,M,K] x [G,K,N] -> 2GMKN,
  A[M,K] x B[K,N] with groups along K -> 2MKN;
- ``attention``: ``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention`` and
  ``aten::scaled_dot_product_attention`` (q[B,H,S,D], k[B,H,Sk,D], v[B,H,Sk,Dv]): 2BHS Sk
  (D + Dv), halved when causal (the op's ``is_causal`` / ``causal`` in Concrete Inputs at
  its schema's position, the memory-efficient ops' ``custom_mask_type`` != 0); ``_backward``:
  2.5x that (flash backward recomputes Q K^T: five matmuls for the forward's two);
  flash-attn's ``flash_attn::_flash_attn_forward`` / ``_backward`` (q[B,S,H,D]) alike;
  bytes: q, k, v and the output (forward) / their gradients too (backward);
- ``conv``: ``aten::convolution`` / ``aten::_convolution`` (x[N,C,*], W[O,C/g,*k],
  stride, padding, dilation from Concrete Inputs): 2 N O prod(out) (C/g) prod(k);
  ``aten::convolution_backward``: twice that (input and weight gradients);
- ``elementwise`` / ``norm`` / ``softmax`` (a list of aten names): bytes only, every
  tensor input read once and an output the size of the largest input written; FLOPs
  unknown (None). ``copy_`` / ``fill_`` / ``zero_`` overwrite their first input: it is
  written once and not read (``copy_``: source read + destination written, each in its
  own dtype; ``fill_``: the destination written).

Anything else is not modelled (``family`` None). Shapes that do not fit the formula
(missing dims, wrong rank) give None: unknown is never 0. ``dtype`` is the data type
that sets the peak: ``fp64``, ``fp32``, ``bf16`` (also FP16), ``fp8`` (None unknown).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import orjson

# bytes per element and peak class by Input type text
ELEMENT = {"float": (4, "fp32"), "double": (8, "fp64"), "c10::Half": (2, "bf16"),
           "c10::BFloat16": (2, "bf16"), "Half": (2, "bf16"), "BFloat16": (2, "bf16"),
           "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"),
           "c10::Float8_e4m3fnuz": (1, "fp8"), "c10::Float8_e5m2fnuz": (1, "fp8"),
           "long int": (8, None), "long": (8, None), "int": (4, None), "bool": (1, None),
           "unsigned char": (1, None), "signed char": (1, None), "short int": (2, None),
           "c10::complex<float>": (8, "fp32")}

GEMM = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm",
        "aten::matmul", "aten::linear", "aten::_scaled_mm", "aten::_grouped_mm"}
# attention ops: (index of q in the inputs, index of the causal flag in Concrete Inputs,
# layout of q: "bhsd" / "bshd", backward). Indices are the ops' schemas in PyTorch's
# native_functions.yaml (flash-attn's own for ``flash_attn::``); the memory-efficient
# kernels take an int ``custom_mask_type`` (0 none, 1 / 2 causal) where the others take
# a bool ``is_causal`` / ``causal`` (see MASK_TYPE).
ATTENTION = {
    # (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    "aten::scaled_dot_product_attention": (0, 5, "bhsd", False),
    # (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    "aten::_scaled_dot_product_flash_attention": (0, 4, "bhsd", False),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale)
    "aten::_scaled_dot_product_efficient_attention": (0, 6, "bhsd", False),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_cudnn_attention": (0, 6, "bhsd", False),
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    #  dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention_backward": (1, 11, "bhsd", True),
    # (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed,
    #  philox_offset, dropout_p, grad_input_mask, is_causal, scale)
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 11, "bhsd", True),
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset,
    #  attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, 14, "bhsd", True),
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_flash_attention_forward": (0, 8, "bshd", False),
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    #  dropout_p, is_causal, ...)
    "aten::_flash_attention_backward": (1, 11, "bshd", True),
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    #  dropout_p, custom_mask_type, ...)
    "aten::_efficient_attention_forward": (0, 9, "bshd", False),
    # (grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    #  max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type, ...)
    "aten::_efficient_attention_backward": (1, 14, "bshd", True),
    # flash-attn 2: (q, k, v, dropout_p, softmax_scale, causal, ...)
    "flash_attn::_flash_attn_forward": (0, 5, "bshd", False),
    "FlashAttnFunc": (0, 5, "bshd", False),  # flash-attn's autograd function
    "aiter::_flash_attn_forward": (0, 5, "bshd", False),  # ROCm's flash-attn port
    # (dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal, ...)
    "flash_attn::_flash_attn_backward": (1, 11, "bshd", True),
}
MASK_TYPE = {"aten::_efficient_attention_forward", "aten::_efficient_attention_backward"}
# in-place ops that overwrite their first input without reading it
OVERWRITE = {"aten::copy_", "aten::fill_", "aten::zero_"}
CONV = {"aten::convolution", "aten::_convolution", "aten::convolution_backward"}
ELEMENTWISE = re.compile(
    r"^aten::(add|sub|mul|div|neg|abs|exp|log|sqrt|rsqrt|pow|clamp|where|maximum|minimum|"
    r"copy|fill|zero|relu|gelu|silu|sigmoid|tanh|dropout|native_dropout|masked_fill|"
    r"gelu_backward|silu_backward|threshold_backward|sigmoid_backward|tanh_backward|"
    r"native_dropout_backward|mul_|add_|div_|sub_|lerp|addcmul|addcdiv|"
    r"_foreach_\w+)_?$")
NORM = re.compile(r"^aten::(native_layer_norm|layer_norm|rms_norm|_fused_rms_norm|"
                  r"native_layer_norm_backward|_fused_rms_norm_backward|native_batch_norm|"
                  r"group_norm|native_group_norm)$")
SOFTMAX = re.compile(r"^aten::(_?softmax|_?log_softmax|_softmax_backward_data|"
                     r"_log_softmax_backward_data)$")


@dataclass(frozen=True)
class Model:
    """What one call does: its family, FLOPs and bytes (None: unknown) and the dtype
    class that sets its peak."""

    family: str | None
    flops: float | None
    nbytes: float | None
    dtype: str | None


NOT_MODELLED = Model(None, None, None, None)


def family(name: str) -> str | None:
    """The family of an op name (None: not modelled)."""
    if name in GEMM:
        return "gemm"
    if name in ATTENTION:
        return "attention"
    if name in CONV:
        return "conv"
    if NORM.match(name):
        return "norm"
    if SOFTMAX.match(name):
        return "softmax"
    if ELEMENTWISE.match(name):
        return "elementwise"
    return None


def _load(text: str | None) -> list:
    if not text:
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def compact(text: str | None) -> str | None:
    """A shapes text on one line (``[[4096, 1024], [1024]]``) however the trace spaced
    it; the text itself when it is not JSON."""
    value = _load(text)
    return json.dumps(value) if value else text


def _numel(dims) -> int:
    return math.prod(int(d) for d in dims) if isinstance(dims, list) else 0


def _shape(dims, i: int) -> list[int] | None:
    """The shape of input ``i`` when it is a tensor (a list of ints), else None."""
    if i >= len(dims) or not isinstance(dims[i], list) or not dims[i]:
        return None
    if not all(isinstance(d, int) for d in dims[i]):
        return None
    return dims[i]


def _tensor(dims, i: int) -> list[int]:
    """The shape of input ``i``; ValueError when it is not a tensor (the op is then
    not modelled)."""
    shape = _shape(dims, i)
    if shape is None:
        raise ValueError(f"input {i} is not a tensor")
    return shape


def model(name: str, dims_text: str | None, types_text: str | None,
          concrete_text: str | None) -> Model:
    """The model of one call (see the module doc)."""
    fam = family(name)
    if fam is None:
        return NOT_MODELLED
    dims, types, concrete = _load(dims_text), _load(types_text), _load(concrete_text)
    if not dims:
        return Model(fam, None, None, None)
    sizes = [ELEMENT.get(t, (None, None)) if isinstance(t, str) else (None, None)
             for t in types] + [(None, None)] * max(0, len(dims) - len(types))
    tensors = [i for i in range(len(dims)) if _shape(dims, i) is not None]
    dtype = next((sizes[i][1] for i in tensors if sizes[i][1]), None)
    e = next((sizes[i][0] for i in tensors if sizes[i][0]), None)
    try:
        if fam == "gemm":
            flops, out = _gemm(name, dims)
        elif fam == "attention":
            flops, out = _attention(name, dims, concrete)
        elif fam == "conv":
            flops, out = _conv(name, dims, concrete)
        else:
            flops, out = None, max((_numel(dims[i]) for i in tensors), default=0)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return Model(fam, None, None, dtype)
    if e is None or out is None:
        return Model(fam, flops, None, dtype)
    if name in OVERWRITE and tensors and tensors[0] == 0:
        # the destination is written, not read: bytes = the sources read + it written
        read = sum(_numel(dims[i]) * (sizes[i][0] or e) for i in tensors[1:])
        return Model(fam, flops, float(read + _numel(dims[0]) * (sizes[0][0] or e)), dtype)
    read = sum(_numel(dims[i]) * (sizes[i][0] or e) for i in tensors)
    return Model(fam, flops, float(read + out * e), dtype)


def _gemm(name: str, dims) -> tuple[float | None, int | None]:
    """(FLOPs, output elements) of a GEMM-family op."""
    if name in ("aten::mm", "aten::_scaled_mm"):
        (m, k), (_, n) = _tensor(dims, 0), _tensor(dims, 1)
        return 2.0 * m * k * n, m * n
    if name in ("aten::addmm", "aten::_addmm_activation"):
        (m, k), (_, n) = _tensor(dims, 1), _tensor(dims, 2)
        return 2.0 * m * k * n, m * n
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = _tensor(dims, 0), _tensor(dims, 1)
        return 2.0 * b * m * k * n, b * m * n
    if name == "aten::baddbmm":
        (b, m, k), (_, _, n) = _tensor(dims, 1), _tensor(dims, 2)
        return 2.0 * b * m * k * n, b * m * n
    if name == "aten::linear":
        x, w = _tensor(dims, 0), _tensor(dims, 1)
        n, k = w if len(w) == 2 else (1, w[0])
        rows = math.prod(x[:-1])
        return 2.0 * rows * k * n, rows * n
    if name == "aten::matmul":
        lhs, rhs = _tensor(dims, 0), _tensor(dims, 1)
        if len(lhs) == 1 and len(rhs) == 1:
            return 2.0 * lhs[0], 1
        if len(rhs) == 1:
            rows = math.prod(lhs[:-1])
            return 2.0 * rows * lhs[-1], rows
        if len(lhs) == 1:
            batch = math.prod(rhs[:-2])
            return 2.0 * batch * lhs[0] * rhs[-1], batch * rhs[-1]
        batch = math.prod(_broadcast(lhs[:-2], rhs[:-2]))
        m, k, n = lhs[-2], lhs[-1], rhs[-1]
        return 2.0 * batch * m * k * n, batch * m * n
    if name == "aten::_grouped_mm":
        lhs, rhs = _tensor(dims, 0), _tensor(dims, 1)
        if len(lhs) == 2 and len(rhs) == 3:
            return 2.0 * lhs[0] * lhs[1] * rhs[2], lhs[0] * rhs[2]
        if len(lhs) == 3 and len(rhs) == 3:
            return 2.0 * lhs[0] * lhs[1] * lhs[2] * rhs[2], lhs[0] * lhs[1] * rhs[2]
        if len(lhs) == 2 and len(rhs) == 2:
            return 2.0 * lhs[0] * lhs[1] * rhs[1], lhs[0] * rhs[1]
        if len(lhs) == 3 and len(rhs) == 2:
            return 2.0 * lhs[0] * lhs[1] * lhs[2] * rhs[1], lhs[0] * lhs[1] * rhs[1]
    raise ValueError(name)


def _broadcast(x: list[int], y: list[int]) -> list[int]:
    n = max(len(x), len(y))
    x, y = [1] * (n - len(x)) + list(x), [1] * (n - len(y)) + list(y)
    return [max(a, b) for a, b in zip(x, y)]


def _causal(name: str, concrete: list, i: int) -> bool:
    """Whether the call's causal argument (input ``i``) says causal: ``True`` for a
    bool flag, a nonzero ``custom_mask_type`` for the memory-efficient kernels."""
    text = str(concrete[i]).strip() if i < len(concrete) else ""
    if name in MASK_TYPE:
        return text.lstrip("-").isdigit() and int(text) != 0
    return text == "True"


def _attention(name: str, dims, concrete) -> tuple[float, int]:
    qi, causal_at, layout, backward = ATTENTION[name]
    q, k, v = _tensor(dims, qi), _tensor(dims, qi + 1), _tensor(dims, qi + 2)
    if layout == "bhsd":
        b, h, s, d = q[-4] if len(q) == 4 else 1, q[-3], q[-2], q[-1]
        sk, dv = k[-2], v[-1]
    else:  # bshd
        b, s, h, d = q[-4] if len(q) == 4 else 1, q[-3], q[-2], q[-1]
        sk, dv = k[-3], v[-1]
    flops = 2.0 * b * h * s * sk * (d + dv)
    if _causal(name, concrete, causal_at):
        flops /= 2
    return (2.5 * flops if backward else flops), b * h * s * dv


def _ints(text) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", str(text))]


def _conv(name: str, dims, concrete) -> tuple[float, int]:
    backward = name == "aten::convolution_backward"
    x, w = (_tensor(dims, 1), _tensor(dims, 2)) if backward else \
        (_tensor(dims, 0), _tensor(dims, 1))
    if backward:
        out = _tensor(dims, 0)[2:]
    else:
        k = w[2:]
        n_sp = len(k)

        def arg(i, default):
            v = _ints(concrete[i]) if i < len(concrete) else []
            return (v * n_sp)[:n_sp] if v else [default] * n_sp

        stride, padding, dilation = arg(3, 1), arg(4, 0), arg(5, 1)
        out = [(x[2 + i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1
               for i in range(n_sp)]
    n, o, cg = x[0], w[0], w[1]
    flops = 2.0 * n * o * math.prod(out) * cg * math.prod(w[2:])  # W is [O, C/g, *k]
    return (2 * flops if backward else flops), n * o * math.prod(out)

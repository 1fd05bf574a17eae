# Type stubs of the jomoim package (the compiled jomoim._jomoim re-exported by __init__.py).
from typing import Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
KeyLengths = Union[Sequence[int], npt.NDArray[np.integer]]
Notation = Literal["paper", "3b1b"]

class Error(ValueError):
    """The engine's refusal of an argument; the message is one line naming it."""

@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[False] = ...,
              return_probs: Literal[False] = ..., threads: Optional[int] = ...) -> F32:
    """Exact scaled dot-product attention (float32, any strides; the GIL is released).

    q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv] -> out [B, Hq, Nq, Dv]
    (notation="3b1b": [B, H, D, N] each). Returns out, or (out, lse), (out, probs),
    (out, lse, probs) per the flags; lse [B, Hq, Nq], probs [B, Hq, Nq, Nk].
    Raises TypeError for wrong types, jomoim.Error (ValueError) for invalid arguments.
    """
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[True],
              return_probs: Literal[False] = ..., threads: Optional[int] = ...) -> Tuple[F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[False] = ...,
              return_probs: Literal[True], threads: Optional[int] = ...) -> Tuple[F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[True],
              return_probs: Literal[True], threads: Optional[int] = ...) -> Tuple[F32, F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: bool = ..., return_probs: bool = ...,
              threads: Optional[int] = ...) -> Union[F32, Tuple[F32, F32], Tuple[F32, F32, F32]]: ...

def attention_reference(q: F32, k: F32, v: F32, *, causal: bool = False, scale: Optional[float] = None,
                        bias: Optional[F32] = None, key_lengths: Optional[KeyLengths] = None,
                        notation: Notation = "paper", return_lse: bool = False,
                        return_probs: bool = False) -> Union[F64, Tuple[F64, F64], Tuple[F64, F64, F64]]:
    """The float64 oracle of attention(): same arguments (no threads), float64 results."""

def simd_targets() -> list[str]:
    """SIMD targets compiled into the engine that this CPU can run, best first."""

def active_simd_target() -> str:
    """The SIMD target the kernels dispatch to now."""

def set_simd_target(name: str) -> None:
    """Restricts dispatch to one of simd_targets(); '' restores the default. Not thread-safe."""

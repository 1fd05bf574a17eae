# Type stubs of the jomoim package: the compiled jomoim._jomoim and jomoim/model.py, re-exported by __init__.py.
import os
from typing import Any, Dict, Iterable, Iterator, List, Literal, NamedTuple, Optional, Sequence, Tuple, Union, overload

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
              return_probs: Literal[False] = ..., threads: Optional[int] = ..., dtype: Optional[str] = ...) -> F32:
    """Exact scaled dot-product attention (float32 math, any strides; the GIL is released).

    q, k, v: one dtype, float32 or float16, or bfloat16 (uint16 bits with dtype="bf16", or an
    array whose dtype is named "bfloat16"); 16-bit inputs are widened exactly; out is float32.

    q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv] -> out [B, Hq, Nq, Dv]
    (notation="3b1b": [B, H, D, N] each). Returns out, or (out, lse), (out, probs),
    (out, lse, probs) per the flags; lse [B, Hq, Nq], probs [B, Hq, Nq, Nk].
    Raises TypeError for wrong types, jomoim.Error (ValueError) for invalid arguments.
    """
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[True],
              return_probs: Literal[False] = ..., threads: Optional[int] = ..., dtype: Optional[str] = ...) -> Tuple[F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[False] = ...,
              return_probs: Literal[True], threads: Optional[int] = ..., dtype: Optional[str] = ...) -> Tuple[F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: Literal[True],
              return_probs: Literal[True], threads: Optional[int] = ..., dtype: Optional[str] = ...) -> Tuple[F32, F32, F32]: ...
@overload
def attention(q: F32, k: F32, v: F32, *, causal: bool = ..., scale: Optional[float] = ...,
              bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
              notation: Notation = ..., return_lse: bool = ..., return_probs: bool = ...,
              threads: Optional[int] = ..., dtype: Optional[str] = ...) -> Union[F32, Tuple[F32, F32], Tuple[F32, F32, F32]]: ...

def attention_reference(q: F32, k: F32, v: F32, *, causal: bool = False, scale: Optional[float] = None,
                        bias: Optional[F32] = None, key_lengths: Optional[KeyLengths] = None,
                        notation: Notation = "paper", return_lse: bool = False,
                        return_probs: bool = False, dtype: Optional[str] = None) -> Union[F64, Tuple[F64, F64], Tuple[F64, F64, F64]]:
    """The float64 oracle of attention(): same arguments (no threads), float64 results."""

I8 = npt.NDArray[np.int8]
Q8 = Tuple[I8, F32]

def quantize_q8(x: F32, *, block: int = 32) -> Q8:
    """The q8 format: (int8 values of x's shape, float32 scales [..., D / block]); x ~ scale * value.

    block: a multiple of 16 dividing D (32: ggml's Q8_0). Raises TypeError for a dtype other than
    float32, jomoim.Error for a bad block size, a wrong rank (1 to 4) or a non-finite value.
    """

def dequantize_q8(values: I8, scales: F32, *, block: Optional[int] = None) -> F32:
    """scale * value, element by element, float32 of values' shape (block None: D / scales.shape[-1])."""

@overload
def attention_q8kv(q: F32, k: Q8, v: Q8, *, causal: bool = ..., scale: Optional[float] = ...,
                   bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
                   notation: Notation = ..., return_lse: Literal[False] = ..., threads: Optional[int] = ...) -> F32:
    """attention() with k and v as quantize_q8's (values, scales) pairs, [B, Hkv, Nk, D] in C order.

    Equal to the float64 formula on dequantize_q8(*k), dequantize_q8(*v) within float32 rounding.
    Returns out, or (out, lse) with return_lse.
    """
@overload
def attention_q8kv(q: F32, k: Q8, v: Q8, *, causal: bool = ..., scale: Optional[float] = ...,
                   bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
                   notation: Notation = ..., return_lse: Literal[True], threads: Optional[int] = ...) -> Tuple[F32, F32]: ...

U8 = npt.NDArray[np.uint8]
Q4 = Tuple[U8, F32]

def quantize_q4(x: F32, *, block: int = 32) -> Q4:
    """The q4 format: (uint8 values [..., D / 2], two a byte, float32 scales [..., D / block]).

    Each block: scale = max|x| / 7, value = round_half_even(x / scale) in [-7, 7], stored + 8; byte
    i of a row holds value i (low nibble) and value i + D / 2 (high nibble). block: a multiple of
    32 dividing D. Raises as quantize_q8.
    """

def dequantize_q4(values: U8, scales: F32, *, block: Optional[int] = None) -> F32:
    """scale * value, element by element, float32 [..., D] (D = 2 * values.shape[-1])."""

@overload
def attention_q4kv(q: F32, k: Q4, v: Q4, *, causal: bool = ..., scale: Optional[float] = ...,
                   bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
                   notation: Notation = ..., return_lse: Literal[False] = ..., threads: Optional[int] = ...) -> F32:
    """attention_q8kv with k and v as quantize_q4's (values, scales) pairs.

    Equal to the float64 formula on dequantize_q4(*k), dequantize_q4(*v) within float32 rounding.
    """
@overload
def attention_q4kv(q: F32, k: Q4, v: Q4, *, causal: bool = ..., scale: Optional[float] = ...,
                   bias: Optional[F32] = ..., key_lengths: Optional[KeyLengths] = ...,
                   notation: Notation = ..., return_lse: Literal[True], threads: Optional[int] = ...) -> Tuple[F32, F32]: ...

def simd_targets() -> list[str]:
    """SIMD targets compiled into the engine that this CPU can run, best first."""

def active_simd_target() -> str:
    """The SIMD target the kernels dispatch to now."""

def set_simd_target(name: str) -> None:
    """Restricts dispatch to one of simd_targets(); '' restores the default. Not thread-safe."""

# ---------------------------------------------------------------------------------------------
# The model (python/jomoim/model.py).

Text = Union[str, bytes]
Ids = Union[Sequence[int], npt.NDArray[np.integer]]

def default_model_dir() -> str:
    """$JOMOIM_MODEL, else models/default next to the package, else the source tree's; jomoim.Error if none."""

class Prediction(NamedTuple):
    """One next-token candidate: id, text (UTF-8, invalid bytes as \\xNN), probability (float64 softmax), logit."""
    id: int
    text: str
    probability: float
    logit: float

class Stream(Iterator[str]):
    """A generation in progress: iterates text pieces; "".join(stream) == model.decode(stream.ids)."""
    @property
    def prompt_ids(self) -> List[int]: ...
    @property
    def ids(self) -> List[int]: ...
    @property
    def seed(self) -> int: ...
    @property
    def stop(self) -> Optional[Literal["length", "eos", "context", "error"]]: ...
    def __iter__(self) -> Stream: ...
    def __next__(self) -> str: ...

class Model:
    """A GPT-2-architecture model and its tokenizer (Hugging Face model directory). Thread-safe; GIL released in forward passes."""
    @classmethod
    def load(cls, path: Union[str, os.PathLike[str], None] = None, *, threads: Optional[int] = None,
             kv_cache: Literal["f32", "bf16", "q8", "q4"] = "f32", weights: Literal["f32", "bf16", "q8"] = "f32",
             matmul: Literal["f32", "bf16"] = "f32") -> Model:
        """Loads a model directory (config.json, model.safetensors, vocab.json, merges.txt); None: default_model_dir().

        kv_cache, weights, matmul: the formats of the commands' --kv-cache, --weights and --matmul.
        """
    @property
    def path(self) -> str: ...
    @property
    def kv_cache(self) -> str: ...
    @property
    def weights(self) -> str: ...
    @property
    def matmul(self) -> str: ...
    @property
    def weight_bytes(self) -> int: ...
    @property
    def config(self) -> Dict[str, Any]:
        """n_layer, n_head, n_embd, n_positions, vocab_size, n_inner, layer_norm_epsilon, activation_function, head_dim."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_id(self) -> Optional[int]: ...
    @property
    def parameter_count(self) -> int: ...
    def tokenize(self, text: Text) -> List[int]:
        """Token ids of text (str as UTF-8, or bytes), as `jomoim tokenize`."""
    def decode(self, ids: Ids) -> str:
        """Text of ids, UTF-8 with invalid sequences replaced by U+FFFD."""
    def decode_bytes(self, ids: Ids) -> bytes:
        """The exact bytes of ids."""
    def token_bytes(self, id: int) -> bytes: ...
    def logits(self, ids: Ids) -> F32:
        """Logits of every position, a new float32 array [len(ids), vocab_size]."""
    def predict(self, text: Text, top: int = 10) -> List[Prediction]:
        """The top most likely next tokens, as `jomoim predict --json`."""
    def stream(self, text: Text, n: int = 50, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
               seed: Optional[int] = None, stop_at_eos: bool = True) -> Stream:
        """Continues text token by token (the loop of `jomoim generate`); seed None draws one in [0, 2**32), as the CLI does."""
    def generate(self, text: Text, n: int = 50, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 seed: Optional[int] = None, stop_at_eos: bool = True) -> str:
        """The continuation of text, as str."""
    def explain(self, text: Text, *, layer: Optional[int] = None, head: Optional[int] = None,
                silence: Iterable[int] = (), swap_qk: bool = False, top: int = 10, compare: Optional[Text] = None,
                notation: Notation = "paper", matrices: bool = True, target: Optional[Text] = None,
                contrast: Optional[Text] = None, generate: int = 0, temperature: float = 0.0, top_k: int = 40,
                top_p: float = 0.95, seed: Optional[int] = None, stop_at_eos: bool = True) -> Dict[str, Any]:
        """`jomoim explain --json` (schema jomoim.explain/1) as Python objects; per head q, k, v, out, weights,
        scores, scaled (-inf where masked) are float32 arrays, mask a bool array (see the docstring)."""
    def head_roles(self, text: Optional[Text] = None, *, swap_qk: bool = False) -> Dict[str, Any]:
        """`jomoim heads --json` (schema jomoim.heads/1): every head's previous-token, first-token, self and
        induction scores and labels."""

"""jomoim.Model — a GPT-2-architecture model from Python: tokenize, logits, predict, generate, explain.

    import jomoim
    m = jomoim.Model.load()                  # the default model ($JOMOIM_MODEL, else the repository's)
    m.tokenize("I have a lot")               # [40, 423, 257, 1256]
    m.logits(m.tokenize("I have"))           # numpy float32 [T, vocab]
    m.predict("I have a lot", top=5)         # [Prediction(id=286, text=' of', probability=0.41, logit=...), ...]
    m.generate("I have a lot", n=20, seed=1) # the continuation, as str
    for piece in m.stream("Once", n=20):     # the same, token by token
        print(piece, end="", flush=True)

A thin layer over the compiled jomoim._jomoim._Model (python/src/model.cpp), which runs the
C++ runtime (include/jomoim/model/model.hpp, tokenizer.hpp, sampling.hpp) with the rules of the
commands `jomoim tokenize | predict | generate | explain`: the same arguments give the same ids,
probabilities and samples as the CLI. Forward passes release the GIL; a Model may be shared by
threads (each call has its own KV cache). Errors: jomoim.Error (a ValueError) with the engine's
one-line message; arguments of the wrong type raise TypeError.
"""
import codecs
import math
import operator
import os
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from ._jomoim import Error, _Model

__all__ = ["Model", "Prediction", "Stream", "default_model_dir"]

Text = Union[str, bytes]


def default_model_dir() -> str:
    """The directory Model.load() reads when no path is given, found like the CLI's default.

    In order: the JOMOIM_MODEL environment variable (when set and not empty); models/default
    next to this package (an installed package that ships a model); share/jomoim/models/default
    of the CMake build tree the package sits in (<build>/python/jomoim). No path is compiled in.
    Raises jomoim.Error when none of them exists.
    """
    env = os.environ.get("JOMOIM_MODEL")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "models", "default")
    build_tree = os.path.normpath(os.path.join(here, "..", "..", "share", "jomoim", "models", "default"))
    for candidate in (shipped, build_tree):
        if os.path.isdir(candidate):
            return candidate
    raise Error(f"no path given and no default model at {shipped} or {build_tree} "
                "(pass a GPT-2 model directory, or set JOMOIM_MODEL)")


def _text(name: str, text) -> bytes:
    """str (encoded as UTF-8) or bytes-like (used as is) -> bytes."""
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates
            raise Error(f"{name}: not encodable as UTF-8 ({e.reason} at index {e.start})") from None
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise TypeError(f"{name}: expected str or bytes, got {type(text).__name__}")


def _int(name: str, value, lo: int, hi: int, what: str) -> int:
    """An integer argument (operator.index: not floats, not bools' look-alikes) within [lo, hi]."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected an integer, got bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise Error(f"{name} must be {what}, got {v}")
    return v


def _real(name: str, value) -> float:
    if isinstance(value, (bool, complex)) or not hasattr(value, "__float__"):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    v = float(value)
    if math.isfinite(v) and abs(v) > float(np.finfo(np.float32).max):
        raise Error(f"{name} must be a finite float32 number, got {v}")
    return v


def _token_text(raw: bytes) -> str:
    """A token's bytes as text: UTF-8, with bytes that are not (a token may hold part of a
    character) spelled as \\xNN escapes, as the CLI prints them."""
    return raw.decode("utf-8", errors="backslashreplace")


# Model.explain(): which fields of the JSON (docs/explain.md) become NumPy arrays, and of what type.
def _sampling(temperature, top_k, top_p, seed, stop_at_eos):
    """The sampling options of generate() and explain(generate=...), checked in this order (the
    engine checks their ranges); stop_at_eos must be a bool."""
    temperature = _real("temperature", temperature)
    top_k = _int("top_k", top_k, 0, 2**31 - 1, ">= 0")
    top_p = _real("top_p", top_p)
    if seed is not None:
        seed = _int("seed", seed, 0, 2**64 - 1, "in [0, 2**64)")
    if not isinstance(stop_at_eos, bool):
        raise TypeError(f"stop_at_eos: expected True or False, got {type(stop_at_eos).__name__}")
    return temperature, top_k, top_p, seed


def _opt_int(name: str, value) -> Optional[int]:
    return None if value is None else _int(name, value, -2**31, 2**31 - 1, "an int32")


class Prediction(NamedTuple):
    """One candidate for the next token (Model.predict)."""

    id: int
    """The token id."""
    text: str
    """The token's bytes as UTF-8; bytes that are not valid UTF-8 are written as \\xNN."""
    probability: float
    """softmax(logits)[id], computed in float64 over the whole vocabulary."""
    logit: float
    """The model's raw score for the token (float32)."""


class Stream:
    """A generation in progress (Model.stream): an iterator of text pieces, one or more tokens each.

    Each step runs one forward pass (the first one the whole prompt) with the GIL released and
    samples one token. The pieces are the generated bytes decoded incrementally as UTF-8
    (invalid sequences become U+FFFD; a character split across tokens comes out whole, with the
    token that completes it), so "".join(stream) == model.decode(stream.ids).

    Attributes, readable at any time: prompt_ids (the prompt as the model saw it), ids (the
    tokens generated so far), seed (the sampler's seed, also when drawn at random), stop (None
    while running, then "length" after n tokens, "eos" at <|endoftext|>, "context" when the
    context is full, "error" after an exception). Not for two threads at once: a second
    thread's next() while a step runs raises jomoim.Error.
    """

    def __init__(self, model: "Model", generation):
        self._model = model
        self._gen = generation
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._done = False

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> str:
        while not self._done:
            try:
                token = next(self._gen)
            except StopIteration:
                self._done = True
                tail = self._decoder.decode(b"", final=True)
                if tail:
                    return tail
                break
            piece = self._decoder.decode(self._model._core.token_bytes(token))
            if piece:
                return piece
        raise StopIteration

    @property
    def prompt_ids(self) -> List[int]:
        return self._gen.prompt_ids

    @property
    def ids(self) -> List[int]:
        return self._gen.ids

    @property
    def seed(self) -> int:
        return self._gen.seed

    @property
    def stop(self) -> Optional[str]:
        return self._gen.stop

    def __repr__(self) -> str:
        return f"<jomoim.Stream {len(self.ids)} tokens, stop={self.stop!r}, seed={self.seed}>"


class Model:
    """A GPT-2-architecture model and its tokenizer, loaded from a Hugging Face model directory.

    Make one with Model.load(path). The directory holds config.json, model.safetensors (F32
    weights are memory-mapped in place; F16/BF16 are converted once), vocab.json and merges.txt.
    Text arguments are str (encoded as UTF-8) or bytes (any bytes: the tokenizer is byte-level).
    Immutable once loaded; every method may be called from several threads at once, and the
    forward passes release the GIL.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("use jomoim.Model.load(path) to make a Model")

    @classmethod
    def load(
        cls,
        path: Union[str, "os.PathLike[str]", None] = None,
        *,
        threads: Optional[int] = None,
        kv_cache: str = "f32",
        weights: str = "f32",
        matmul: str = "f32",
    ) -> "Model":
        """Loads the model directory `path`; None: default_model_dir() ($JOMOIM_MODEL, else the
        repository's models/default).

        threads: OpenMP threads for attention and the linear layers (None: OpenMP's default,
        OMP_NUM_THREADS).
        kv_cache: how every pass's KV cache stores keys and values, as the commands'
        --kv-cache: "f32"; "bf16" (keys, values and the queries rounded to bfloat16, float32
        scores and sums); "q8" (8-bit blocks of 32 values with a float scale, per key/value row
        of each head; queries float32); "q4" (the same in 4 bits, 0.625 bytes a value, about 18
        times q8's error; a head_dim that is a multiple of 32). See docs/design.md, "The KV cache
        formats".
        weights: how the model holds its weight matrices, as the commands' --weights: "f32"
        (as loaded); "bf16" (rounded to bfloat16, 2 bytes a weight; a bf16 checkpoint's values
        exactly); "q8" (8-bit blocks of 32 inputs with a float scale, quantized at load). The
        products widen the stored weights and accumulate in float32; activations, LayerNorms,
        biases and the position embedding stay float32. See docs/design.md, "The weight formats".
        matmul: the precision of a prompt's matrix products (passes of more than 16 tokens), as
        the commands' --matmul: "f32" (float32 inputs: what the float model computes on the
        weights as held); "bf16" (activations and weights rounded to bfloat16 for oneDNN's
        matmul, float32 sums; AMX or AVX512_BF16 where the CPU has them): faster prompts, logits
        off by about 1e-2 relative. Passes of up to 16 tokens are float32 either way.
        Raises jomoim.Error naming the directory, file or tensor that is missing or malformed
        (no such directory, no vocab.json, a tensor whose shape disagrees with config.json ...).
        """
        if path is None:
            where, source = default_model_dir(), "JOMOIM_MODEL" if os.environ.get("JOMOIM_MODEL") else "default"
        else:
            try:
                where = os.fsdecode(os.fspath(path))
            except TypeError:
                raise TypeError(f"path: expected str, os.PathLike or None, got {type(path).__name__}") from None
            source = "path"
        if not os.path.exists(where):
            raise Error(f"{source} {where}: no such directory")
        if not os.path.isdir(where):
            raise Error(f"{source} {where}: not a directory")
        n = 0 if threads is None else _int("threads", threads, 1, 4096, "a positive count or None")
        if not isinstance(kv_cache, str):
            raise TypeError(f"kv_cache: expected 'f32', 'bf16', 'q8' or 'q4', got {type(kv_cache).__name__}")
        if kv_cache not in ("f32", "bf16", "q8", "q4"):
            raise Error(f"kv_cache: expected 'f32', 'bf16', 'q8' or 'q4', got {kv_cache!r}")
        if not isinstance(weights, str):
            raise TypeError(f"weights: expected 'f32', 'bf16' or 'q8', got {type(weights).__name__}")
        if weights not in ("f32", "bf16", "q8"):
            raise Error(f"weights: expected 'f32', 'bf16' or 'q8', got {weights!r}")
        if not isinstance(matmul, str):
            raise TypeError(f"matmul: expected 'f32' or 'bf16', got {type(matmul).__name__}")
        if matmul not in ("f32", "bf16"):
            raise Error(f"matmul: expected 'f32' or 'bf16', got {matmul!r}")
        self = object.__new__(cls)
        self._core = _Model(os.fsencode(where), n, kv_cache, weights, matmul)  # bytes: any path the OS allows
        self._path = where
        return self

    @property
    def path(self) -> str:
        """The model directory, as given (or as the default was found)."""
        return self._path

    @property
    def kv_cache(self) -> str:
        """The KV cache format of every pass: "f32", "bf16", "q8" or "q4" (Model.load's kv_cache)."""
        return self._core.kv_cache

    @property
    def weights(self) -> str:
        """The weight format: "f32", "bf16" or "q8" (Model.load's weights)."""
        return self._core.weights

    @property
    def matmul(self) -> str:
        """The precision of a prompt's matrix products: "f32" or "bf16" (Model.load's matmul)."""
        return self._core.matmul

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight as held (the matrices in their format, the rest float32)."""
        return self._core.weight_bytes

    @property
    def config(self) -> dict:
        """The architecture (a new dict each time): n_layer, n_head, n_embd, n_positions (the
        context), vocab_size, n_inner (None: 4 * n_embd), layer_norm_epsilon,
        activation_function, head_dim."""
        return self._core.config

    @property
    def vocab_size(self) -> int:
        """Rows of the model's embedding (config["vocab_size"]); logits have this many columns."""
        return self._core.config["vocab_size"]

    @property
    def eos_id(self) -> Optional[int]:
        """The id of <|endoftext|> if the vocabulary has it, else None."""
        return self._core.eos_id

    @property
    def parameter_count(self) -> int:
        """Number of parameters (the output head, tied to the token embedding, counted once)."""
        return self._core.parameter_count

    def tokenize(self, text: Text) -> List[int]:
        """The token ids of `text` (GPT-2 byte-level BPE), as `jomoim tokenize` prints them.
        Empty text gives []."""
        return self._core.tokenize(_text("text", text))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, as str: their bytes concatenated and decoded as UTF-8, with
        invalid sequences (a token may end inside a character) replaced by U+FFFD. Use
        decode_bytes for the exact bytes. Raises jomoim.Error for an id outside the vocabulary."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The exact bytes of token ids, concatenated: decode_bytes(tokenize(b)) == b for any b."""
        return self._core.decode(ids)

    def token_bytes(self, id: int) -> bytes:
        """The bytes one token stands for."""
        return self._core.token_bytes(id)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """The model's logits for every position of `ids` (a sequence or 1-D array of ints),
        computed from scratch: a new float32 array [len(ids), vocab_size]; row t scores the
        token after ids[:t + 1]. The GIL is released during the forward pass.
        Raises jomoim.Error for no ids, an id outside the vocabulary, or more ids than the
        context (config["n_positions"])."""
        return self._core.logits(ids)

    def predict(self, text: Text, top: int = 10) -> List[Prediction]:
        """The `top` most likely next tokens after `text`, most likely first (ties: lower id
        first), as `jomoim predict --json` lists them: Prediction(id, text, probability, logit).

        An empty text starts from <|endoftext|> (when the vocabulary has it). Raises
        jomoim.Error for top < 1 or a prompt longer than the context."""
        top = _int("top", top, 1, 2**31 - 1, "at least 1")
        _, rows = self._core.predict(_text("text", text), top)
        return [Prediction(i, _token_text(self._core.token_bytes(i)), p, l) for i, p, l in rows]

    def stream(self, text: Text, n: int = 50, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
               seed: Optional[int] = None, stop_at_eos: bool = True) -> Stream:
        """Continues `text` token by token with a KV cache: a Stream of text pieces (see Stream),
        with the rules and defaults of `jomoim generate`.

        n            at most this many new tokens (>= 0); fewer when the context
                     (config["n_positions"], prompt included) fills up or at <|endoftext|>.
        temperature  0: greedy (the most likely token, lowest id on ties); else the logits are
                     divided by it before the softmax.
        top_k        sample among the k most likely tokens; 0: all.
        top_p        then among the most likely tokens whose probabilities reach p, in (0, 1].
        seed         the sampler's seed, an integer in [0, 2**64); None draws a fresh one in
                     [0, 2**32), as `jomoim generate` without --seed does (Stream.seed tells it;
                     Python used to draw 64 bits). The same seed and arguments give the
                     CLI's `--seed` tokens: both run one loop (jomoim::Generation).
        stop_at_eos  stop at <|endoftext|> (not included); False: keep going (--ignore-eos).

        The prompt is tokenized as tokenize() does; an empty prompt starts from <|endoftext|>.
        Raises jomoim.Error for bad options (checked before any work) or a prompt longer than
        the context."""
        n = _int("n", n, 0, 2**31 - 1, ">= 0")
        temperature, top_k, top_p, seed = _sampling(temperature, top_k, top_p, seed, stop_at_eos)
        gen = self._core.generate(_text("text", text), n, temperature, top_k, top_p, seed, stop_at_eos)
        return Stream(self, gen)

    def generate(self, text: Text, n: int = 50, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 seed: Optional[int] = None, stop_at_eos: bool = True) -> str:
        """The continuation of `text` (without the prompt), as str: "".join(stream(...)) with the
        same arguments; see stream() for them, and for the ids, seed and stop reason."""
        return "".join(self.stream(text, n, temperature, top_k, top_p, seed, stop_at_eos))

    def explain(self, text: Text, *, layer: Optional[int] = None, head: Optional[int] = None,
                silence: Iterable[int] = (), swap_qk: bool = False, top: int = 10, compare: Optional[Text] = None,
                notation: str = "paper", matrices: bool = True, target: Optional[Text] = None,
                contrast: Optional[Text] = None, generate: int = 0, temperature: float = 0.0, top_k: int = 40,
                top_p: float = 0.95, seed: Optional[int] = None, stop_at_eos: bool = True) -> Dict[str, Any]:
        """The explorer's "meeting minutes" of `text`: the content of `jomoim explain --json`
        (schema "jomoim.explain/1", docs/explain.md) as Python objects, the matrices as NumPy.

        layer, head   only this layer's / this head's matrices (the summary covers every head).
        silence       token indices whose keys nobody hears, in every layer and head.
        swap_qk       make queries with W_K and keys with W_Q ("baseline" then has the plain pass).
        top           next-token candidates listed (>= 1).
        compare       a second prompt, explained with the same options ("compare").
        notation      "paper" (rows are tokens) or "3b1b" (every matrix transposed).
        matrices      False: "layers" is empty (tokens, prediction and the heads summary only).
        target        the token (exactly one) whose logit "attribution" splits into the model's
                      parts (default: the predicted next token).
        contrast      with target: attribute logit(target) - logit(contrast) instead.
        generate      continue the prompt by up to this many tokens (0..64; 0: none) with the loop of
                      stream()/`jomoim generate` and explain each new token ("generation", "steps").
        temperature, top_k, top_p, seed, stop_at_eos
                      the sampling of generate, as stream() takes them, except temperature: 0
                      (greedy) by default. The same seed and options give stream()'s tokens.

        The JSON becomes dicts, lists, str, int, float, bool and None, except (in "layers" and in
        "compare"'s "layers"), per head: q, k, v, out, weights -> float32 arrays (the model's
        exact float32 values); scores, scaled -> float32 arrays with -inf where masked (null in
        the JSON); mask -> bool array; last_token.weights -> float32, last_token.value_norms and
        .contribution_norms -> float64 1-D arrays; and last_token_attention.mean_over_heads ->
        a float64 [n_layer, T] array; per step (steps[k]) attention -> float32 [n_layer, n_head,
        T + k] and last_token_attention.mean_over_heads -> float64; "head_roles" stays dicts
        (see head_roles()). Shapes are
        the JSON's (transposed in 3b1b). "model"."name"
        is Model.path. The passes run with the GIL released.

        Raises jomoim.Error (the engine's message) for a layer or head out of range, a silence
        index outside the prompt (or the compare prompt), a prompt longer than the context,
        top < 1, an unknown notation, a target or contrast that is not exactly one token, a contrast
        equal to the target or without one."""
        if not isinstance(notation, str):
            raise TypeError(f"notation: expected 'paper' or '3b1b', got {type(notation).__name__}")
        if isinstance(silence, (str, bytes)) or not isinstance(silence, Iterable):
            raise TypeError(f"silence: expected a sequence of token indices, got {type(silence).__name__}")
        silence = [_int("silence", i, -2**31, 2**31 - 1, "an int32") for i in silence]
        for name, flag in (("swap_qk", swap_qk), ("matrices", matrices)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected True or False, got {type(flag).__name__}")
        top = _int("top", top, -2**31, 2**31 - 1, "an int32")
        generate = _int("generate", generate, 0, 64, "in 0..64")
        temperature, top_k, top_p, seed = _sampling(temperature, top_k, top_p, seed, stop_at_eos)
        other = None if compare is None else _text("compare", compare)
        tgt = None if target is None else _text("target", target)
        con = None if contrast is None else _text("contrast", contrast)
        return self._core.explain(_text("text", text), notation, _opt_int("layer", layer), _opt_int("head", head),
                                 silence, swap_qk, top, other, os.fsencode(self._path), matrices, tgt, con,
                                 generate, temperature, top_k, top_p, seed, stop_at_eos)

    def head_roles(self, text: Optional[Text] = None, *, swap_qk: bool = False) -> Dict[str, Any]:
        """Every head's role scores, the content of `jomoim heads --json` (schema
        "jomoim.heads/1", docs/explain.md) as Python objects: "head_roles"."heads" lists, in
        (layer, head) order, previous_token, first_token, self, induction (floats, None when
        not measurable), label (str or None) and labels.

        text     measure previous_token, first_token and self on this prompt (queries i >= 1);
                 None: on the induction probe itself ("measured_on": "probe").
        swap_qk  measure the model with queries made by W_K and keys by W_Q.

        induction is always measured on the probe: R distinct random tokens (seed 1) repeated
        twice after <|endoftext|>; see docs/explain.md. Model.explain()'s "head_roles" is the
        same object for its prompt. Raises jomoim.Error for a prompt longer than the context."""
        if not isinstance(swap_qk, bool):
            raise TypeError(f"swap_qk: expected True or False, got {type(swap_qk).__name__}")
        prompt = None if text is None else _text("text", text)
        return self._core.head_roles(prompt, swap_qk, os.fsencode(self._path))

    def __repr__(self) -> str:
        c = self._core.config
        return (f"<jomoim.Model {self._path!r}: {c['n_layer']} layers, {c['n_head']} heads, "
                f"n_embd {c['n_embd']}, context {c['n_positions']}, vocab {c['vocab_size']}>")

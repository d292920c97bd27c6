"""An inference engine of your own: any object with ``generate`` is a token backend.

This one is a rule-based "model" (it asks the Python tool for a product, then copies
the tool's output into its answer), useful to try tools and rewards end to end
without a model.  A real engine would call its server or library where this applies
its rule; ``backends.TransformersBackend`` is a complete one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable
from pathlib import Path

from tokenizers import Tokenizer

from backends import Completion, SamplingParams
from rstar2_async.rollout import HFChatTokenizer
from rstar2_async.rollout.tools import python


class ScriptedEngine:
    """A :class:`backends.TokenBackend` over a model directory's tokenizer and a rule."""

    def __init__(self, model_dir: str | Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self.eos_token_id = HFChatTokenizer.from_pretrained(model_dir).eos_token_id
        self.weight_version = 0

    async def generate(
        self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion:
        conversation = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        last_turn = conversation.rsplit("<tool_call>", 1)[-1]
        if outputs := re.findall(r"<tool_response>\n(.*?)\n</tool_response>", last_turn, re.S):
            text = f"<answer>\\boxed{{{outputs[-1].strip()}}}</answer>"
        else:
            expression = re.findall(r"What is (.+?)\?", conversation)[-1]
            text = "<tool_call>" + json.dumps({"name": python.name, "arguments": {"code": f"print({expression})"}}) + "</tool_call>"
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids + [self.eos_token_id]
        finish = "stop" if len(ids) <= max_tokens else "length"
        ids = ids[:max_tokens]
        # A rule has no distribution: every token had probability 1.
        return Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish, weight_version=self.weight_version)

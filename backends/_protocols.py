"""The inference engine as the rollout core sees it: three protocols, one home.

An engine is whatever implements these; nothing in the core asks which one it is.

- :class:`TokenBackend`: token ids in, token ids + sampling logprobs + weight
  version out.  The training path (exact: the learner trains on what was sampled).
  Shipped: :class:`backends.TokenClient` (one vLLM server), :class:`backends.ServerPool`
  (many vLLM / SGLang servers with load-balanced dispatch and failover),
  :class:`backends.SGLangTokenClient`, :class:`backends.TransformersBackend` (in-process).
- :class:`ChatBackend`: messages in, text out (any OpenAI-compatible endpoint, for
  evaluating hosted models: no token ids, no logprobs).  Shipped: :class:`backends.ChatClient`.
- :class:`WeightAdmin`: what a weight sync does to one engine: pause, load, flush,
  version, resume.  Shipped: :class:`backends.VLLMAdmin`, :class:`backends.SGLangAdmin`,
  :class:`backends.TransformersBackend` (its own admin).

To bring another engine, implement :class:`TokenBackend` (and :class:`WeightAdmin`
if it is to be trained); ``docs/extending.md`` has a tested example.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal, Protocol

from ._types import ChatCompletion, Completion, SamplingParams

__all__ = ["ChatBackend", "PauseMode", "TokenBackend", "WeightAdmin"]

PauseMode = Literal["wait", "abort", "keep"]
"""``wait``: requests in flight finish first; ``abort``: they end at once with
``finish_reason="abort"`` and the tokens so far (their callers resume them);
``keep``: they freeze on the server and go on after the resume, their KV computed
again on the weights loaded meanwhile (no round trip; vLLM only)."""


class TokenBackend(Protocol):
    """Generates after a token-id prompt.

    Contract:
        ``prompt_ids`` is lent for the call: read it, never keep or mutate it.  From
        the second turn on the rollout lends a :class:`~backends.TokenIds` (a list
        that keeps its JSON for the token clients, and refuses changes).
        ``session`` names the trajectory, so an engine with several servers can keep
        its turns on one (prefix-cache hits); single engines ignore it.  The returned
        :class:`~backends.Completion` has one logprob per token (the raw model's
        log-probability of the sampled token, as vLLM returns it), ``finish_reason``
        ``stop`` (EOS), ``length`` (``max_tokens``) or ``abort``, and the weight version
        that produced it.  A backend may also have ``end_session(session)``, which the
        agent loop calls when the trajectory has no more turns.

    Raises:
        BackendError: the generation failed for good (the agent loop ends the
            trajectory as ``error``); ``BackendClosed`` after the owner closed it.
    """

    async def generate(
        self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion: ...


class ChatBackend(Protocol):
    """Generates the next assistant message of a conversation (text mode)."""

    async def chat(
        self, messages: list[dict[str, str]], *, max_tokens: int, sampling: SamplingParams
    ) -> ChatCompletion: ...


class WeightAdmin(Protocol):
    """The admin side of one engine, as :class:`backends.WeightSync` drives it.

    Versions are strings on this side (SGLang keeps strings; vLLM's adapter maps our
    ints to decimal strings).  Every method raises a :class:`~backends.BackendError`
    on failure and never retries: the weight sync decides that.
    """

    native_wait: bool
    """Whether ``pause("wait")`` itself lets in-flight requests finish (else the
    weight sync waits for the pool to drain the server first)."""

    async def pause(self, mode: PauseMode = "wait") -> None: ...

    async def resume(self) -> None: ...

    async def load_weights_from_disk(self, path: str) -> None:
        """Replace every weight in place from a safetensors model directory (the
        learner's export)."""
        ...

    async def reset_prefix_cache(self) -> None: ...

    async def set_weight_version(self, version: str) -> None: ...

    async def weight_version(self) -> str: ...

"""Test doubles and chaos runs the project ships, for its own tests and benchmarks and for
users who test their tools, rewards and engines against the same edges.

- Doubles (each has a real counterpart tested in ``tests/integration``): a byte-level
  ChatML tokenizer (:class:`FakeByteTokenizer`), a scripted model served over real HTTP
  as an OpenAI completions endpoint (:class:`FakeModelServer`), an in-process sandbox
  (:class:`FakeSandbox`), recording vLLM and SGLang servers (:class:`FakeVLLM`,
  :class:`FakeSGLang`; a vLLM double's prompt log-probs are :func:`fake_logprobs` of the
  weights it holds, and :func:`sync_report` is what a weight-sync double returns), raw
  HTTP servers to script misbehaving ones (:func:`serve_http`, :class:`FakeRawServer`,
  :func:`hung_server`, :func:`stalling_stream`), and vLLM's streamed completions as the
  doubles send them (:func:`sse_answer`, :func:`completion_events`, :func:`join_events`).
- Chaos runs, whose invariants the test suite checks on a short run and
  ``benchmarks/`` measures on a long one: :func:`sandbox_soak` (the jailed pool behind
  its HTTP service while workers are killed), :func:`pool_chaos` (the inference
  pool over doubles that die, hang and answer garbage) and :func:`inject_faults`
  (a training run's servers stopped mid-generation and mid-sync, sandbox workers
  and a service killed; :func:`chaos_figures` reads its invariants from the run).
- :func:`perturbed_weights`: a model's weights moved by noise, as a learner's export.
- Gold answers rewritten, to check a grader with no labels: :func:`same_value_rewrites`
  (its value in another notation, to be paid), :func:`changed_value_rewrites` (a value
  one step off, never to be paid), stated as replies do (:data:`ANSWER_FORMATS`), against
  golds written as data sets write them (:data:`GOLD_FORMATS`).
"""

from ._fleet import FakeSGLang, FakeVLLM, Recorded, fake_logprobs, sync_report
from ._http import STALLS, DropConnection, FakeRawServer, hung_server, raw_head, serve_http, stalling_stream
from ._model import (
    CHATML_TEMPLATE,
    IM_END,
    IM_START,
    FakeByteTokenizer,
    FakeExactReward,
    FakeModelServer,
    FakeSandbox,
    arithmetic_policy,
    last_user_message,
    write_byte_tokenizer,
)
from ._pool_chaos import pool_chaos
from ._rewrites import (
    ANSWER_FORMATS,
    CHANGED_VALUE_REWRITES,
    GOLD_FORMATS,
    SAME_VALUE_REWRITES,
    changed_value_rewrites,
    same_value_rewrites,
)
from ._sandbox_soak import sandbox_soak
from ._sse import completion_events, join_events, sse_answer
from ._train_chaos import Chaos, ProcessGroup, RestartableService, chaos_figures, inject_faults
from ._weights import perturbed_weights

__all__ = [
    "ANSWER_FORMATS",
    "CHANGED_VALUE_REWRITES",
    "CHATML_TEMPLATE",
    "Chaos",
    "DropConnection",
    "FakeByteTokenizer",
    "FakeExactReward",
    "FakeModelServer",
    "FakeRawServer",
    "FakeSGLang",
    "FakeSandbox",
    "FakeVLLM",
    "GOLD_FORMATS",
    "IM_END",
    "IM_START",
    "ProcessGroup",
    "Recorded",
    "RestartableService",
    "SAME_VALUE_REWRITES",
    "STALLS",
    "arithmetic_policy",
    "changed_value_rewrites",
    "chaos_figures",
    "completion_events",
    "fake_logprobs",
    "hung_server",
    "inject_faults",
    "join_events",
    "last_user_message",
    "perturbed_weights",
    "pool_chaos",
    "raw_head",
    "same_value_rewrites",
    "sandbox_soak",
    "serve_http",
    "sse_answer",
    "stalling_stream",
    "sync_report",
    "write_byte_tokenizer",
]

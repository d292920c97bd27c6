"""Cold-start SFT: assistant-only mask from JSONL transcripts, and it trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("single_process_env")

TRANSCRIPT = [
    {"role": "system", "content": "You can call python."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": '<tool_call>{"name": "python", "arguments": {"code": "print(2 + 3)"}}</tool_call>'},
    {"role": "user", "content": "<tool_response>5\n</tool_response>"},
    {"role": "assistant", "content": "<answer>The answer is \\boxed{5}.</answer>"},
]


def test_mask_covers_exactly_the_assistant_turns(tiny_chat_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rstar2_async.learn import load_chat_jsonl

    tok = AutoTokenizer.from_pretrained(tiny_chat_model)
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps({"messages": TRANSCRIPT}) + "\n\n")
    (seq,) = load_chat_jsonl(path, tok)
    assert seq.ids == tok(tok.apply_chat_template(TRANSCRIPT, tokenize=False), add_special_tokens=False)["input_ids"]
    masked = tok.decode([i for i, m in zip(seq.ids, seq.mask) if m])
    assert masked == TRANSCRIPT[2]["content"] + "<|im_end|>" + TRANSCRIPT[4]["content"] + "<|im_end|>"
    unmasked = tok.decode([i for i, m in zip(seq.ids, seq.mask) if not m])
    assert "What is 2 + 3?" in unmasked and "<tool_response>" in unmasked and "<|im_start|>assistant" in unmasked


def test_rollout_chat_template_renders_the_transcripts(tiny_chat_model: Path, tmp_path: Path) -> None:
    """SFT renders with ``rollout.chat_template`` when set, as the rollouts do."""
    from rstar2_async.learn import load_chat_jsonl

    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps({"messages": TRANSCRIPT}) + "\n")
    (tmp_path / "t.jinja").write_text("{% for m in messages %}[{{ m.role }}]{{ m.content }}<|im_end|>{% endfor %}")
    (seq,) = load_chat_jsonl(path, tiny_chat_model, chat_template=tmp_path / "t.jinja")
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tiny_chat_model).decode(seq.ids).startswith("[system]You can call python.<|im_end|>")


def test_bad_line_names_file_and_line(tiny_chat_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rstar2_async.learn import load_chat_jsonl

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": TRANSCRIPT}) + "\n" + '{"msgs": []}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected"):
        load_chat_jsonl(path, AutoTokenizer.from_pretrained(tiny_chat_model))


def test_sft_fits_the_tool_format(tiny_chat_model: Path) -> None:
    from transformers import AutoTokenizer

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, encode_chat, run_sft

    tok = AutoTokenizer.from_pretrained(tiny_chat_model)
    seqs = []
    for a in range(2, 10):
        msgs = [dict(m) for m in TRANSCRIPT]
        msgs[1]["content"] = f"What is {a} + 3?"
        msgs[2]["content"] = msgs[2]["content"].replace("2 + 3", f"{a} + 3")
        msgs[3]["content"] = f"<tool_response>{a + 3}\n</tool_response>"
        msgs[4]["content"] = f"<answer>The answer is \\boxed{{{a + 3}}}.</answer>"
        seqs.append(encode_chat(msgs, tok))
    cfg = LearnerConfig(zero_stage=2, precision="fp32", lr=3e-3, warmup_steps=0, micro_batch_tokens=256,
                        gradient_checkpointing=False)  # fmt: skip
    learner = Learner(cfg, tiny_chat_model)
    stats = run_sft(learner, seqs, epochs=15, batch_size=4)
    assert stats[0].micro_batches >= 2  # packed under the budget, accumulated
    assert stats[-1].loss < 0.5 * stats[0].loss, [round(s.loss, 3) for s in stats]

"""The locally built tiny Qwen2 model: loads in transformers, ChatML template, untied, deterministic."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from rstar2_async.demo import CHAT_TEMPLATE, TOOL_TOKENS, build_tiny_model, cached_tiny_model  # noqa: E402

CORPUS = [
    "What is 2 + 3? Find the value of x such that x^2 = 16.",
    "Let $f(x) = 3x + 1$. Compute $f(f(2))$ and give \\boxed{22}.",
    "import sympy as sp\nprint(sp.factorint(360))\n",
] * 20


def digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The default corpus (the shared training problems) is what other tests use.
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_directory_is_complete(model_dir: Path) -> None:
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not list(model_dir.parent.glob(".model.*")), "temporary build directory left behind"
    size = sum(p.stat().st_size for p in model_dir.iterdir())
    assert size < 10 * 2**20, f"tiny model is {size} bytes"


def test_config_untied_head_dim_64_eos_im_end(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert config.model_type == "qwen2"
    assert config.tie_word_embeddings is False
    assert config.head_dim == 64 == config.hidden_size // config.num_attention_heads
    assert config.vocab_size == len(tok)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert config.eos_token_id == im_end == tok.eos_token_id
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == im_end


def test_loads_in_transformers_with_untied_weights(model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.dtype == torch.float32
    head, embed = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert head.data_ptr() != embed.data_ptr()
    assert not torch.equal(head, embed)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 9]])).logits
    assert logits.shape == (1, 3, model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_chat_template_round_trip(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    messages = [
        {"role": "system", "content": "You are a helpful assistant.\n<tools>[]</tools>"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": '<tool_call>{"name": "python", "arguments": {"code": "print(2+2)"}}</tool_call>'},
        {"role": "user", "content": "<tool_response>4\n</tool_response>"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    assert text == expected + "<|im_start|>assistant\n"
    no_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert no_prompt == expected
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    # Control and tool tags are single tokens.
    for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", *TOOL_TOKENS):
        assert len(tok.encode(t, add_special_tokens=False)) == 1, t
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    # Tool tags survive skip_special_tokens; ChatML control tokens do not.
    assert "<tool_call>" in tok.decode(ids, skip_special_tokens=True)
    assert "<|im_start|>" not in tok.decode(ids, skip_special_tokens=True)


def test_transformers_tokenizer_equals_raw_tokenizer_json(model_dir: Path) -> None:
    # transformers rebuilds Qwen2's pre-tokenizer around the saved vocabulary; the
    # trained pipeline must be the same one, or ids would depend on who tokenises.
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    for text in [
        "Find all real x with x^2 - 5x + 6 = 0. The answer is \\boxed{2, 3}.",
        "  12345  678\n\n\tdef f(n):\n    return n*(n+1)//2  # café ½ 中文",
        '<tool_call>{"name": "python"}</tool_call><|im_end|>',
    ]:
        assert tok.encode(text, add_special_tokens=False) == raw.encode(text).ids


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3, corpus=CORPUS, vocab_size=400, num_layers=1)
    b = build_tiny_model(tmp_path / "b", seed=3, corpus=CORPUS, vocab_size=400, num_layers=1)
    c = build_tiny_model(tmp_path / "c", seed=4, corpus=CORPUS, vocab_size=400, num_layers=1)
    assert digest(a) == digest(b)
    assert digest(a)["model.safetensors"] != digest(c)["model.safetensors"]
    assert digest(a)["tokenizer.json"] == digest(c)["tokenizer.json"]


def test_does_not_disturb_global_rng(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=0, corpus=CORPUS, vocab_size=300, num_layers=1)
    assert torch.equal(torch.rand(3), expected)


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        build_tiny_model(tmp_path / "m", hidden_size=100, corpus=CORPUS)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        build_tiny_model(tmp_path / "full", corpus=CORPUS)


def test_cached_tiny_model_builds_once(tmp_path: Path) -> None:
    first = cached_tiny_model(tmp_path, vocab_size=600, num_layers=1)
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    again = cached_tiny_model(tmp_path, vocab_size=600, num_layers=1)
    assert again == first and (again / "model.safetensors").stat().st_mtime_ns == mtime
    assert cached_tiny_model(tmp_path, vocab_size=600, num_layers=1, seed=1) != first
    with pytest.raises(TypeError):
        cached_tiny_model(tmp_path, corpus=CORPUS)


def test_template_constant_is_what_is_saved(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(model_dir).chat_template == CHAT_TEMPLATE

"""Chat templates written after public models' templates, and locally trained
tokenizers that carry them, for the template tests.

Each template is written from the model's published ``chat_template`` (the
``tokenizer_config.json`` on its Hugging Face page) and the model card's prompt-format
documentation, to behave like it on what the rollout renders (system, user, assistant
text, tool results, the generation prompt), not copied whole.
"""

from __future__ import annotations

import json
from pathlib import Path

QWEN25_STYLE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- messages[0]['content'] if messages[0]['role'] == 'system' else 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' + tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '
        '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
        '\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for call in message.tool_calls %}
            {%- set call = call.function if call.function is defined else call %}
            {{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' + call.arguments | tojson + '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {#- consecutive results share one user turn #}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
"""After Qwen2.5-Instruct's template (huggingface.co/Qwen/Qwen2.5-7B-Instruct,
tokenizer_config.json; qwen.readthedocs.io, "Function Calling"): a default system
prompt, tools listed in it, consecutive ``tool`` messages grouped into one user turn of
``<tool_response>`` blocks."""

LLAMA31_STYLE = """\
{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = '26 Jul 2024' %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is defined and tools is not none %}
    {{- 'Environment: ipython\\n' }}
{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}
{{- system_message + '<|eot_id|>' }}
{%- for message in messages %}
    {%- if message.role == 'tool' or message.role == 'ipython' %}
        {#- every result is its own ipython turn; a string is iterable, so it goes through tojson #}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- elif message.tool_calls %}
        {%- set call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + call.name + '", "parameters": ' + call.arguments | tojson + '}<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
"""After Llama 3.1/3.2-Instruct's template (huggingface.co/meta-llama/Llama-3.1-8B-Instruct,
tokenizer_config.json; llama.com, "Llama 3.1 prompt format": tool results in ``ipython``
turns): a dated system header, every message's text trimmed, each tool result its own
``ipython`` turn, its text through ``tojson`` (Jinja's ``iterable`` test is true of a
string, so the published template JSON-encodes string results)."""

ALTERNATING_ONLY = """\
{{- bos_token }}
{%- for message in messages %}
    {%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' + message.content | trim + '<end_of_turn>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\\n' }}
{%- endif %}
"""
"""After Gemma's template: user/model turns that must alternate, no tool role."""

CHATML_DROPPING_TOOLS = """\
{%- for message in messages if message.role != 'tool' %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
"""ChatML that silently leaves tool messages out."""

QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
LLAMA3_SPECIALS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<|python_tag|>",
)  # fmt: skip
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

_CORPUS = (
    "Let me compute this with Python.\n\n",
    '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>',
    "42\n\n\nThe answer is <answer>\\boxed{42}</answer>.\n",
    "import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x**2 - 4, x))\n\n",
    "Traceback (most recent call last):\n  File \"<stdin>\", line 1\nNameError: name 'y' is not defined\n",
    "What is 2+2? Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024 system user assistant ipython\n",
)


def write_tokenizer(out: Path, *, template: str, specials: tuple[str, ...], eos: str, regex: str, bos: str | None = None) -> Path:
    """A byte-level BPE (trained in milliseconds on a small corpus, with merges across
    newlines) carrying ``template``, its ``specials`` and rStar2's tool tags as plain
    added tokens, as a Hugging Face tokenizer directory."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, min_frequency=2, special_tokens=list(specials), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TOOL_TAGS])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos, "chat_template": template, "clean_up_tokenization_spaces": False}
    if bos is not None:
        config["bos_token"] = bos
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def qwen_tokenizer(out: Path, template: str = QWEN25_STYLE) -> Path:
    return write_tokenizer(out, template=template, specials=CHATML_SPECIALS, eos="<|im_end|>", regex=QWEN2_REGEX)


def swallowing_tokenizer(out: Path) -> Path:
    """:func:`qwen_tokenizer` whose ``<|im_end|>`` takes the whitespace after it
    (``rstrip``): a whole-text tokenisation drops the newline that follows it."""
    directory = qwen_tokenizer(out)
    config = json.loads((directory / "tokenizer.json").read_text())
    config["added_tokens"] = [{**t, "rstrip": t["content"] == "<|im_end|>"} for t in config["added_tokens"]]
    (directory / "tokenizer.json").write_text(json.dumps(config))
    return directory


def llama_tokenizer(out: Path, template: str = LLAMA31_STYLE) -> Path:
    return write_tokenizer(out, template=template, specials=LLAMA3_SPECIALS, eos="<|eot_id|>", regex=LLAMA3_REGEX, bos="<|begin_of_text|>")

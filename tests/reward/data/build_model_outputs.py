"""Writes model_outputs.jsonl.gz: real model responses, each with the verdict of the
evaluation harness that graded it, to hold our grader to on text no test wrote.

The responses are Qwen2.5-Math's own example of its evaluation harness's output
(``evaluation/data/eval_rm_maj_example/math_cot_100.jsonl``, MIT like the rest of
its ``evaluation/``): 8 chain-of-thought samples each on 100 MATH test problems, and
the harness's ``score`` of each (its ``math_equal``, the grader behind most reported
MATH numbers).  Run from the repository root after fetching QwenLM/Qwen2.5-Math at
the commit below into ``/work/.mirror/QwenLM+Qwen2.5-Math/repo`` (or ``--mirror``)::

    python tests/reward/data/build_model_outputs.py

Nothing is edited.  ``gold`` is the data set's answer, as a user grades against it;
``harness_gold`` is the harness's own reading of it (``4:30p..`` for ``\\text{4:30
p.m.}``), which its verdict ``label`` was reached against.  The gzip stream is written
without a timestamp, so the same source gives the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parent / "model_outputs.jsonl.gz"
SOURCE = {
    "repo": "QwenLM/Qwen2.5-Math",
    "commit": "a45202bd16f1ec06f433442dc1152d0074773465",
    "path": "evaluation/data/eval_rm_maj_example/math_cot_100.jsonl",
    "licence": "MIT",
}


def build(mirror: Path) -> list[dict]:
    git_dir = mirror / SOURCE["repo"].replace("/", "+") / "repo"
    text = subprocess.run(
        ["git", "-C", str(git_dir), "show", f"{SOURCE['commit']}:{SOURCE['path']}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    cases = build(parser.parse_args().mirror)
    with OUT.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for case in cases:
            f.write((json.dumps(case, ensure_ascii=False) + "\n").encode())
    right = sum(c["label"] for c in cases)
    print(f"{len(cases)} responses ({right} right by the harness) -> {OUT}")


if __name__ == "__main__":
    main()

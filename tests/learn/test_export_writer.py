"""The export's write half (``_export_writer.write_safetensors_dir``): files safetensors and
transformers read, the shard plan, atomic publication, and errors that publish nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from rstar2_async.learn._export_writer import TensorSpec, write_safetensors_dir


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(7, 5, generator=g, dtype=torch.float32).to(torch.bfloat16),
        "model.norm.weight": torch.randn(5, generator=g),
        "scalar": torch.tensor(3.5, dtype=torch.float16),
        "empty": torch.zeros(0, 4),
        "mask": torch.tensor([True, False, True]),
        "ids": torch.arange(11, dtype=torch.int64).reshape(11, 1),
        "lm_head.weight": torch.randn(9, 5, generator=g).to(torch.bfloat16),
    }


def _specs(tensors: dict[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()]


def _load_dir(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out |= load_file(f)
    return out


def test_one_shard_reads_back_exactly(tmp_path: Path) -> None:
    tensors = _tensors()
    # Buckets of two, like the learner's; the writer sees each bucket once.
    items = list(tensors.items())
    buckets = [items[i : i + 2] for i in range(0, len(items), 2)]
    out = write_safetensors_dir(tmp_path / "w", _specs(tensors), iter(buckets), max_shard_bytes=1 << 20)
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    loaded = _load_dir(out)
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == t.dtype and loaded[name].shape == t.shape, name
        assert torch.equal(loaded[name], t), name
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    header_len = int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
    assert header_len % 8 == 0  # the data starts 8-byte aligned, as safetensors' own writer does


def test_shards_follow_the_plan_and_the_index_names_them(tmp_path: Path) -> None:
    tensors = {f"layer.{i}": torch.full((64,), float(i)) for i in range(5)}  # 256 bytes each
    tensors["big"] = torch.ones(1000)  # over the limit: a shard of its own
    out = write_safetensors_dir(
        tmp_path / "w", _specs(tensors), [list(tensors.items())], max_shard_bytes=600,
        extra_files=lambda d: (d / "config.json").write_text("{}"),
    )  # fmt: skip
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert files == [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in tensors.values())
    assert index["weight_map"] == {
        "layer.0": files[0], "layer.1": files[0], "layer.2": files[1], "layer.3": files[1],
        "layer.4": files[2], "big": files[3],
    }  # fmt: skip
    for name, file in index["weight_map"].items():
        with safe_open(str(out / file), "pt") as f:
            assert torch.equal(f.get_tensor(name), tensors[name])
    assert (out / "config.json").read_text() == "{}"


def test_a_second_write_replaces_the_first_and_leaves_nothing_hidden(tmp_path: Path) -> None:
    a = {"w": torch.zeros(3)}
    b = {"w": torch.ones(3)}
    write_safetensors_dir(tmp_path / "w", _specs(a), [list(a.items())], max_shard_bytes=1 << 20)
    write_safetensors_dir(tmp_path / "w", _specs(b), [list(b.items())], max_shard_bytes=1 << 20)
    assert torch.equal(_load_dir(tmp_path / "w")["w"], b["w"])
    assert [p.name for p in tmp_path.iterdir()] == ["w"]


@pytest.mark.parametrize(
    ("bucket", "message"),
    [
        ([("w", torch.zeros(3)), ("v", torch.zeros(2))], "expected"),  # a name out of order
        ([("w", torch.zeros(3, dtype=torch.float16)), ("u", torch.zeros(2))], "expected"),  # a wrong dtype
        ([("w", torch.zeros(3))], "tensors missing"),
        ([("w", torch.zeros(3)), ("u", torch.zeros(2)), ("x", torch.zeros(1))], "more tensors than specs"),
    ],
)
def test_a_mismatch_publishes_nothing_and_drains_the_buckets(
    tmp_path: Path, bucket: list[tuple[str, torch.Tensor]], message: str
) -> None:
    specs = [TensorSpec("w", torch.float32, (3,)), TensorSpec("u", torch.float32, (2,))]
    asked: list[int] = []

    def buckets():  # stands in for a collective gather: every bucket must be taken
        for i, item in enumerate(bucket):
            asked.append(i)
            yield [item]

    with pytest.raises(ValueError, match=message):
        write_safetensors_dir(tmp_path / "w", specs, buckets(), max_shard_bytes=1 << 20)
    assert asked == list(range(len(bucket)))
    assert list(tmp_path.iterdir()) == []


def test_an_older_export_survives_a_failed_write(tmp_path: Path) -> None:
    good = {"w": torch.ones(2)}
    write_safetensors_dir(tmp_path / "w", _specs(good), [list(good.items())], max_shard_bytes=1 << 20)

    def boom(_: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_safetensors_dir(tmp_path / "w", _specs(good), [[("w", torch.zeros(2))]], max_shard_bytes=1 << 20,
                              extra_files=boom)  # fmt: skip
    assert torch.equal(_load_dir(tmp_path / "w")["w"], good["w"])
    assert [p.name for p in tmp_path.iterdir()] == ["w"]


def test_transformers_loads_the_written_directory(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    live = {n: p.detach() for n, p in model.named_parameters()}
    out = write_safetensors_dir(
        tmp_path / "hf", _specs(live), [list(live.items())], max_shard_bytes=2048,
        extra_files=lambda d: config.save_pretrained(d),
    )  # fmt: skip
    assert (out / "model.safetensors.index.json").is_file()
    loaded = dict(AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).named_parameters())
    assert set(loaded) == set(live)
    for name, t in live.items():
        assert torch.equal(loaded[name], t), name

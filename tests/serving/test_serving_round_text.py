"""A round's text grows by each token's decoded piece (rounds.RoundText) and always equals
one decode of the round's ids, without decoding the whole round again per token."""

from __future__ import annotations

import pytest

from spectool_serving.rounds import RoundText

TEXT = "héllo 😀 wörld — 東京 ok\n  spaced  end"


class ByteTokenizer:
    """The smallest byte-level tokenizer: one id per UTF-8 byte, decoded as HF tokenizers do
    (invalid or cut bytes become U+FFFD). Here a character is always split across tokens."""

    def __init__(self) -> None:
        self.calls: list[int] = []  # the length of every decode

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        self.calls.append(len(ids))
        return bytes(ids).decode("utf-8", errors="replace")


def _pushed(tok, ids: list[int]) -> RoundText:
    rt = RoundText(tok)
    for k, i in enumerate(ids, 1):
        rt.push([i])
        assert rt.text == tok.decode(ids[:k]), k  # equal after every token, pending bytes too
    return rt


def test_text_pushed_piece_by_piece_equals_one_decode_with_split_characters():
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert _pushed(tok, ids).text == TEXT
    # control: the pieces decoded alone do not concatenate to the text (each half of a
    # multi-byte character decodes to U+FFFD), which is why the pending bytes are kept
    assert "".join(tok.decode([i]) for i in ids) != TEXT
    rt = RoundText(tok)
    rt.push(tok.encode("h"))
    rt.push(tok.encode("é")[:1])
    assert (rt.committed, rt.tail) == ("h", "\ufffd")  # half of "é" is held, not committed
    rt.push(tok.encode("é")[1:])
    assert (rt.committed, rt.tail) == ("hé", "")


def test_no_token_decodes_the_whole_round_again():
    tok = ByteTokenizer()
    ids = tok.encode("plain ascii text " * 20)
    rt = RoundText(tok)
    for i in ids:
        rt.push([i])
    assert rt.text == tok.decode(ids)
    # every decode but the check's own last one was a window of one or two tokens
    assert len(ids) == 340 and max(tok.calls[:-1]) <= 2 and tok.calls[-1] == 340


@pytest.mark.model
def test_smollm2_tokenizer_pieces_equal_one_decode(smol):
    tok = smol.tokenizer
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert _pushed(tok, ids).text == tok.decode(ids) == TEXT
    # control: this tokenizer splits the emoji and the CJK characters across tokens
    assert "".join(tok.decode([i]) for i in ids) != TEXT

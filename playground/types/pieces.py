"""A token's own text where its bytes are no whole characters: OpenAI's `bytes:\\xe4\\xbd` spelling.

A character of several bytes (CJK, emoji) is often split over tokens. Each such token decodes alone to U+FFFD,
so two of them read the same, and their bytes are lost. Spelled as OpenAI spells them, every token's text is
its own and gives its bytes back; the answer's text is unchanged (a token's share of it, `GeneratedToken.text`).
"""

from __future__ import annotations

import codecs
import re

_PIECE = re.compile(r"bytes:(?:\\x[0-9a-f]{2})+")


def byte_piece(raw: bytes) -> str:
    """`bytes:\\xe4\\xbd` for bytes that are no whole characters."""
    return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def is_byte_piece(text: str) -> bool:
    return _PIECE.fullmatch(text) is not None


def piece_bytes(text: str) -> bytes:
    """A token's bytes, from its own text (a byte piece, or characters)."""
    if is_byte_piece(text):
        return bytes.fromhex(text[len("bytes:") :].replace("\\x", ""))
    return text.encode("utf-8")


def token_name(token_id: int, own: str, as_ids: bool) -> str:
    """How a logprobs entry names a token: its own text, or `token_id:<id>` (vLLM's return_tokens_as_token_ids)."""
    return f"token_id:{token_id}" if as_ids else own


def shares(pieces: list[str]) -> list[str]:
    """Each token's share of the text its pieces spell: a character split over tokens counts at its last one."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return [decoder.decode(piece_bytes(piece)) for piece in pieces]

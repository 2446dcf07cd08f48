"""The constraint editor remembers the user's own text per kind, and names an example only while it is shown."""

from __future__ import annotations

from playground.constraints.examples import EXAMPLES, find_example

# Kinds whose constraint is typed into the editor (the others have no text to keep).
NO_EDITOR = ("none", "processor")


def example_title(kind: str, text: str | None) -> str | None:
    """The example the editor shows unchanged, or None once the text is the user's own."""
    wanted = (text or "").strip()
    return next((e.title for e in EXAMPLES.get(kind, []) if e.text.strip() == wanted), None)


def remember(drafts: dict[str, str], kind: str, text: str | None) -> dict[str, str]:
    """The drafts with `kind`'s current editor text kept (what switching back to the kind restores)."""
    if kind in NO_EDITOR or text is None:
        return drafts
    return {**drafts, kind: text}


def text_for(drafts: dict[str, str], kind: str) -> tuple[str, str]:
    """(editor text, suggested message) when switching to `kind`: the user's own text, else its first example."""
    if kind in drafts:
        return drafts[kind], ""
    example = find_example(kind, None)
    return (example.text, example.message) if example else ("", "")

"""Sessions that outlive the page: autosaved in the browser, and a link that opens the same setup elsewhere.

Both carry what the session file carries (every setting and the conversation). A link also pins the seed
the last sampled turn used, so opening it reproduces that turn; it is base64url JSON in `?session=`.
"""

from __future__ import annotations

import base64
import binascii
import math
import reprlib
import zlib
from collections.abc import Callable
from typing import Any

import gradio as gr

from playground import render
from playground.errors import PlaygroundError
from playground.providers.registry import Registry
from playground.render.chat import chatbot_value
from playground.types.sizes import MAX_SEED, MAX_STOP_SEQUENCES
from playground.ui import layout
from playground.ui.components import Components
from playground.ui.handlers import error_message
from playground.ui.state import FIELDS, ChatState, Form, UISettings, drawn_seed, export_session, import_session

QUERY_KEY = "session"
# A link's session, unpacked, at most: a chat's messages (sizes.MAX_INPUT_CHARS) with its settings, escaped as JSON
# escapes them. Unbounded, a 20 KB link unpacked into a 16 MB message (zlib packs a repeated text ~1,000 times).
MAX_SESSION_BYTES = 4 << 20
# A link's query, at most: Gradio reads the page's address into each event, and one past httpx's 65,536 characters
# left the page's opening event waiting for ever. A longer session is saved as a file.
MAX_QUERY_CHARS = 60_000
STORAGE_KEY = "structured-playground-session"
# The browser's copy is the user's own settings and chat, not a secret; a fixed key keeps it readable after
# the server restarts.
STORAGE_SECRET = "structured-playground"
LINK_JS = "(query) => query ? location.origin + location.pathname + query : ''"
# Once the page has opened a share link, the link leaves the address bar: a reload then opens the autosave,
# which holds every later turn, instead of the link's older setup. The page then says the restore is done
# (`<html data-session-restored>`): what the user changes from then on is not overwritten.
DROP_QUERY_JS = f"""() => {{
  const url = new URL(location.href);
  if (url.searchParams.has({QUERY_KEY!r})) {{
    url.searchParams.delete({QUERY_KEY!r});
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }}
  document.documentElement.dataset.sessionRestored = "1";
}}"""


def share_query(form: Form, state: ChatState) -> str:
    """`?session=...` for the current setup; a blank seed becomes the seed the last turn actually used."""
    if form.seed is None and drawn_seed(state.result) is not None:
        form = form.model_copy(update={"seed": drawn_seed(state.result)})
    packed = zlib.compress(export_session(form, state).encode("utf-8"), 9)
    query = f"?{QUERY_KEY}=" + base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")
    if len(query) > MAX_QUERY_CHARS:
        raise PlaygroundError(
            f"this session is too long for a link ({len(query)} characters, at most {MAX_QUERY_CHARS}): "
            "export it as a file instead"
        )
    return query


def read_query(value: str) -> tuple[Form, list[dict[str, str]]]:
    """The setup a share link carries; a damaged link is named as such, and so is one that unpacks past a chat's
    size."""
    if len(value) > MAX_QUERY_CHARS:
        raise PlaygroundError(f"the share link is longer than a link can be here ({MAX_QUERY_CHARS} characters)")
    unpack = zlib.decompressobj()
    try:
        packed = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        data = unpack.decompress(packed, MAX_SESSION_BYTES + 1)
        text = data.decode("utf-8") if unpack.eof and len(data) <= MAX_SESSION_BYTES else None
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        raise PlaygroundError("the share link is damaged (cut off when copied?)") from None
    if text is None:
        if len(data) > MAX_SESSION_BYTES:
            raise PlaygroundError(f"the share link unpacks to more than {MAX_SESSION_BYTES} bytes: not a session")
        raise PlaygroundError("the share link is damaged (cut off when copied?)")
    return import_session(text)


# Links and the autosave keep the conversation, not the token panels: said wherever an answer comes back.
RETRY_HINT = "Retry to see the tokens of the last answer (the token panels are not saved)"


def restored(query: str | None, saved: str | None) -> tuple[Form, list[dict[str, str]], str] | None:
    """What the page opens with (a share link first, else the browser's autosave, else nothing) and what to
    say about it."""
    if query:
        form, messages = read_query(query)
        opened = f"✓ opened a shared session ({len(messages)} message{'' if len(messages) == 1 else 's'})"
    elif saved:
        form, messages = import_session(saved)
        opened = ""
    else:
        return None
    answered = any(message.get("role") == "assistant" for message in messages)
    return form, messages, " · ".join(part for part in (opened, RETRY_HINT if answered else "") if part)


def fitted(form: Form, inputs: list[Any]) -> tuple[Form, list[str]]:
    """The form as this page's controls can hold it, and what had to change. A session from another server
    (or an edited link) can carry a number past a control's range or a choice this page does not offer; Gradio
    would refuse every Send with it ("Value 9 is greater than maximum value 4", no setting named). A number
    is brought into the range, a choice goes back to its default; each change is named."""
    changes: dict[str, Any] = {}
    for name, component in zip(FIELDS, inputs, strict=True):
        value, default = getattr(form, name), Form.model_fields[name].default
        fixed = _fit(component, value, default)
        if fixed != value:
            changes[name] = fixed
    if not 0 <= form.truncate <= MAX_SEED:  # (no minimum: a -1 typed there is named on Send; past 64 bits the page
        changes["truncate"] = 0  # cannot even be sent the value); more than the model's input is named on Send
    for name in ("seed", "max_reasoning_tokens"):  # text boxes: blank is a random seed, no budget
        value = getattr(form, name)
        if value is not None and not 0 <= value <= MAX_SEED:
            changes[name] = None
    notes = [_change_note(name, getattr(form, name), fixed) for name, fixed in changes.items()]
    stops = form.stop.splitlines()
    if len(stops) > MAX_STOP_SEQUENCES:  # every Send would fail on them
        changes["stop"] = "\n".join(stops[:MAX_STOP_SEQUENCES])
        notes.append(f"stop has {len(stops)} sequences, at most {MAX_STOP_SEQUENCES} here: kept the first ones")
    return (Form.model_validate({**form.model_dump(), **changes}) if changes else form), notes


def _fit(component: Any, value: Any, default: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):  # (a file's NaN: below and above nothing, and every Send failed)
        return default
    if isinstance(component, gr.Slider | gr.Number) and isinstance(value, int | float):
        low, high = component.minimum, component.maximum
        if low is not None and value < low:
            return type(value)(low)
        if high is not None and value > high:
            return type(value)(high)
    elif isinstance(component, gr.Dropdown | gr.Radio) and not getattr(component, "allow_custom_value", False):
        offered = [choice[1] if isinstance(choice, tuple) else choice for choice in component.choices or []]
        if value is not None and value not in offered:
            return default
    return value


def _change_note(name: str, value: Any, fixed: Any) -> str:
    if fixed is None:
        return f"{name} {value} is out of this server's range: left blank"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{name} {value} is out of this server's range: set to {fixed}"
    return f"{name} {reprlib.repr(value)} is not offered here: set to {fixed!r}"


def autosaver(c: Components) -> tuple[gr.BrowserState, Callable[..., Any]]:
    """The browser's copy of the session, and a step that writes it: after an event (`on` "then"), or on a
    component's trigger (`on` "change")."""
    saved = gr.BrowserState(None, storage_key=STORAGE_KEY, secret=STORAGE_SECRET)

    def save(state: ChatState, *values: Any) -> str | Any:
        try:
            return export_session(Form.from_values(list(values)), state)
        except Exception:  # noqa: BLE001 - an unreadable form is not saved; the last good copy stays
            return gr.skip()

    return saved, lambda event, on="then": getattr(event, on)(
        save, [c.state, *c.form_inputs()], saved, show_progress="hidden"
    )


def unserved(registry: Registry, settings: UISettings, model: str) -> tuple[str, str] | None:
    """The model a restored session opens on here, and why, when this server neither serves nor may load its
    own; None when it can be used as it is."""
    if not model or model in {name for _, name in registry.models()} or settings.allow_model_loading:
        return None
    default = registry.default_model or ""
    return default, f"model {reprlib.repr(model)} is not served here: opened on {default!r}"


def setup(
    demo: gr.Blocks,
    c: Components,
    saved: gr.BrowserState,
    unserved_model: Callable[[str], tuple[str, str] | None],
) -> None:
    """Restore on load (a share link first, else the autosave), and the Share button.

    What the link did is said under the chat (`chat-error`), where the user looks, not in the closed Session
    section; a restored link becomes the autosave at once, and leaves the address bar.
    """
    form, ed, session = c.form_inputs(), c.constraint, c.session

    def on_load(stored: str | None, state: ChatState, request: gr.Request) -> tuple:
        query = request.query_params.get(QUERY_KEY) if request else None
        keep = (gr.skip(),) * (len(form) + 5)
        try:
            found = restored(query, stored if isinstance(stored, str) else None)  # the browser's storage: text
        except Exception as exc:  # noqa: BLE001
            return (*keep[:-1], render.error_box(error_message(exc)))
        if found is None:
            return keep
        loaded, messages, note = found
        loaded, changed = fitted(loaded, form)
        moved = unserved_model(loaded.model)
        if moved is not None:  # the picker would fall back to the default in silence
            loaded, changed = loaded.model_copy(update={"model": moved[0]}), [moved[1], *changed]
        note = " · ".join(part for part in (note, *changed) if part)
        fresh = ChatState(messages=messages, mode=state.mode, markdown=state.markdown)
        status = render.box("ok" if query else "muted", note, elem_class="pg-shared") if note else gr.skip()
        autosave = export_session(loaded, fresh) if query else gr.skip()
        return (*loaded.values(), loaded.kind, fresh, chatbot_value(messages, fresh.markdown), autosave, status)

    outputs = [*form, c.constraint.text_kind, c.state, c.chat.chatbot, saved, c.chat.error]
    demo.load(on_load, [saved, c.state], outputs).then(layout.kind_view, [ed.kind, ed.text], ed.view).then(
        None, js=DROP_QUERY_JS
    )

    def on_share(state: ChatState, *values: Any) -> tuple:
        try:
            query = share_query(Form.from_values(list(values)), state)
        except Exception as exc:  # noqa: BLE001
            return "", render.error_box(error_message(exc))
        return gr.update(value=query, visible=True), render.box("ok", "✓ copy the link above: it opens this setup")

    session.share.click(on_share, [c.state, *form], [session.share_link, session.status]).then(
        None, session.share_link, session.share_link, js=LINK_JS
    )

"""Every operator option, declared once: its default, its command-line flag and its help.

playground.cli builds the flags from these types; the local provider, the engine and the compile pool
take their defaults from them, so a default is written in one place only.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import math
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

MIN_COMPILE_MEMORY_MB = 64


def option(default: Any, help: str, *, flag_default: Any = MISSING, **argparse_options: Any) -> Any:
    """A dataclass field that is also a flag: `--name-with-dashes`, with its help and argparse options.

    `flag_default` is the flag's default where it differs from the library's (adapters: none from the
    command line, any in a notebook).
    """
    meta = {"help": help, "flag_default": default if flag_default is MISSING else flag_default, **argparse_options}
    return field(default=default, metadata=meta)


class FromEnv(str):
    """A flag's default read from an environment variable: a bad one is named as the variable, not as the flag
    the operator never typed. Set but blank counts as unset."""

    variable: str

    @classmethod
    def read(cls, variable: str, unset: str | None, *, blank_is_unset: bool = True) -> str | None:
        """The variable's text, or `unset` where it is not set, empty or (`blank_is_unset`) only whitespace; the
        flag's `type` then reads it as a typed value (argparse parses a string default)."""
        raw = os.environ.get(variable, "")
        if not raw or (blank_is_unset and not raw.strip()):
            return unset
        value = cls(raw.strip() if blank_is_unset else raw)
        value.variable = variable
        return value


def _named_source(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse`, whose refusal of a value from the environment says which variable it came from."""

    @functools.wraps(parse)
    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            if isinstance(text, FromEnv):
                raise argparse.ArgumentTypeError(f"{exc} (from ${text.variable})") from None
            raise

    return parsed


def seconds(default: float, help: str) -> Any:
    """An option that is a duration in seconds."""
    return option(default, help, type=duration, metavar="SECONDS")


def duration(text: str) -> float:
    """Seconds: a finite number above 0 (0, a negative or nan would stop every compile, or make /health 503), at
    most a day (past the clock's range a worker's limit failed every compile, blamed on memory)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, at most {MAX_SECONDS}, got {text!r}")
    return value


MAX_SECONDS = 86_400


def port(text: str) -> int:
    value = non_negative(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, got {value}")
    return value


def reasoning_setting(text: str) -> str:
    """auto, none, a family name or START,END (one comma): said at the flag, before any model loads (the composition
    root checks the family name)."""
    setting = text.strip()
    start, comma, end = setting.partition(",")
    if (not comma and setting) or (start.strip() and end.strip() and "," not in end):
        return setting
    raise argparse.ArgumentTypeError(f"{text!r} is not auto, none, a family name or START,END")


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def non_negative(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def device_problem(device: str | None) -> str | None:
    """Why a device cannot work here (a name torch does not know, no CUDA or MPS in this build or machine), in the
    words after the flag's or the providers file field's name."""
    if device is None:
        return None
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        return "not a device (cuda, cuda:N, mps or cpu)"
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if kind not in available:
        return f"not a device this server can use ({kind}: cuda, cuda:N, mps or cpu)"
    if not available[kind]:
        return f"this torch build or machine has no {kind.upper()} device"
    return None


def dtype_problem(dtype: str | None) -> str | None:
    """Why a dtype is none torch has (checked before the model loads: it was found after the bind and torch's
    import), in the words after the flag's or the providers file field's name."""
    if dtype is None or dtype == "auto":
        return None
    import torch

    found = getattr(torch, dtype, None)
    if not isinstance(found, torch.dtype) or not found.is_floating_point:  # (int8 weights fail deep in the load)
        return "not a floating-point torch dtype (e.g. float32, bfloat16 or float16)"
    return None


def key_text(text: str) -> str:
    """A key without the whitespace around it (a secrets file's last newline): HTTP clients strip or refuse it in a
    header, so a key that kept it could never be sent. Nothing but whitespace would leave the server open."""
    key = text.strip()
    if not key:
        raise argparse.ArgumentTypeError(
            "empty: leave it out (and $PLAYGROUND_API_KEY unset) for a server without a key"
        )
    odd = next((i for i, char in enumerate(key) if not " " <= char <= "~"), None)
    if odd is not None:  # a header carries Latin-1 at best, and the SDKs send ASCII only: no client could send it
        raise argparse.ArgumentTypeError(
            f"printable ASCII only (an HTTP header cannot carry it otherwise): character {odd} is not"
        )
    return key


def model_name(text: str) -> str:
    """A model to load: not blank (`--model ""` loaded the embedded model and listed it as "")."""
    name = text.strip()
    if not name:
        raise argparse.ArgumentTypeError("empty: 'embedded', a hub id, a local folder or a .gguf file")
    return name


def file_path(text: str) -> str:
    """A file's path: not blank (`--providers ""` was taken as no providers file at all)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: the path of a file")
    return text


def origins(text: str) -> str:
    """Web origins (comma-separated), or *: each as a browser sends it in `Origin`, which is compared as it is:
    scheme://host[:port], lower-cased, an IDN host in punycode, no default port (https://a.com:443 is sent as
    https://a.com). One with a path (a trailing slash), a bare host name, a wildcard host or `null` never
    matched, or would let any sandboxed page in, and is refused."""
    entries = [part.strip() for part in some_names(text).split(",") if part.strip()]
    return ",".join(entry if entry == "*" else _origin(entry) for entry in entries)


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(entry: str) -> str:
    if entry.lower() == "null":
        raise argparse.ArgumentTypeError(
            "'null' is refused: every sandboxed frame and file:// page sends it, so it would let any of them in"
        )
    try:
        url = urllib.parse.urlsplit(entry)
        port = url.port
        host = _origin_host(url.hostname or "")
    except ValueError:
        host = None
    if host is None or not url.scheme or "@" in url.netloc or url.path or url.query or url.fragment:
        raise argparse.ArgumentTypeError(
            f"{entry!r} is not a web origin: scheme://host[:port] with no path, as a browser sends it "
            "(e.g. https://app.example.com or http://localhost:3000), or *"
        )
    scheme = url.scheme.lower()
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port is None or DEFAULT_PORTS.get(scheme) == port else f":{port}")


def _origin_host(name: str) -> str | None:
    """A host as a browser writes it in an origin: an IP address, or a name's labels in lower case (punycode for
    an IDN); None where no host is written so (empty, a wildcard, spaces, other characters)."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    try:
        ascii_name = name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None
    if not all(label and label.replace("-", "").replace("_", "").isalnum() for label in ascii_name.split(".")):
        return None
    return ascii_name


def some_names(text: str) -> str:
    """A comma-separated list with at least one entry (`,,` would answer no Host, /health included)."""
    if not any(part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"no names in {text!r}: comma-separated names, or *")
    return text


def host_names(text: str) -> str:
    """Host header names (comma-separated), or *: a URL is refused (`http://example.com` was kept as the name http)."""
    for part in some_names(text).split(","):
        entry = part.strip()
        if "/" in entry or "@" in entry:
            raise argparse.ArgumentTypeError(
                f"{entry!r} is not a host name: name the host as the Host header does (example.com, example.com:8080)"
            )
    return text


def addresses(text: str) -> str:
    """Proxy addresses or networks (comma-separated), or *: a name is never matched (uvicorn compares addresses)."""
    for part in some_names(text).split(","):
        entry = part.strip()
        if not entry or entry == "*":
            continue
        try:  # as uvicorn reads them: a network with host bits set (10.0.0.1/8) would never match
            ipaddress.ip_network(entry) if "/" in entry else ipaddress.ip_address(entry)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{entry!r} is not an IP address or network (e.g. 10.0.0.1, or 10.0.0.0/8 with its host bits zero, or *)"
            ) from None
    return text


def positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def megabytes(text: str) -> int:
    value = positive(text)
    if not MIN_COMPILE_MEMORY_MB <= value <= MAX_COMPILE_MEMORY_MB:  # (past a C long in bytes: every compile failed)
        raise argparse.ArgumentTypeError(
            f"must be from {MIN_COMPILE_MEMORY_MB} to {MAX_COMPILE_MEMORY_MB} (MB), got {value}"
        )
    return value


MAX_COMPILE_MEMORY_MB = 2**20  # a tebibyte


@dataclass(frozen=True)
class LocalOptions:
    """How local models are loaded and decoded here; the names are the command line's flags."""

    device: str | None = option(None, "cuda, mps or cpu (default: the best available)")
    dtype: str | None = option(None, "torch dtype, e.g. bfloat16 or float32 (default: bf16 on CUDA, fp32 else)")
    threads: int | None = option(
        1,
        "torch CPU threads (default: $PLAYGROUND_THREADS or 1)",
        flag_default=lambda: FromEnv.read("PLAYGROUND_THREADS", "1"),  # (argparse reads it with `type`)
        type=positive,
        metavar="N",
    )
    trust_remote_code: bool = option(
        False, "let the operator's models run the code they ship, never one a request loads (default: off)"
    )
    compile_timeout: float = seconds(
        10.0, "time limit for compiling one constraint; the compile is stopped past it (default: 10)"
    )
    compile_memory: int = option(
        1024,
        "memory one compile may take beyond a warm compile worker; the compile is stopped past it (default: 1024)",
        type=megabytes,
        metavar="MB",
    )
    compile_workers: int = option(2, "compile worker processes per model (default: 2)", type=positive, metavar="N")
    prefix_cache_tokens: int = option(
        4096,
        "KV cache of recent sequences kept per local model, in tokens, so chat turns, retries and the "
        "next-token view prefill only what is new; 0 turns it off (default: 4096)",
        type=non_negative,
        metavar="N",
    )
    max_batch_size: int = option(
        32,
        "rows that decode together in one batch per local model (a best_of request counts each candidate); "
        "more requests wait to join between steps (default: 32)",
        type=positive,
        metavar="N",
    )
    cpu_batch_weights: str = option(
        "auto",
        "on the CPU, keep a second copy of a float32 model's linear weights in oneDNN's blocked layout, "
        "which multiplies a batch's rows about 1.3x faster (at the row counts a probe at load finds it faster); "
        "auto: when the copy takes at most an eighth of "
        "the machine's (or its container's) memory (default: auto)",
        choices=("auto", "on", "off"),
    )
    cpu_gguf_kernels: str = option(
        "auto",
        "on the CPU, let a GGUF model's Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K layers multiply from the file's own "
        "blocks (float32 math, 3-6x fewer bytes per token than its dequantized weights) with a small C kernel compiled for this machine "
        "on first use, at the row counts a probe at load finds it faster; off: float32 weights only; needs a C "
        "compiler (cc, or $CC), without one nothing changes (default: auto)",
        choices=("auto", "off"),
    )
    cpu_attention_kernel: str = option(
        "auto",
        "on the CPU, run a decode step's attention (one new token per row, the step batching and chats repeat) "
        "with a small C kernel compiled for this machine on first use instead of torch's sdpa, whose overhead "
        "outweighs the arithmetic there (float32, the same sums in another order); off: sdpa; needs a C compiler "
        "(cc, or $CC), without one nothing changes (default: auto)",
        choices=("auto", "off"),
    )
    max_new_tokens: int = option(
        256,
        "max_new_tokens when a request leaves it unset, on local models; a remote server applies its own "
        "(default: 256)",
        type=positive,
        metavar="N",
    )
    reasoning: str = option(
        "auto",
        "reasoning delimiters of local models: auto (known families found in the chat template or the tokenizer's "
        "added tokens), none, a family (think, gpt-oss, seed, mistral, thought, granite) or START,END "
        "(default: auto)",
        metavar="auto|none|FAMILY|START,END",
        type=reasoning_setting,
    )
    adapters: tuple[str, ...] | None = option(
        None,
        "PEFT adapters (hub ids or folders) that requests may name in adapter_id (default: none)",
        flag_default=(),
        type=names,
        metavar="ID[,ID]",
    )

    @classmethod
    def from_flags(cls, args: Any, **overrides: Any) -> LocalOptions:
        """From parsed flags of the same names, with a providers file entry's overrides."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        return cls(**{**given, **overrides})


LOCAL = LocalOptions()  # the defaults, for the library's own signatures


@dataclass(frozen=True)
class ServerOptions:
    """What one server serves, where, and to whom."""

    model: str = option(
        "embedded",
        "default model: 'embedded' (SmolLM2-135M GGUF), a hub id, a local folder or a .gguf file (default: embedded)",
        type=model_name,
    )
    host: str = option("127.0.0.1", "interface to bind; 0.0.0.0 for all (default: 127.0.0.1)")
    port: int = option(7860, "port for the UI and the API (default: 7860)", type=port)
    providers: str | None = option(
        None, "YAML file of remote providers and the models they serve", metavar="FILE", type=file_path
    )
    custom_modules: str = option(
        "", "Python modules to import at start; they register logits processors", metavar="MOD[,MOD]"
    )
    api_key: str | None = option(
        None,
        "require the key on the whole server except /health: API routes take `Authorization: Bearer KEY`, the UI "
        "asks for a login (any user name, KEY as the password) (default: $PLAYGROUND_API_KEY)",
        # (set but empty: no key, as unset; only whitespace: refused, as the flag, named as the variable)
        flag_default=lambda: FromEnv.read("PLAYGROUND_API_KEY", None, blank_is_unset=False),
        type=key_text,
        metavar="KEY",
    )
    max_concurrent: int = option(
        8,
        "API requests that work at once (a local model decodes them in one batch); more wait in the queue (default: 8)",
        type=positive,
        metavar="N",
    )
    max_queue: int = option(
        16,
        "API requests that may wait for a turn; past that the server answers 429 with Retry-After (default: 16)",
        type=non_negative,
        metavar="N",
    )
    allow_model_loading: bool = option(
        False,
        "let requests (the UI's model picker, POST /v1/models) load more models; on a host other than "
        "loopback (127.0.0.1, localhost, ::1) only with --api-key (default: off; only the operator's --model and providers file load)",
    )
    max_models: int = option(
        4, "most models the local provider holds when requests may load more (default: 4)", type=positive, metavar="N"
    )
    stall_timeout: float = seconds(
        60.0, "/health answers 503 while running work has made no progress for this long (default: 60)"
    )
    forwarded_allow_ips: str | None = option(
        None,
        "proxies (comma-separated addresses, or *) whose X-Forwarded-For names the client; by default nobody's, "
        "so clients are told apart by their own address",
        metavar="IPS",
        type=addresses,
    )
    allowed_hosts: str | None = option(
        None,
        "Host header names the server answers to (comma-separated, or *); by default its loopback names "
        "(127.0.0.1, localhost, ::1) when --host is one of them, so no web page can call it through DNS "
        "rebinding, and any name otherwise",
        metavar="NAMES",
        type=host_names,
    )
    cors_allow_origin: str | None = option(
        None,
        "web origins whose pages may call the API from a browser (comma-separated, e.g. https://app.example.com, "
        "or *), as TGI's flag of that name and vLLM's --allowed-origins; by default none (no CORS headers)",
        metavar="ORIGINS",
        type=origins,
    )
    no_ui: bool = option(False, "serve only the HTTP API")


SERVER = ServerOptions()  # the defaults, for the library's own signatures


def add_flags(parser: argparse.ArgumentParser, *types: type) -> None:
    """One flag per field of each options type: booleans switch on, the rest take a value."""
    for options in types:
        for f in fields(options):
            meta = dict(f.metadata)
            default = meta.pop("flag_default")
            if isinstance(default, Callable):  # read from the environment when the flags are parsed
                default = default()
            flag = "--" + f.name.replace("_", "-")
            if f.type in ("bool", bool):
                parser.add_argument(flag, action="store_true", help=meta["help"])
            else:
                if "type" in meta:
                    meta["type"] = _named_source(meta["type"])
                parser.add_argument(flag, default=default, **meta)

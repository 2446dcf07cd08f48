"""Assemble a self-contained Space folder from this repository, check its card, and upload it.

python spaces/deploy.py --repo-id OWNER/NAME [--dry-run] [--private] [--token TOKEN] [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, SpaceCard, SpaceHardware
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

REPO_ROOT = Path(__file__).resolve().parent.parent
CARD = Path(__file__).resolve().parent / "README.md"
REQUIRED = ("app.py", "playground", "requirements.txt")
OPTIONAL = ("widgets",)
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".ipynb_checkpoints")
CARD_KEYS = (
    "title",
    "emoji",
    "colorFrom",
    "colorTo",
    "sdk",
    "sdk_version",
    "app_file",
    "license",
    "short_description",
    "models",
    "suggested_hardware",
)
COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}
MAX_SHORT_DESCRIPTION = 60


class DeployError(Exception):
    """Anything that stops a deploy; main() prints it as one line instead of a traceback."""


def assemble(dest: Path, root: Path | None = None, card: Path | None = None) -> list[str]:
    """Copy what the Space runs (and nothing else) into `dest`; returns its files, sorted."""
    root, card = root or REPO_ROOT, card or CARD
    for name in REQUIRED:
        if not (root / name).exists():
            raise DeployError(f"{name} is missing from {root}; the Space cannot run without it")
    dest.mkdir(parents=True, exist_ok=True)
    for name in REQUIRED + OPTIONAL:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=IGNORE, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy2(source, dest / name)
    shutil.copy2(card, dest / "README.md")
    return sorted(path.relative_to(dest).as_posix() for path in dest.rglob("*") if path.is_file())


def card_metadata(folder: Path) -> dict[str, Any]:
    """Parse the card with huggingface_hub and check what a Space needs to build."""
    try:
        data = SpaceCard.load(folder / "README.md").data.to_dict()
    except (ValueError, OSError) as exc:
        raise DeployError(f"the Space card does not parse: {exc}") from exc
    missing = [key for key in CARD_KEYS if not data.get(key)]
    if missing:
        raise DeployError(f"the Space card lacks {', '.join(missing)}")
    if data["sdk"] != "gradio":
        raise DeployError(f"the Space card's sdk is {data['sdk']!r}; this app needs 'gradio'")
    bad_colors = [data[k] for k in ("colorFrom", "colorTo") if data[k] not in COLORS]
    if bad_colors:
        raise DeployError(f"the Space card's colours {bad_colors} are not among {sorted(COLORS)}")
    if len(data["short_description"]) > MAX_SHORT_DESCRIPTION:
        raise DeployError(f"short_description is longer than {MAX_SHORT_DESCRIPTION} characters")
    if data["suggested_hardware"] not in {h.value for h in SpaceHardware}:
        raise DeployError(f"suggested_hardware {data['suggested_hardware']!r} is not a Space hardware the hub knows")
    if not (folder / data["app_file"]).is_file():
        raise DeployError(f"app_file {data['app_file']!r} is not in the Space folder")
    return data


def duplicate_url(repo_id: str) -> str:
    """Where anyone can copy the Space to their own account (and pick its hardware there)."""
    return f"https://huggingface.co/spaces/{repo_id}?duplicate=true"


def upload(folder: Path, repo_id: str, *, private: bool, token: str | None) -> str:
    """Create the Space repo when needed and push the folder as one commit; returns the Space URL."""
    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="space", space_sdk="gradio", exist_ok=True, private=private)
    api.upload_folder(
        repo_id=repo_id, folder_path=folder, repo_type="space", commit_message="Deploy Structured Playground"
    )
    return str(url)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Deploy the playground to a Hugging Face Space.")
    parser.add_argument("--repo-id", required=True, help="the Space, as OWNER/NAME")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the files that would be uploaded, their size, the card and its hardware; no network",
    )
    parser.add_argument("--private", action="store_true", help="create the Space as private")
    parser.add_argument("--token", default=None, help="Hugging Face token (default: HF_TOKEN or the saved login)")
    parser.add_argument(
        "--output", type=Path, default=None, help="assemble into this folder and keep it (default: a temporary folder)"
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Assemble into `folder`, validate, and upload unless it is a dry run."""
    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as exc:
        raise DeployError(f"--repo-id {args.repo_id!r} is not a valid OWNER/NAME: {exc}") from None
    if "/" not in args.repo_id:
        raise DeployError(f"--repo-id {args.repo_id!r} needs an owner: OWNER/NAME")
    files = assemble(folder)
    card = card_metadata(folder)
    report: dict[str, Any] = {
        "repo_id": args.repo_id,
        "private": args.private,
        "files": files,  # exactly what upload_folder sends: the assembled folder, every file in it
        "upload": {"files": len(files), "bytes": sum((folder / name).stat().st_size for name in files)},
        "hardware": {"suggested_hardware": card["suggested_hardware"], "duplicate": duplicate_url(args.repo_id)},
        "card": card,
    }
    if not args.dry_run:
        try:
            report["url"] = upload(folder, args.repo_id, private=args.private, token=args.token)
        except Exception as exc:  # any hub or network failure ends the run with its message
            raise DeployError(f"upload to {args.repo_id} failed: {type(exc).__name__}: {exc}") from exc
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.output is not None and args.output.exists() and not args.output.is_dir():
            raise DeployError(f"--output {args.output} is not a folder; give a new or empty folder")
        if args.output is not None and args.output.exists() and any(args.output.iterdir()):
            raise DeployError(f"--output {args.output} is not empty; give a new or empty folder")
        if args.output is not None:
            report = run(args, args.output.resolve()) | {"folder": str(args.output.resolve())}
        else:
            with tempfile.TemporaryDirectory(prefix="playground-space-") as tmp:
                report = run(args, Path(tmp))
    except DeployError as exc:
        print(f"deploy: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

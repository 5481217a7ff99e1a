"""`agora agent image`: the images an agent runs tasks from (agent/images.py), managed in its
work dir while it runs or not: import an OCI layout (a directory or a tar of one), list, remove."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agora.cli.errors import CommandError


def register_image(subparsers) -> None:
    """`agora agent image ...`, registered in place of the agent daemon's parser."""
    agent = subparsers.add_parser(
        "agent", help="run an agent; `agora agent image` manages the images its tasks run from"
    )
    actions = agent.add_subparsers(dest="agent_action", metavar="image")
    actions.required = True
    image = actions.add_parser(
        "image",
        help="import, list and remove the images this agent's tasks may name",
        description="Images are OCI image layouts, unpacked once into the agent's work dir "
        "(umoci); every task of an image shares its root filesystem read-only. Make one with "
        "`skopeo copy docker://busybox oci:busybox:latest` where a registry is reachable, or "
        "with umoci from any directory of files.",
    )
    verbs = image.add_subparsers(dest="image_action", metavar="ACTION")
    verbs.required = True
    imp = verbs.add_parser("import", help="unpack an OCI image layout (a directory or a tar)")
    imp.add_argument("source", type=Path, metavar="FILE", help="the layout or its tar archive")
    imp.add_argument("--name", required=True, help="what tasks call it, e.g. busybox:latest")
    imp.add_argument("--tag", default=None, help="the layout's tag to take (default: its only)")
    pull = verbs.add_parser(
        "pull",
        help="copy an image with skopeo and import it: docker://busybox:latest from a "
        "registry, oci-archive:FILE, docker-archive:FILE",
    )
    pull.add_argument("reference", metavar="REFERENCE", help="a skopeo image reference")
    pull.add_argument("--name", required=True, help="what tasks call it, e.g. busybox:latest")
    listing = verbs.add_parser("list", help="the images this agent has")
    listing.add_argument("--json", action="store_true", help="one JSON array")
    remove = verbs.add_parser(
        "rm", help="remove an image (refused while tasks not yet ended use it, unless --force)"
    )
    remove.add_argument("name")
    for verb in (imp, pull, remove):
        verb.add_argument(
            "--force",
            action="store_true",
            help="replace or remove the image even while tasks use it (they lose its files)",
        )
    for verb in (imp, pull, listing, remove):
        verb.add_argument(
            "--work-dir",
            type=Path,
            required=True,
            metavar="DIR",
            help="the agent's --work-dir (its default is ./agora-agent-PORT)",
        )
    image.set_defaults(func=run)
    for verb in (imp, pull, listing, remove):
        verb.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agora.agent.images import ImageError, ImageStore

    store = ImageStore(args.work_dir / "images")
    if args.image_action in ("import", "pull", "rm") and not args.force:
        _refuse_if_in_use(args.work_dir, args.name, args.image_action)
    try:
        if args.image_action == "import":
            started = time.monotonic()
            meta = store.import_layout(args.source, args.name, args.tag)
            took = time.monotonic() - started
            print(f"image {meta['name']} imported from {args.source} ({took:.1f} s)")
        elif args.image_action == "pull":
            started = time.monotonic()
            meta = store.pull(args.reference, args.name)
            took = time.monotonic() - started
            print(f"image {meta['name']} pulled from {args.reference} ({took:.1f} s)")
        elif args.image_action == "list":
            images = store.list()
            if args.json:
                print(json.dumps(images, indent=2, sort_keys=True))
            else:
                for meta in images:
                    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(meta["imported_at"]))
                    print(f"{meta['name']}\timported {when} from {meta['source']}")
        elif not store.remove(args.name):
            raise CommandError(f"no image {args.name} in {args.work_dir}")
        else:
            print(f"image {args.name} removed")
    except ImageError as e:
        raise CommandError(str(e)) from None
    return 0


def _refuse_if_in_use(work_dir: Path, name: str, action: str) -> None:
    """Running tasks read their image's files from the work dir: removing or replacing them
    would pull the files from under those tasks."""
    from agora.agent.checkpoint import images_in_use

    tasks = images_in_use(work_dir).get(name, [])
    if tasks:
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        doing = "remove" if action == "rm" else "replace"
        raise CommandError(
            f"image {name} is in use by {len(tasks)} task(s) not yet ended ({shown}): kill them "
            f"first, or pass --force to {doing} it anyway"
        )

"""`ns_control image build`: netspec's image for `docker:` hosts, made in an engine
(controller/hosts/images.py does the work)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(command: Any) -> None:
    image = command("image", help="images for docker: hosts, made on this machine (no registry needed)")
    what = image.add_commands(dest="image_command", required=True)
    build = what("build", help="make netspec's image of this build in an engine (cached by its "
                            "content: a second build finds it)")
    build.add_argument("--engine", metavar="URL", help="the engine (ssh://user@host, tcp://host:port, "
                       "unix:///path); default DOCKER_HOST, else this machine's")
    build.add_argument("--base", metavar="IMAGE", help="build on this image of the engine (python3 3.11 or "
                       "newer in it) rather than on a Debian base made here")
    build.add_argument("--package", metavar="NAME", action="append", default=[], dest="packages",
                       help="an extra Debian package in the image, e.g. etcd-server (again for more): "
                            "a docker: host with packages: [NAME, ...] runs that image")
    build.add_argument("--debootstrap", action="store_true",
                       help="make the Debian base by debootstrap even where this machine's own "
                            "packages could make it")


def cmd_image(args: argparse.Namespace) -> int:
    from ..hosts.engines import engine_client
    from ..hosts.images import build

    client = engine_client(args.engine)
    try:
        tag = build(client, print, base=args.base, debootstrap=args.debootstrap,
                    packages=tuple(args.packages))
    finally:
        client.close()
    print(tag)
    return 0

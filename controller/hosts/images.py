"""Images for container hosts, made on this machine: no registry needed (`ns_control image build`).

Two layers, each cached in the engine by a content hash in its tag:
- the base, `netspec-base:<hash>`: a Debian root filesystem with python3 (and its venv
  module), iproute2, nftables and iptables, which link conditions need, tcpdump, which the
  packets: service captures with, and any extra
  Debian packages asked (`--package etcd-server`: what an experiment's programs need). It is made from
  this machine's own installed Debian packages' files when it has them all (seconds: the
  files are on disk already), else by `debootstrap --variant=minbase` from the mirror in
  this machine's apt sources (a minute or more; its package cache is kept in
  $NETSPEC_CACHE/debootstrap between builds), then imported. Its hash names the packages
  and their versions (or the suite, mirror and packages asked of debootstrap).
- netspec, `netspec:<build>` (or `netspec:<build>-<base>` on a user's own base image):
  this build of netspec and the daemon's dependencies installed from the wheels made for
  remote installs (wheels.py), with the installer remote hosts run (remote.py), into
  /opt/netspec/venv. Its label org.netspec.netspecd names the daemon's path there.
  `netspec:<build>` is this build on the Debian base made first on the engine (of this
  machine's packages, or debootstrap's): either serves alike. With extra packages it is
  `netspec:<build>-with-<hash of their names>`, which a `docker: {packages: [...]}` host runs.
Images of earlier builds stay in the engine, as their wheels stay in the cache: remove them
with `docker image prune -a --filter label=org.netspec.build` (which takes this build's too, made
again by the next `ns_control image build`).

A user's own image with netspec installed works as it is (netspecd on its PATH).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError

from .wheels import build_id, local_wheels

BASE_REPOSITORY = "netspec-base"
REPOSITORY = "netspec"
PACKAGES = ("python3", "python3-venv", "iproute2", "nftables", "iptables", "netbase", "base-files", "bash",
            "dash", "coreutils", "procps", "sed", "grep", "findutils", "tcpdump")
NETSPECD = "/opt/netspec/venv/bin/netspecd"
NETSPECD_LABEL = "org.netspec.netspecd"
BUILD_LABEL = "org.netspec.build"
SUITE = "bookworm"
# Each build step's deadline: dpkg's listings take a second; debootstrap took 4 min on a loaded
# 2-core machine with its packages to fetch.
DPKG_S, DEBOOTSTRAP_S, TAR_S = 60.0, 1800.0, 600.0
# Files of this machine kept in a base made of its packages: the dynamic linker's cache and
# configuration (libraries live in multiarch directories), and the users and groups.
LOCAL_EXTRAS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
USR_MERGED = ("bin", "sbin", "lib", "lib64")

Say = Callable[[str], None]


def default_image(packages: tuple[str, ...] = ()) -> str:
    """The image a `docker:` host without `image:` runs: this build on the Debian base, with
    `packages` (extra Debian packages) in it."""
    extra = f"-with-{_digest(sorted(set(packages)))[:12]}" if packages else ""
    return f"{REPOSITORY}:{build_id()}{extra}"


def cache_dir() -> Path:
    return Path(os.environ.get("NETSPEC_CACHE", Path("~/.cache/netspec").expanduser()))


def _has(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build(client: Any, say: Say, base: str | None = None, debootstrap: bool = False,
          packages: tuple[str, ...] = ()) -> str:
    """The netspec image of this build in `client`'s engine, built unless it is there (its
    Debian base too, with `packages` in it, or on the user's `base` image); its tag.

    Raises:
        NetspecError: a step failed (naming it and what it said), or `packages` are asked
            with a `base` of the user's (whose packages are its own).
    """
    import docker.errors

    if base is None:
        base = ensure_base(client, say, debootstrap, packages)
        tag = default_image(packages)
    elif packages:
        raise NetspecError(f"extra packages ({', '.join(packages)}) go into netspec's Debian base; on an "
                           f"image of your own ({base}), install them in it")
    else:
        try:
            base_id = client.images.get(base).id
        except docker.errors.ImageNotFound:
            raise NetspecError(f"no image {base} in the engine to build on (load it first: docker load, or "
                               "docker pull where a registry is reachable)") from None
        tag = f"{REPOSITORY}:{build_id()}-{base_id.removeprefix('sha256:')[:12]}"
    if _has(client, tag):
        say(f"{tag}: there already")
        return tag
    started = time.monotonic()
    context = _context(base)
    try:
        client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                            network_mode="none", labels={NETSPECD_LABEL: NETSPECD, BUILD_LABEL: build_id()})
    except docker.errors.BuildError as exc:
        said = "".join(str(line.get("stream", line.get("error", ""))) for line in exc.build_log)
        raise NetspecError(f"building {tag} on {base} failed: {exc.msg}\n{said[-2000:]}") from None
    except docker.errors.APIError as exc:
        raise NetspecError(f"building {tag} on {base} failed: {exc.explanation or exc}") from None
    say(f"{tag}: netspec installed on {base} in {time.monotonic() - started:.1f} s")
    return tag


# The installer remote hosts run (remote.py), with the base image's python3.
DOCKERFILE = """FROM {base}
COPY wheels /tmp/netspec-wheels
COPY install.py /tmp/netspec-install.py
RUN mkdir -p /opt/netspec && python3 /tmp/netspec-install.py /opt/netspec {build} /tmp/netspec-wheels \\
    && rm -rf /tmp/netspec-wheels /tmp/netspec-install.py /opt/netspec/install.lock
"""


def _context(base: str) -> io.BytesIO:
    from .remote import INSTALL_SCRIPT

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", DOCKERFILE.format(base=base, build=build_id()).encode())
        _add_bytes(tar, "install.py", INSTALL_SCRIPT.encode())
        for wheel in local_wheels(build_id()):
            tar.add(wheel, f"wheels/{wheel.name}")
    data.seek(0)
    return data


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def ensure_base(client: Any, say: Say, debootstrap: bool = False, packages: tuple[str, ...] = ()) -> str:
    """The Debian base image in the engine, with `packages` beside the base's own, made
    unless there: from this machine's packages (when it has them all and `debootstrap` is not
    asked), else by debootstrap; its tag."""
    wanted = (*PACKAGES, *sorted(set(packages) - set(PACKAGES)))
    local = None if debootstrap else local_packages(wanted)
    if local is not None:
        tag = f"{BASE_REPOSITORY}:local-{_digest(sorted(local.items()))}"
        make = lambda tar: _local_rootfs(local, tar)  # noqa: E731
        how = f"from this machine's {len(local)} installed Debian packages"
    else:
        mirror = apt_mirror()
        # without extras, the list (and so the tag) a base made before extras had
        asked = [SUITE, mirror, PACKAGES] + ([wanted] if packages else [])
        tag = f"{BASE_REPOSITORY}:{SUITE}-{_digest(asked)}"
        make = lambda tar: _debootstrap_rootfs(mirror, tar, say, wanted)  # noqa: E731
        how = f"by debootstrap of Debian {SUITE}"
    if _has(client, tag):
        return tag
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="netspec-base-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        make(tar)
        made = time.monotonic()
        repository, _, version = tag.partition(":")
        with open(tar, "rb") as data:
            client.api.import_image_from_data(data, repository=repository, tag=version)
    if not _has(client, tag):
        raise NetspecError(f"the engine did not keep the imported base image {tag}")
    say(f"{tag}: made {how} in {made - started:.1f} s, imported in {time.monotonic() - made:.1f} s")
    return tag


def _digest(value: object) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def local_packages(wanted: tuple[str, ...] = PACKAGES) -> dict[str, str] | None:
    """Every package of `wanted` and what it depends on, as installed on this machine
    (name -> version); None where it is no Debian or lacks one of them."""
    if not shutil.which("dpkg-query"):
        return None
    shown = _tool(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}|${Package}|${Version}|${Depends}|"
                   "${Pre-Depends}|${Provides}\n"], DPKG_S)
    installed: dict[str, tuple[str, str]] = {}
    provided: dict[str, str] = {}
    for line in shown.stdout.splitlines():
        status, name, version, depends, pre, provides = (line.split("|") + [""] * 6)[:6]
        if status.startswith("ii"):
            installed[name] = (version, f"{depends},{pre}")
            for virtual in filter(None, (_name(p) for p in provides.split(","))):
                provided.setdefault(virtual, name)
    if any(p not in installed for p in wanted):
        return None
    found: dict[str, str] = {}
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        version, depends = installed[name]
        found[name] = version
        for clause in filter(None, (c.strip() for c in depends.split(","))):
            choices = [_name(alt) for alt in clause.split("|")]
            there = [c if c in installed else provided.get(c) for c in choices]
            if chosen := next((c for c in there if c), None):
                pending.append(chosen)
    return found


def _name(relation: str) -> str:
    """The package a dependency names: `libc6 (>= 2.34)` and `python3:any` name libc6, python3."""
    return re.split(r"[ :(]", relation.strip(), maxsplit=1)[0]


def _local_rootfs(packages: dict[str, str], into: Path) -> None:
    """A tar of the root filesystem made of the installed files of `packages`, with the
    alternatives they are reached through, /usr merged as on this machine."""
    listed = _tool(["dpkg-query", "-L", *sorted(packages)], DPKG_S)
    paths = {p for p in listed.stdout.splitlines() if p.startswith("/")}
    for extra in LOCAL_EXTRAS:
        paths.update([extra] if not os.path.isdir(extra) else (str(p) for p in Path(extra).iterdir()))
    for alt in Path("/etc/alternatives").iterdir():  # links update-alternatives made, not dpkg
        if alt.is_symlink() and os.readlink(alt) in paths:
            paths.add(str(alt))
            for where in ("/usr/sbin", "/usr/bin"):
                link = Path(where) / alt.name
                if link.is_symlink() and os.readlink(link) == str(alt):
                    paths.add(str(link))
    with tarfile.open(into, "w") as tar:
        for name in USR_MERGED:
            if os.path.islink(f"/{name}"):
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{name}")
                tar.addfile(info)
        for name in ("tmp", "root", "run", "var/tmp", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if "tmp" in name else 0o755
            tar.addfile(info)
        _add_bytes(tar, "etc/passwd", PASSWD.encode())
        _add_bytes(tar, "etc/group", GROUP.encode())
        seen = {f"/{name}" for name in tar.getnames()}
        for path in sorted(paths):
            real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            if real in seen or not os.path.lexists(real):
                continue
            seen.add(real)
            if os.path.isdir(real) and not os.path.islink(real):
                continue
            tar.add(real, real.lstrip("/"), recursive=False)


def apt_mirror() -> str:
    """The Debian mirror of this machine's apt sources (deb822 .sources, then .list)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith("#"))
            if SUITE in fields.get("Suites", "") and "security" not in fields.get("URIs", ""):
                return fields["URIs"].split()[0]
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]:
        if path.is_file():
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["deb"] and SUITE in words and "security" not in line:
                    return next(w for w in words[1:] if "://" in w)
    raise NetspecError(f"no Debian {SUITE} mirror in this machine's apt sources (/etc/apt) for debootstrap")


def _debootstrap_rootfs(mirror: str, into: Path, say: Say, packages: tuple[str, ...]) -> None:
    if not shutil.which("debootstrap"):
        raise NetspecError("debootstrap is not installed (apt-get install debootstrap), and this machine "
                           "lacks Debian packages the base needs: " + ", ".join(packages))
    packages = cache_dir() / "debootstrap"
    packages.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="netspec-rootfs-") as root:
        say(f"debootstrap of Debian {SUITE} from {mirror} (its packages kept in {packages})")
        _tool(["debootstrap", "--variant=minbase", f"--cache-dir={packages}",
               f"--include={','.join(packages)}", SUITE, root, mirror], DEBOOTSTRAP_S)
        _tool(["tar", "-C", root, "-cf", str(into), "."], TAR_S)


def _tool(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A build step's command run to its end within `timeout_s`; its failure or its timeout a
    NetspecError naming it, with the end of what it said."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NetspecError(f"{argv[0]} did not finish within {timeout_s:.0f} s") from None
    if done.returncode:
        said = (done.stdout + done.stderr)[-2000:]
        raise NetspecError(f"{argv[0]} failed (exit {done.returncode}):\n{said}")
    return done

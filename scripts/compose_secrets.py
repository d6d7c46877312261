"""Make the compose cluster's secrets when they are missing: OUT/api_token (a random API token),
OUT/nN.key_secret (each node's CURVE certificate with its secret key) and OUT/public/nN.key (every
node's public certificate). Existing files are kept, so re-running changes nothing.

    python scripts/compose_secrets.py OUT [--owner UID:GID] [n1 n2 n3]

``scripts/cluster up --docker`` runs it inside the image (which has pyzmq) as root with ``--owner
10001:10001``: the files are then readable by the image's user alone (0600, directories 0700). Every
file and directory is created with those modes (umask 077), never readable by others even briefly."""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
from pathlib import Path

import zmq.auth


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` created with mode 0600 (replacing a file left by an interrupted run)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--owner", default="", help="UID:GID to own the files (needs root)")
    p.add_argument("nodes", nargs="*", default=["n1", "n2", "n3"])
    args = p.parse_args()
    os.umask(0o077)  # the token and secret keys (and zmq's temporary copies) are born 0600, directories 0700
    out: Path = args.out
    (out / "public").mkdir(parents=True, exist_ok=True)
    token = out / "api_token"
    if not token.exists():
        _write_private(token, (secrets.token_urlsafe(32) + "\n").encode())
    for node in args.nodes:
        if (out / f"{node}.key_secret").exists() and (out / "public" / f"{node}.key").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            public, secret = zmq.auth.create_certificates(tmp, node)
            _write_private(out / "public" / f"{node}.key", Path(public).read_bytes())
            _write_private(out / f"{node}.key_secret", Path(secret).read_bytes())
    for path in [out, *out.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
        if args.owner:
            uid, gid = (int(x) for x in args.owner.split(":"))
            os.chown(path, uid, gid)
    print(f"compose secrets: {out} ({', '.join(args.nodes)})")


if __name__ == "__main__":
    main()

"""Make the compose cluster's secrets when they are missing: OUT/api_token (a random API token),
OUT/nN.key_secret (each node's CURVE certificate with its secret key) and OUT/public/nN.key (every
node's public certificate). Existing files are kept, so re-running changes nothing.

    python scripts/compose_secrets.py OUT [--owner UID:GID] [n1 n2 n3]

``scripts/cluster up --docker`` runs it inside the image (which has pyzmq) as root with ``--owner
10001:10001``: the files are then readable by the image's user alone (0600, directories 0700)."""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
from pathlib import Path

import zmq.auth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--owner", default="", help="UID:GID to own the files (needs root)")
    p.add_argument("nodes", nargs="*", default=["n1", "n2", "n3"])
    args = p.parse_args()
    out: Path = args.out
    (out / "public").mkdir(parents=True, exist_ok=True)
    token = out / "api_token"
    if not token.exists():
        token.write_text(secrets.token_urlsafe(32) + "\n")
    for node in args.nodes:
        if (out / f"{node}.key_secret").exists() and (out / "public" / f"{node}.key").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            public, secret = zmq.auth.create_certificates(tmp, node)
            (out / "public" / f"{node}.key").write_bytes(Path(public).read_bytes())
            (out / f"{node}.key_secret").write_bytes(Path(secret).read_bytes())
    for path in [out, *out.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
        if args.owner:
            uid, gid = (int(x) for x in args.owner.split(":"))
            os.chown(path, uid, gid)
    print(f"compose secrets: {out} ({', '.join(args.nodes)})")


if __name__ == "__main__":
    main()

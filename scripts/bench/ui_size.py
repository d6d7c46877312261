"""Size of the built web console (molens/web/static/): every file raw and gzip -9, and the total.

Run ``scripts/setup`` (or ``npm run build`` in frontend/) first. The budget is 400 KB
gzipped for the whole console.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "molens" / "web" / "static"


def main() -> int:
    if not (STATIC / "index.html").is_file():
        print(
            f"ui_size: the console is not built ({STATIC}/index.html missing): run scripts/setup",
            file=sys.stderr,
        )
        return 1
    raw_total = gz_total = files = 0
    for f in sorted(p for p in STATIC.rglob("*") if p.is_file()):
        data = f.read_bytes()
        gz = len(gzip.compress(data, 9))
        raw_total += len(data)
        gz_total += gz
        files += 1
        print(f"{len(data):>9,} B  {gz:>8,} B gz  {f.relative_to(STATIC)}")
    print(f"total {raw_total:,} B raw, {gz_total:,} B gzipped ({gz_total / 1024:.1f} KiB)")
    print(
        f"ui_size: files={files} raw_bytes={raw_total} gzip_bytes={gz_total} gzip_kib={gz_total / 1024:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

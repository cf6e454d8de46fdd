"""Write sample orders as JSON-lines files into a landing folder.

python jobs/generate_orders.py --landing demo-output/landing --orders 5000 --files 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path


def generate(landing: Path, *, orders: int, files: int, first_id: int = 1, seed: int = 7) -> int:
    """Write ``orders`` orders with ids from ``first_id`` over ``files`` files; return ids."""
    landing.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    per_file = -(-orders // files)
    written = 0
    # Spark's file source takes files in modification-time order: one second apart, in name
    # order, so each batch takes the next files whatever the clock's resolution.
    first_mtime = time.time() - files
    for index in range(files):
        ids = range(first_id + written, first_id + min(written + per_file, orders))
        lines = [
            json.dumps(
                {
                    "order_id": order_id,
                    "customer": f"customer-{rng.randrange(200):03d}",
                    "amount": round(rng.uniform(1, 500), 2),
                    "ordered_at": (start + timedelta(minutes=order_id)).isoformat(),
                }
            )
            for order_id in ids
        ]
        name = f"orders-{first_id + written:09d}.json"
        # Write under a hidden name, then rename: the job never sees a half-written file.
        temporary = landing / f".{name}.tmp"
        temporary.write_text("\n".join(lines) + "\n")
        os.utime(temporary, (first_mtime + index, first_mtime + index))
        os.replace(temporary, landing / name)
        written += len(lines)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", required=True)
    parser.add_argument("--orders", type=int, default=5000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--first-id", type=int, default=1)
    args = parser.parse_args()
    count = generate(
        Path(args.landing), orders=args.orders, files=args.files, first_id=args.first_id
    )
    files = f"{args.files} file{'' if args.files == 1 else 's'}"
    print(f"wrote {count} orders in {files} to {args.landing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

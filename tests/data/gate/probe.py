"""The changes the crash-point gate must hold, made by Python (its C library calls)."""

import os
import sys

root = sys.argv[1]
with open(os.path.join(root, "a.parquet"), "wb") as out:  # created in place
    out.write(b"a")
draft = os.path.join(root, ".b.json.0123abcd.tmp")  # a temporary name: not a change
with open(draft, "wb") as out:
    out.write(b"b")
os.rename(draft, os.path.join(root, "b.json"))
os.link(os.path.join(root, "b.json"), os.path.join(root, "c.json"))
os.unlink(os.path.join(root, "a.parquet"))
with open(os.path.join(root, "b.json"), "wb") as out:  # overwritten
    out.write(b"B")

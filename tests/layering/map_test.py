#!/usr/bin/env python3
"""The map stays true: every folder under src/ (and every top-level folder of the repository
that holds tracked code) is named in docs/architecture.md section 1's layout block, and every
folder that block names under src/maxctx/ exists.

usage: map_test.py <repository root>
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
TOP_LEVEL = ["src", "tests", "bench", "fuzz", "tools", "scripts", "configs"]


def layout_block(text):
    section = text[text.index("## 1. Layout"):]
    return section[section.index("```\n") + 4:section.index("\n```", section.index("```\n") + 4)]


def main():
    block = layout_block(open(os.path.join(ROOT, "docs", "architecture.md")).read())
    named = set(re.findall(r"([a-z_]+)/", block))
    missing = []
    for top in TOP_LEVEL:
        if os.path.isdir(os.path.join(ROOT, top)) and top not in named:
            missing.append(top + "/")
    for base in ("src/maxctx", "src/cli"):
        for dirpath, dirnames, _ in os.walk(os.path.join(ROOT, base)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for d in dirnames:
                if d not in named:
                    missing.append(os.path.relpath(os.path.join(dirpath, d), ROOT) + "/")
    # The areas the block lists under src/maxctx/ (two-space indent) exist.
    listed = re.findall(r"^  ([a-z_]+)/ ", block, re.MULTILINE)
    stale = [a + "/" for a in listed if not os.path.isdir(os.path.join(ROOT, "src", "maxctx", a))]
    for m in missing:
        print(f"docs/architecture.md section 1 does not name {m}")
    for s in stale:
        print(f"docs/architecture.md section 1 names src/maxctx/{s}, which does not exist")
    if not listed:
        print("docs/architecture.md section 1: no src/maxctx/ areas found in the layout block")
    if missing or stale or not listed:
        sys.exit(1)
    print(f"map: {len(listed)} areas under src/maxctx/, every folder named")


if __name__ == "__main__":
    main()

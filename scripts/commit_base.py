"""Copy the tiny profile's base checkpoints into results/tiny/base/ with their sha256 manifest, or check them.

    python scripts/commit_base.py --ar /work/base/ar --draft /work/base/draft --dlm /work/base/dlm
    python scripts/commit_base.py --check

What is kept and why: orl/model/base_manifest.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orl.io import REPO_ROOT
from orl.model.base_manifest import CHECKPOINTS, check_manifest, copy_base

BASE_DIR = REPO_ROOT / "results" / "tiny" / "base"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in CHECKPOINTS:
        p.add_argument(f"--{name}", type=Path, help=f"the trained {name} checkpoint folder")
    p.add_argument("--out", type=Path, default=BASE_DIR, help=f"base folder (default: {BASE_DIR})")
    p.add_argument("--check", action="store_true", help="only check the folder against its manifest")
    args = p.parse_args()
    if not args.check:
        sources = {name: getattr(args, name) for name in CHECKPOINTS}
        missing = [name for name, path in sources.items() if path is None]
        if missing:
            p.error(f"give --{' --'.join(missing)} (or --check)")
        copy_base(sources, args.out)
    manifest = check_manifest(args.out)
    for name, entry in manifest["checkpoints"].items():
        print(
            f"{name}: weights sha256 {entry['weights_sha256'][:16]}, {entry['steps']} steps "
            f"({entry['cpu_linear']}), {sum(f['bytes'] for f in entry['files'].values()):,} bytes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Smoke test of an installed perseus wheel, run outside the source tree.

Run by cibuildwheel on every release wheel ([tool.cibuildwheel] test-command)
and by .ci/test-wheel on the wheel CI builds: the compiled extension imports,
the version comes from the metadata, LICENSE and NOTICE are installed, and the
README's main job runs from the shipped example, in Python and on the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path


def main() -> int:
    import perseus
    from perseus import _core

    assert perseus.__version__ == metadata.version("perseus-energy"), perseus.__version__
    files = {Path(str(f)).name for f in metadata.files("perseus-energy") or []}
    assert {"LICENSE", "NOTICE"} <= files, f"LICENSE/NOTICE missing from the wheel: {sorted(files)}"
    print(
        f"perseus {perseus.__version__} from {Path(perseus.__file__).parent}, _core {_core.__file__}"
    )

    from perseus._shipped import shipped_profile

    profile = perseus.Profile.from_csv(shipped_profile("small-4stage"), blocking_power_w=70.0)
    frontier = perseus.optimize(profile, microbatches=8)
    assert len(frontier) > 1
    assert frontier.fastest.energy_j < frontier.baseline.energy_j

    exe = Path(sys.executable).with_name("perseus")
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [str(exe), "optimize", "--example", "gpt3-a100-8stage", "-m", "32", "-o", out, "-q"],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "PATH": os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""),
            },
        )
        print(done.stdout, done.stderr, sep="")
        assert done.returncode == 0, done.returncode
        saved = json.loads((Path(out) / "frontier.json").read_text())
        assert saved, "empty frontier.json"
    print("wheel smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

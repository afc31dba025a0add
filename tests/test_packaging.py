"""What a non-editable install gets: pyproject's package list against the source folders, the wheel built
and installed into a fresh environment, and the extras the GPU workflow and the Makefile install."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def source_packages() -> dict[str, Path]:
    """Every folder under the package-dir roots that holds a file (code or data): dotted name -> folder."""
    found = {}
    for package, folder in SETUPTOOLS["package-dir"].items():
        root = ROOT / folder
        for path in [root, *root.rglob("*")]:
            if not path.is_dir() or "__pycache__" in path.parts:
                continue
            if any(f.is_file() and f.suffix != ".pyc" for f in path.iterdir()):
                found[".".join([package, *path.relative_to(root).parts])] = path
    return found


def test_package_list_names_every_source_folder():
    listed, present = set(SETUPTOOLS["packages"]), set(source_packages())
    missing, stale = present - listed, listed - present
    assert not missing, f"pyproject.toml [tool.setuptools] packages: add {sorted(missing)}"
    assert not stale, f"pyproject.toml [tool.setuptools] packages: no such folder for {sorted(stale)}"


def test_every_code_folder_is_a_package():
    """A folder of modules without __init__.py would import as a namespace package, or not at all."""
    for package, folder in source_packages().items():
        modules = sorted(p.name for p in folder.glob("*.py"))
        if modules and package != "orl.eval.lm_eval_tasks":  # lm-eval loads that folder's module by path
            assert "__init__.py" in modules, f"{folder}: has {modules} but no __init__.py"


def test_the_repository_root_holds_no_other_import_package():
    """`python -m pytest` (and any `python -m` from the root) puts the root first on sys.path, so a folder
    there with an __init__.py shadows the installed package of that name: a top-level `kernels/` once hid
    Hugging Face's `kernels`, which transformers 5.25 imports, and every transformers model failed."""
    shadowing = sorted(
        path.name
        for path in ROOT.iterdir()
        if path.is_dir() and (path / "__init__.py").is_file() and path.name not in {"orl", "tests"}
    )
    assert shadowing == [], f"{ROOT}: move {shadowing} under orl/ (they shadow installed packages)"


def _extras_in(text: str) -> list[str]:
    """The extras an install line names: EXTRAS=a,b and .[a,b], shell expansions left out."""
    names = []
    for match in re.finditer(r"EXTRAS\s*\??=\s*([A-Za-z0-9_,-]*)|\.\[([A-Za-z0-9_,-]+)\]", text):
        names += [n for n in (match.group(1) or match.group(2) or "").split(",") if n]
    return names


def test_workflow_and_makefile_install_existing_extras():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    workflow = (ROOT / ".github" / "workflows" / "gpu-regression.yml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for name, text in (("gpu-regression.yml", workflow), ("Makefile", makefile)):
        named = _extras_in(text)
        assert named, f"{name}: no EXTRAS= or .[...] install found (the test's pattern is out of date)"
        unknown = sorted(set(named) - extras)
        assert not unknown, f"{name}: extras {unknown} are not in pyproject.toml (have {sorted(extras)})"
    # The serving extra the workflow may add, from its allowed values (a `case` pattern).
    allowed = re.search(r'case "\$SERVING_EXTRA" in ([^)]*)\)', workflow)
    assert allowed, "gpu-regression.yml: the SERVING_EXTRA check is gone"
    serving = [v for v in allowed.group(1).split("|") if v.strip('"')]
    assert serving and set(serving) <= extras, f"gpu-regression.yml: SERVING_EXTRA values {serving}"


def test_extras_pattern_sees_names():
    assert _extras_in('make EXTRAS=dev,eval,gpu venv; pip install -e ".[dev,x]"') == [
        "dev",
        "eval",
        "gpu",
        "dev",
        "x",
    ]


def _site_packages_of_this_interpreter() -> list[str]:
    """The site-packages folders this test's Python imports its dependencies from (torch among them)."""
    own = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) or p in own]


@pytest.mark.slow
def test_wheel_installs_non_editable_and_generates(tmp_path, smoke_models):
    """pip builds the wheel from a copy of the sources; it is installed into a fresh venv whose dependencies
    come from this interpreter's site-packages (a .pth line; no index, nothing downloaded), and the
    installed `orl` decodes with a smoke checkpoint. Modules must come from the wheel, not the checkout."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in set(SETUPTOOLS["package-dir"].values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = wheels.glob("orl_harness-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Directories named in a .pth are added to sys.path without reading their own .pth files, so the
    # checkout's editable install (a .pth finder there) stays out of the fresh environment.
    (site / "_deps.pth").write_text("\n".join(_site_packages_of_this_interpreter()) + "\n")
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )

    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import orl, orl.decoding, orl.engines.dlmrt, "
            "orl.train.config as c; print(orl.__file__); print(sorted(c.PRESETS))",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert Path(where[0]).is_relative_to(venv), f"orl imported from {where[0]}, not the installed wheel"
    assert "smoke" in where[1]

    _, dlm = smoke_models
    out = subprocess.run(
        [
            str(venv / "bin" / "orl"),
            "generate",
            "--ckpt",
            str(dlm),
            "--engine",
            "dlmrt-eager",
            "--max-new-tokens",
            "8",
            "--prompt",
            "def f(x):\n",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert re.search(r"^nfe=\d+ tokens=\d+ tpf=[0-9.]+$", out.stdout.splitlines()[-1]), out.stdout
    version = subprocess.run(
        [str(venv / "bin" / "orl"), "--version"], cwd=tmp_path, capture_output=True, text=True
    )
    assert version.returncode == 0 and "0.1.0" in version.stdout, version

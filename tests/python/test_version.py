"""One version in one place: the Python package's version is the project() version of the
top-level CMakeLists.txt. pytest runs the test_* functions; so does running this file (ctest
test_version_python, with the standard library only).

- pyproject.toml declares the version dynamic, read from ../CMakeLists.txt by a pattern that
  finds the same version there;
- python/distflash/_version.py, loaded from the source tree, gives that version;
- the installed package's distflash.__version__ is that version too (with
  DISTFLASH_VERSION_INSTALLED=1: scripts/python-test, after pip install ./python).
"""
import importlib.util
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    m = re.search(r"^project\(distflash\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)[\s)]", text, re.MULTILINE)
    assert m, "CMakeLists.txt has no project(distflash VERSION x.y.z ...) line"
    return m.group(1)


def load_pyproject():
    """project.dynamic, whether project.version is set, and tool.scikit-build.metadata.version."""
    text = (ROOT / "python" / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the few fields this test reads, line by line
        tables, table = {}, None
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("["):
                table = tables.setdefault(line.strip("[]"), {})
            elif "=" in line and table is not None and not line.startswith("#"):
                key, value = (x.strip() for x in line.split("=", 1))
                if value.startswith("["):
                    table[key] = [x.strip().strip("'\"") for x in value.strip("[]").split(",") if x.strip()]
                else:
                    table[key] = value.strip("'\"")
        data = {"project": tables.get("project", {}),
                "tool": {"scikit-build": {"metadata": {"version": tables.get("tool.scikit-build.metadata.version", {})}}}}
    else:
        data = tomllib.loads(text)
    return {"dynamic": data["project"].get("dynamic", []), "static_version": "version" in data["project"],
            "metadata": data.get("tool", {}).get("scikit-build", {}).get("metadata", {}).get("version", {})}


def test_pyproject_reads_cmakelists():
    p = load_pyproject()
    assert "version" in p["dynamic"] and not p["static_version"], "pyproject.toml must not write a version of its own"
    md = p["metadata"]
    assert md.get("provider") == "scikit_build_core.metadata.regex"
    assert (ROOT / "python" / md["input"]).resolve() == (ROOT / "CMakeLists.txt").resolve()
    m = re.search(md["regex"], (ROOT / "CMakeLists.txt").read_text(encoding="utf-8"), re.MULTILINE)
    assert m and m.group("value") == cmake_version()


def test_version_module_from_source_tree():
    spec = importlib.util.spec_from_file_location("distflash_version_src", ROOT / "python" / "distflash" / "_version.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.version_from_cmake() == cmake_version()
    assert mod.version_from_cmake(ROOT / "no-such-file") is None


def test_installed_version():
    """The installed package: only where DISTFLASH_VERSION_INSTALLED=1 says one was installed from this
    tree (scripts/python-test), so that a stale install elsewhere on the machine cannot fail ctest."""
    if os.environ.get("DISTFLASH_VERSION_INSTALLED") != "1":
        return
    import distflash
    assert distflash.__version__ == cmake_version(), (distflash.__version__, cmake_version(), distflash.__file__)


if __name__ == "__main__":
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"{name}: ok")
            except AssertionError as e:
                failed += 1
                print(f"{name}: FAILED {e}")
    print(f"test_version.py: {failed} failure(s)")
    sys.exit(1 if failed else 0)

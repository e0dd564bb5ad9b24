"""The package's version.

One version in one place: the project() line of the repository's top-level CMakeLists.txt. The
wheel's metadata takes it from there (pyproject.toml, tool.scikit-build.metadata.version), so an
installed package reads it from its metadata; a package imported from a source tree without
being installed reads that line itself.
"""
import re
from importlib import metadata
from pathlib import Path

# the same pattern as pyproject.toml's
_PROJECT_VERSION = re.compile(r"project\(distflash\s+VERSION\s+(?P<value>[0-9]+\.[0-9]+\.[0-9]+)")


def version_from_cmake(path=None):
    """The version in a CMakeLists.txt (default: the source tree's, two folders above this file),
    or None when there is none."""
    path = Path(path) if path else Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    try:
        m = _PROJECT_VERSION.search(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    return m.group("value") if m else None


try:
    __version__ = metadata.version("distflash")
except metadata.PackageNotFoundError:
    __version__ = version_from_cmake() or "0+unknown"

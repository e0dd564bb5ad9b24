"""Finding and loading libdistflash: `import distflash` needs neither torch nor the library;
DISTFLASH_LIB wins; a source checkout finds build/src/libdistflash.so; a missing library is a
clear DistflashLibraryError at first use. Each case runs in a fresh interpreter."""
import os
import subprocess
import sys

import pytest

import distflash
from conftest import REPO


def _run(code, env_extra=None, pythonpath=None, cwd="/"):
    env = {k: v for k, v in os.environ.items() if k not in ("DISTFLASH_LIB", "PYTHONPATH")}
    env.update(env_extra or {})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:  # the same distflash as this test process
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(distflash.__file__)))
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)


def test_import_needs_neither_torch_nor_the_library():
    r = _run("import sys, distflash; assert 'torch' not in sys.modules; print(distflash.__version__)",
             {"DISTFLASH_LIB": "/nonexistent/libdistflash.so"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == distflash.__version__


def test_bad_distflash_lib_is_a_clear_error():
    r = _run("import distflash\n"
             "try:\n    distflash.version()\nexcept distflash.DistflashLibraryError as e:\n    print('ERR', e)\n",
             {"DISTFLASH_LIB": "/nonexistent/libdistflash.so"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR DISTFLASH_LIB=/nonexistent/libdistflash.so does not load"), r.stdout


def test_distflash_lib_wins():
    path = distflash.library_path()
    r = _run("import distflash; print(distflash.library_path()); print(distflash.version())", {"DISTFLASH_LIB": path})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == path


def test_version_matches_the_library():
    assert distflash.version().split()[0] == distflash.__version__


def test_source_tree_finds_the_cmake_build():
    lib = os.path.join(REPO, "build", "src", "libdistflash.so")
    if not os.path.exists(lib) or os.path.exists(os.path.join(REPO, "python", "distflash", "libdistflash.so")):
        pytest.skip("needs build/src/libdistflash.so and no library copied into python/distflash")
    r = _run("import distflash; print(distflash.library_path())", pythonpath=os.path.join(REPO, "python"))
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(lib)


def test_torch_module_loads_lazily_as_attribute():
    r = _run("import distflash; f = distflash.torch.attention; import sys; assert 'torch' in sys.modules")
    assert r.returncode == 0, r.stderr

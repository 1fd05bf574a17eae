"""test_install.py — `pip install ./python` into a fresh virtual environment, offline.

The installer (python/setup.py) is run the documented way (--no-build-isolation --no-index, in a
venv that sees Debian's NumPy) on a copy of python/, with JOMOIM_CMAKE_BUILD_DIR pointing at the
build tree these tests import jomoim from: CMake brings its _jomoim target up to date (a no-op
after the build) instead of compiling the library again, which a from-scratch install does.
The installed package must import from the venv's site-packages and compute attention.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import jomoim

SOURCE = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(jomoim.__file__).resolve().parents[2]


@pytest.mark.skipif(not (BUILD / "CMakeCache.txt").is_file(), reason="jomoim is not imported from a CMake build tree")
def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    src = tmp_path / "src"
    shutil.copytree(SOURCE / "python", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    env = {key: val for key, val in os.environ.items() if key != "PYTHONPATH"}
    env.update(JOMOIM_SOURCE_DIR=str(SOURCE), JOMOIM_CMAKE_BUILD_DIR=str(BUILD), PIP_NO_INPUT="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index", "--no-cache-dir",
                    str(src)], check=True, env=env, cwd=tmp_path)
    probe = (
        "import os, numpy as np, jomoim\n"
        "d = os.path.dirname(jomoim.__file__)\n"
        "assert 'site-packages' in d, d\n"
        "assert os.path.isfile(os.path.join(d, 'py.typed')) and os.path.isfile(os.path.join(d, '__init__.pyi'))\n"
        "q = np.ones((1, 2, 3, 4), np.float32)\n"
        "v = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)\n"
        "out = jomoim.attention(q, q, v, causal=True)\n"
        "assert np.allclose(out[0, 0, 0], v[0, 0, 0]) and np.allclose(out[0, 1, 2], v[0, 1].mean(axis=0))\n"
        "print(jomoim.__version__, d)\n"
    )
    done = subprocess.run([py, "-c", probe], check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.startswith(jomoim.__version__ + " " + str(venv)), done.stdout

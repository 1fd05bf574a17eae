"""setup.py — pip installs the jomoim Python module by running the project's CMake build.

Offline, from the source tree, into a virtual environment that sees Debian's NumPy:

    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation --no-index ./python

(or `/usr/bin/python3 -m pip install --user --break-system-packages --no-build-isolation
--no-index ./python` for the user site). --no-build-isolation uses the installed setuptools and
wheel (Debian's python3-setuptools, python3-wheel) instead of downloading them.

The extension is built by CMake from the repository root (one folder up) with the interpreter
that runs pip: a Release build of the library and the module only, in setuptools' build folder
(python/build/), which takes a few minutes on two cores. JOMOIM_CMAKE_BUILD_DIR=<folder> uses an
already configured build tree instead (e.g. build/release): its _jomoim target is brought up to
date and copied, which is how the tests check this installer quickly. The repository's default
model (models/default), when present, is copied into the package as jomoim/models/default.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
# The repository root; JOMOIM_SOURCE_DIR overrides it when this folder is built from a copy.
ROOT = pathlib.Path(os.environ.get("JOMOIM_SOURCE_DIR", HERE.parent)).resolve()


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*jomoim\s+VERSION\s+([0-9.]+)", text)
    if not m:
        raise RuntimeError(f"no 'project(jomoim VERSION x.y.z)' in {ROOT / 'CMakeLists.txt'}")
    return m.group(1)


class CMakeBuild(build_ext):
    """Builds the _jomoim target with CMake and copies it where setuptools expects it."""

    def build_extension(self, ext):
        given = os.environ.get("JOMOIM_CMAKE_BUILD_DIR")
        if given:
            build_dir = pathlib.Path(given).resolve()
            if not (build_dir / "CMakeCache.txt").is_file():
                raise RuntimeError(f"JOMOIM_CMAKE_BUILD_DIR={given}: not a configured CMake build folder")
        else:
            build_dir = pathlib.Path(self.build_temp).resolve() / "cmake"
            configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                         "-DJOMOIM_BUILD_TESTS=OFF", "-DJOMOIM_BUILD_BENCH=OFF", "-DJOMOIM_BUILD_PYTHON=ON",
                         f"-DPython3_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
                configure += ["-G", "Ninja"]
            subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_jomoim", "-j", jobs], check=True)
        built = sorted((build_dir / "python" / "jomoim").glob("_jomoim*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _jomoim*.so in {build_dir / 'python' / 'jomoim'}, found {built}")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)
        # The repository's default model, when it has one, ships inside the package
        # (jomoim/models/default), where jomoim.Model.load() looks before the source tree.
        model = ROOT / "models" / "default"
        if model.is_dir():
            shipped = dest.parent / "models" / "default"
            if shipped.exists():
                shutil.rmtree(shipped)
            shutil.copytree(model, shipped)


setup(
    name="jomoim",
    version=project_version(),
    description="Exact scaled dot-product attention for CPUs, from NumPy",
    packages=["jomoim"],
    package_data={"jomoim": ["__init__.pyi", "py.typed"]},
    ext_modules=[Extension("jomoim._jomoim", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)

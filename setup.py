"""The `kiln` Python package, built by CMake (pybind11 + NumPy from Debian).

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation .

reuses the CMake build in $KILN_BUILD_DIR (default: ./build, configured and
built if missing) and installs the module with libkiln.so.0 and
libkiln_compiler.so.0 next to it (the module's RPATH is $ORIGIN first).
"""
import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuildPy(build_py):
    def run(self):
        super().run()
        build = os.path.abspath(os.environ.get("KILN_BUILD_DIR", os.path.join(ROOT, "build")))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"])
        subprocess.check_call(["cmake", "--build", build, "--target", "kiln_python"])
        dest = os.path.join(self.build_lib, "kiln")
        os.makedirs(dest, exist_ok=True)
        files = glob.glob(os.path.join(build, "python", "kiln", "_kiln*.so"))
        files += [os.path.join(build, "libkiln.so.0"), os.path.join(build, "libkiln_compiler.so.0")]
        for f in files:
            if not os.path.exists(f):
                raise RuntimeError(f"kiln: {f} was not built (is pybind11-dev installed?)")
            shutil.copy2(os.path.realpath(f), os.path.join(dest, os.path.basename(f)))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    name="kiln",
    version="0.1.0",
    description="Kiln: a graph compiler and runtime for neural networks",
    packages=["kiln"],
    package_dir={"": "python"},
    cmdclass={"build_py": CMakeBuildPy},
    distclass=BinaryDistribution,
    options={"build": {"build_base": os.path.join("build", "setuptools")},
             "egg_info": {"egg_base": os.path.join("build", "setuptools")}},
    python_requires=">=3.9",
)

"""setup.py: the build half of pyproject.toml: the library copied into the wheel.

pip runs this from a checkout (pip install ./python). It needs the
library that make built, BUILD/libwdrift.so, where BUILD is make's build
directory relative to the checkout (the BUILD variable, as in make
BUILD=DIR; build by default). Without it the build stops at once, saying
to run make. The wheel carries the library as wdrift/libwdrift.so, next
to the package's modules, where wdrift/_lib.py looks for it right after
$WDRIFT_LIB; it is copied into the wheel only, never into python/wdrift,
where a stale copy would shadow build/ for the source tree.

The build's own files (build/, wdrift.egg-info) go under BUILD/python, so
that python/ stays as git has it. The wheel is tagged for this platform
and Python, since it holds a native library.
"""
import os
import re
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, os.environ.get("BUILD") or "build")
LIB = os.path.join(BUILD, "libwdrift.so")


def version():
    """WDRIFT_VERSION of lib/wdrift.h, which the CLI and the daemon print too."""
    with open(os.path.join(ROOT, "lib", "wdrift.h")) as f:
        m = re.search(r'^#define WDRIFT_VERSION "([^"]+)"', f.read(), re.M)
    if not m:
        sys.exit(f"wdrift: no WDRIFT_VERSION in {os.path.join(ROOT, 'lib', 'wdrift.h')}")
    return m.group(1)


class BuildPy(build_py):
    """build_py, plus the library copied in as wdrift/libwdrift.so."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "wdrift", "libwdrift.so")
        shutil.copyfile(LIB, dst)   # always: a rebuilt library is newer than no copy
        os.chmod(dst, 0o755)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "wdrift", "libwdrift.so")]


class BinaryDistribution(Distribution):
    """A wheel for this platform: it holds a native library, though no extension module."""

    def has_ext_modules(self):
        return True


if not os.path.isfile(LIB):
    sys.exit(f"wdrift: {LIB} is not built: run `make` in {ROOT} first, then install again "
             "(BUILD=DIR when make built into another directory)")
os.makedirs(os.path.join(BUILD, "python"), exist_ok=True)
setup(version=version(),
      cmdclass={"build_py": BuildPy},
      distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join(BUILD, "python", "build")},
               "egg_info": {"egg_base": os.path.join(BUILD, "python")}})

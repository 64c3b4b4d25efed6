"""Builds the native hot path ``pumpd._fastpath``.

``PUMPD_DEBUG=1`` compiles the extension with its invariant checks (``make debug``); the release
build leaves them out. ``PUMPD_NO_EXT=1`` skips the extension: pumpd then runs on the pure-Python
reference and says so in its status.
"""

import glob
import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("PUMPD_NO_EXT") != "1":
    from Cython.Build import cythonize

    debug = os.environ.get("PUMPD_DEBUG") == "1"
    ext = Extension(
        "pumpd._fastpath",
        ["src/_fastpath.pyx"],
        # the parts _fastpath.pyx includes: a change to one rebuilds the extension
        depends=sorted(glob.glob("src/_fastpath_parts/*.pxi")),
        # The .pyx reads PUMPD_DEBUG through a verbatim C block, so invariant checks cost nothing
        # in a release build (Cython 3 deprecates compile-time DEF/IF).
        define_macros=[("PUMPD_DEBUG", "1" if debug else "0")],
        extra_compile_args=["-O2"] if not debug else ["-O0", "-g"],
    )
    ext_modules = cythonize(
        [ext],
        compiler_directives={
            "language_level": 3,
            "boundscheck": debug,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": debug,
        },
        force=True,
    )

setup(ext_modules=ext_modules)

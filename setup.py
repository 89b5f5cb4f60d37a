"""Build the Cython extensions; everything else is declared in pyproject.toml.

OpenMP is used when the compiler can build and link a test program with it.
Otherwise the extensions are built serially and a warning says so: ``prange``
then runs as an ordinary loop and results are unchanged.
"""
import os
import sys
import tempfile
import textwrap
import warnings

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

EXTENSIONS = [
    "_openmp_helpers",
    "_features",
    "_cluster",
    "_pairwise",
    "index._inverted_build",
    "index._inverted_search",
    # The search units by kind, which _inverted_search runs.
    "index._search_knn",
    "index._search_radius",
    "index._search_max",
]

OPENMP_PROBE = textwrap.dedent(
    """
    #include <omp.h>
    int main(void) {
        int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1;
        return n > 0 ? 0 : 1;
    }
    """
)


def openmp_flags(compiler):
    """Return (compile_args, link_args) that enable OpenMP, or None."""
    if os.environ.get("SOBOLEV_INDEX_NO_OPENMP"):
        return None
    if compiler.compiler_type == "msvc":
        candidates = [(["/openmp"], [])]
    elif sys.platform == "darwin":
        candidates = [(["-Xpreprocessor", "-fopenmp"], ["-lomp"]), (["-fopenmp"], ["-fopenmp"])]
    else:
        candidates = [(["-fopenmp"], ["-fopenmp"])]
    for compile_args, link_args in candidates:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "probe.c")
            with open(source, "w") as handle:
                handle.write(OPENMP_PROBE)
            try:
                objects = compiler.compile([source], output_dir=tmp, extra_postargs=compile_args)
                compiler.link_executable(
                    objects, "probe", output_dir=tmp, extra_postargs=link_args
                )
            except Exception:  # any compiler or linker failure means "no OpenMP"
                continue
        return compile_args, link_args
    return None


class BuildExtWithOptionalOpenMP(build_ext):
    def build_extensions(self):
        flags = openmp_flags(self.compiler)
        if flags is None:
            warnings.warn(
                "OpenMP was not found (or SOBOLEV_INDEX_NO_OPENMP is set): "
                "sobolev-index is built without threads. Results are the same, only slower.",
                stacklevel=2,
            )
        for ext in self.extensions:
            if flags is not None:
                ext.extra_compile_args += flags[0]
                ext.extra_link_args += flags[1]
            if self.compiler.compiler_type != "msvc":
                ext.extra_compile_args += ["-O3"]
        super().build_extensions()


extensions = [
    Extension(
        f"sobolev_index.{name}",
        [f"sobolev_index/{name.replace('.', '/')}.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for name in EXTENSIONS
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
    cmdclass={"build_ext": BuildExtWithOptionalOpenMP},
)

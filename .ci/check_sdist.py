"""Check an sdist's file list: ``python .ci/check_sdist.py SDIST [REPO]``.

Every file git tracks in the package, the CLI, the tests and the benchmark
code (bench/, except bench/results) must be in it, with the build files and
the licence; nothing generated may be (Cython's .c/.cpp/.html, compiled
objects, build/ or dist/ outputs, caches, benchmark results). The metadata
setuptools writes for the sdist itself (PKG-INFO, setup.cfg and
*.egg-info/SOURCES.txt) is allowed, and so is the test data git tracks
(tests/data/).
"""
import fnmatch
import subprocess
import sys
import tarfile

REQUIRED_TOP = ["LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in"]
REQUIRED_UNDER = ["sobolev_index/", "cli/", "tests/", "bench/"]
NOT_REQUIRED_UNDER = ["bench/results/"]
GENERATED = [
    "*.c", "*.cpp", "*.html", "*.so", "*.pyd", "*.dylib", "*.dll", "*.o", "*.obj",
    "*.pyc", "*.pyo", "*/__pycache__/*", "build/*", "dist/*", "bench/results/*", "bench/*.json",
    "*.egg-info/*", ".pytest_cache/*", ".hypothesis/*", ".ruff_cache/*", "*.h5", "*.sqlite", "*.sobolev/*",
]
SETUPTOOLS_METADATA = ["PKG-INFO", "setup.cfg", "*.egg-info/SOURCES.txt"]
# Test data git tracks on purpose (an index written by an older release).
TEST_DATA = ["tests/data/*"]


def main(sdist, repo="."):
    with tarfile.open(sdist) as archive:
        members = [m.name for m in archive.getmembers() if m.isfile()]
    roots = {name.split("/", 1)[0] for name in members}
    if len(roots) != 1:
        sys.exit(f"{sdist}: expected one top-level directory, found {sorted(roots)}")
    files = {name.split("/", 1)[1] for name in members}

    tracked = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    required = [
        name for name in tracked
        if name in REQUIRED_TOP
        or (any(name.startswith(p) for p in REQUIRED_UNDER)
            and not any(name.startswith(p) for p in NOT_REQUIRED_UNDER))
    ]
    missing = sorted(set(required) - files)
    generated = sorted(
        name for name in files
        if any(fnmatch.fnmatch(name, pattern) for pattern in GENERATED)
        and not any(fnmatch.fnmatch(name, pattern)
                    for pattern in SETUPTOOLS_METADATA + TEST_DATA)
    )
    cython = sorted(name for name in required if name.endswith((".pyx", ".pxd")))
    for name in missing:
        print(f"missing from the sdist: {name}")
    for name in generated:
        print(f"generated file in the sdist: {name}")
    if missing or generated:
        sys.exit(1)
    print(f"{sdist}: {len(files)} files; all {len(required)} tracked sources present "
          f"({len(cython)} .pyx/.pxd); no generated files")


if __name__ == "__main__":
    main(*sys.argv[1:])

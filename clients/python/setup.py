"""Bakes the path of libgcagent_client.so.1 into the package at install time.

The path comes from GCAGENT_CLIENT_LIB if set, else from the first build tree of this
repository that holds the library (build/release, then build-*); without either the package
falls back to the system loader at import time."""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LIB_NAME = "libgcagent_client.so.1"


def find_library():
    explicit = os.environ.get("GCAGENT_CLIENT_LIB")
    if explicit:
        return str(Path(explicit).resolve())
    repo = HERE.parent.parent
    trees = [repo / "build" / "release"] + sorted(repo.glob("build*/")) + sorted((repo / "build").glob("*/"))
    for tree in trees:
        lib = tree / "clients" / LIB_NAME
        if lib.is_file():
            return str(lib)
    return ""


class BuildWithLibraryPath(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gcagent" / "_installed_path.py"
        target.write_text(f"# Written by setup.py at install time.\nLIBRARY = {find_library()!r}\n")


setup(cmdclass={"build_py": BuildWithLibraryPath})

"""Bakes the paths of libgcagent_client.so.1 and of the gcagent agent into the package at
install time (the developer flow; the wheel built from the repository root bundles both).

The library's path comes from GCAGENT_CLIENT_LIB if set, else from the first build tree of
this repository that holds the library (build/release, then build-*); without either the
package falls back to the system loader at import time. The agent's (for gcagent-run) comes
from GCAGENT_BINARY, else from the same build tree."""

import os
import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LIB_NAME = "libgcagent_client.so.1"


def find_in_build_tree(variable, relative):
    explicit = os.environ.get(variable)
    if explicit:
        return os.path.abspath(explicit)  # keeps the SONAME link, not the file it points at
    repo = HERE.parent.parent
    trees = [repo / "build" / "release"] + sorted(repo.glob("build*/")) + sorted((repo / "build").glob("*/"))
    for tree in trees:
        found = tree / relative
        if found.is_file():
            return os.path.abspath(found)
    return ""


def find_library():
    return find_in_build_tree("GCAGENT_CLIENT_LIB", Path("clients") / LIB_NAME)


def find_agent():
    return find_in_build_tree("GCAGENT_BINARY", Path("agent") / "gcagent")


def find_commit(agent):
    """The commit the agent's build tree was built from (cmake/git_commit.cmake wrote it)."""
    info = Path(agent).parent.parent / "generated" / "python" / "_build_info.py" if agent else None
    m = re.search(r'^COMMIT = "(.*)"$', info.read_text(), re.M) if info and info.is_file() else None
    return m.group(1) if m else "unknown"


class BuildWithLibraryPath(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "gcagent" / "_installed_path.py"
        agent = find_agent()
        target.write_text(f"# Written by setup.py at install time.\nLIBRARY = {find_library()!r}\n"
                          f"AGENT = {agent!r}\nCOMMIT = {find_commit(agent)!r}\n")


setup(cmdclass={"build_py": BuildWithLibraryPath})

"""The release (CMakeLists.txt's project() version: tests/docs/test_operator_guide.py holds the
two together) and the commit the package was built from, which the wheel's build writes into
gcagent/_build_info.py and the developer install into gcagent/_installed_path.py."""

RELEASE = "0.2.0"


def commit():
    """The commit ("c688e15c5aed", "+dirty" for a work tree with changes), or "unknown"."""
    for module in ("gcagent._build_info", "gcagent._installed_path"):
        try:
            return __import__(module, fromlist=["COMMIT"]).COMMIT
        except (ImportError, AttributeError):
            continue
    return "unknown"


def version():
    """RELEASE with the commit as a PEP 440 local label: "0.2.0+gc688e15c5aed" ("...dirty")."""
    c = commit()
    return RELEASE if c == "unknown" else f"{RELEASE}+g{c.replace('+', '.')}"

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
# The package under test, from the source tree (test_package.py checks the pip install).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python"))

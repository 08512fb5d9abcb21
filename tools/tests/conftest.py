"""pytest set-up for the strata_tool tests: makes the package importable from the
source tree and adds --build-dir (the CMake build tree holding libstrata.so and
bench/wl_*; default <repo>/build), which ctest passes as ${CMAKE_BINARY_DIR}.
"""

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1]
REPO = TOOLS.parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


def pytest_addoption(parser):
    parser.addoption("--build-dir", action="store", default=str(REPO / "build"),
                     help="strata build directory (libstrata.so, bench/wl_*)")


@pytest.fixture(scope="session")
def build_dir(request) -> Path:
    return Path(request.config.getoption("--build-dir")).resolve()

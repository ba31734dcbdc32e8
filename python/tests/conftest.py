"""conftest.py: paths of the build tree the tests run against (tests/python.sh sets
them): the command for the --json equality checks and the source tree's models."""
import os

import pytest

SRC = os.environ.get("CLREMAT_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.environ.get("CLREMAT_TOOL", os.path.join(SRC, "tools", "clremat"))


@pytest.fixture
def models():
    return os.path.join(SRC, "models")


@pytest.fixture
def tool():
    return TOOL


@pytest.fixture
def device():
    """The device the training tests use: $CLREMAT_TEST_DEVICE, else PoCL (0:0)."""
    return os.environ.get("CLREMAT_TEST_DEVICE", "0:0")

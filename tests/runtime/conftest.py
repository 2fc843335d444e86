from collections.abc import Iterator

import pytest

from tests.storage.enginekit import close_all


@pytest.fixture(autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    close_all()

"""fencewatch's errors through Celery's own result-backend serialization (the
code a task failure takes on its way to ``AsyncResult.get()``): with the
pickle serializer every exported error comes back as itself with its fields;
with the default JSON serializer (which rebuilds ``cls(*exc.args)``) the
ownership errors do too, where before they came back as a bare Exception."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from fencewatch import EffectRefused, LeaseHeld, LeaseLost, StaleOwner, StoreURLError
from tests.sdk.test_public_errors import SAMPLES, _fields


@pytest.fixture
def backend() -> Any:
    """A Celery app's result backend (the codec only; nothing is stored)."""
    return Celery("errors", broker="memory://", backend="cache+memory://").backend


@pytest.mark.parametrize("cls", sorted(SAMPLES, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_exported_error_survives_the_pickle_result_serializer(
    backend: Any, cls: type[BaseException]
) -> None:
    """prepare_exception/exception_to_python with the pickle codec gives back
    the same class, message and fields (Celery fell back to FencewatchError)."""
    import pickle

    original = SAMPLES[cls]()
    stored = pickle.loads(pickle.dumps(backend.prepare_exception(original, "pickle")))
    backend.serializer = "pickle"
    back = backend.exception_to_python(stored)
    assert type(back) is cls
    assert str(back) == str(original)
    assert _fields(back) == _fields(original)


@pytest.mark.parametrize(
    "cls",
    [StaleOwner, LeaseHeld, LeaseLost, EffectRefused, StoreURLError],
    ids=lambda c: c.__name__,
)
def test_ownership_errors_survive_the_json_result_serializer(
    backend: Any, cls: type[BaseException]
) -> None:
    """Through the JSON codec (Celery's default) the ownership errors come back
    as their class with their message and positional fields, so isinstance
    checks and autoretry_for work in the caller."""
    import json

    original = SAMPLES[cls]()
    stored = json.loads(json.dumps(backend.prepare_exception(original, "json")))
    backend.serializer = "json"
    back = backend.exception_to_python(stored)
    assert type(back) is cls
    assert str(back) == str(original)
    assert back.args == original.args

"""Doctest namespace: docstring examples may use `cvattn_keras`, `keras`
and `np` without importing them."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cvattn_keras  # noqa: E402


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    doctest_namespace.update(cvattn_keras=cvattn_keras, keras=keras, np=np)

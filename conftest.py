"""The repository's root conftest: the conformance kit's options, hooks and fixtures (QR-03).

They live in :mod:`qualification.conformance.plugin`; a root conftest is read
before the command line is parsed, whatever paths a run names, so
``--target-url`` is always known. (A ``-p`` plugin could not import the suite.)
"""

from qualification.conformance.plugin import (
    kit_turn,
    model_target,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_report_header,
    target,
    user_token,
    work_target,
)

__all__ = ["kit_turn", "model_target", "pytest_addoption", "pytest_collection_modifyitems",
           "pytest_configure", "pytest_report_header", "target", "user_token", "work_target"]

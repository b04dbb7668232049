"""Deliberately broken servers the conformance kit must kill (QR-03, ``tox -e mutants``).

Each mutant is ``labfy-ref serve`` with one function replaced by a faulty one
(:mod:`qualification.mutants.faults`), launched as its own process by
:mod:`qualification.mutants.launch`. The product never imports this package: a
mutant exists only in the process that asked for it.
"""

"""The mutation run of QR-04: do the qualification tests kill deliberately broken code?

:mod:`.scope` maps each security-critical module to the test files that cover it
(and so to the requirement IDs those tests name); :mod:`.run` drives cosmic-ray
over each module in a private copy of the tree, resumably; :mod:`.record` turns
the sessions into the mutation record the report reads
(``labfy_ref/report/schemas/mutation.schema.json``). ``tox -e mutation`` runs it;
never in CI.
"""

"""The ``labfy-ref`` command line."""

"""labfy-ref: a secure local-model agent runtime and engine bridge, with its qualification suite."""

__version__ = "0.2.0"

#: The revision of SPEC.md this build implements: the first 16 hex digits of the
#: SHA-256 of its text. The specification carries no version of its own, and a
#: digest is checkable by anyone holding the file (``sha256sum SPEC.md``); a test
#: fails when the SPEC.md beside the checkout no longer matches.
SPEC_REVISION = "sha256:f8b1e56b66024678"

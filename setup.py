"""Build the optional C speedups; everything else is configured in pyproject.toml.

``mqcore._speedups`` (codec and batch loops) and ``mqcore._keyindex`` (the mmap store's key
index entries) are ``optional``: where no C compiler is available the build goes on without
them and mqcore runs its pure-Python code (same bytes, slower puts).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mqcore._speedups",
            sources=["mqcore/_speedups.c"],
            optional=True,
        ),
        Extension(
            "mqcore._keyindex",
            sources=["mqcore/_keyindex.c"],
            optional=True,
        ),
    ]
)

"""Build the optional C speedups; everything else is configured in pyproject.toml.

``mqcore._speedups`` is ``optional``: where no C compiler is available the build goes on
without it and mqcore runs its pure-Python codec (same bytes, slower puts).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mqcore._speedups",
            sources=["mqcore/_speedups.c"],
            optional=True,
        )
    ]
)

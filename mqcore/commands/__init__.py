"""Subcommands of the ``mqcore`` CLI, one module each (added to the group in ``mqcore.cli``)."""

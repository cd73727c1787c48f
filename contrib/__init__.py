"""Opt-in plugins with heavy dependencies (imported as ``mqcore.contrib``), behind extras."""

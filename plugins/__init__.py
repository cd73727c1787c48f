"""Bundled plugins of mqcore (imported as ``mqcore.plugins``); see ``BUNDLED_PLUGINS``."""

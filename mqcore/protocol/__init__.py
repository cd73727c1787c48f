"""What the broker and its clients share: codes, headers, routes, names and validation.

Both sides import from here, so a remote client never needs :mod:`mqcore.broker`.
"""

"""Test doubles shipped with ecoguard, for its own tests and for users' tests.

Nothing here is imported by ``import ecoguard``. ``models`` needs torch and transformers.
"""
